"""External tables: other databases and file directories read incrementally. ``postgresql/``:
a PostgreSQL table by snapshot and logical replication (connection, decoding, snapshot, follow,
scope); ``directory/``: FROM FILES, the files of a directory registered once each;
``objects`` (connections, drop, refresh, DESCRIBE of either kind) and ``rows`` (the row key of
a source key) serve both.
"""
