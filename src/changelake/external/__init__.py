"""External tables: other databases and file directories read incrementally."""
