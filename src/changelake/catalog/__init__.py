"""The metadata database (no Spark here)."""

from changelake.catalog.store import Catalog

__all__ = ["Catalog"]
