"""dbt-changelake: dbt models as changelake tables, views and dynamic tables."""

from dbt.adapters.base import AdapterPlugin
from dbt.adapters.changelake.column import ChangelakeColumn
from dbt.adapters.changelake.connections import (
    ChangelakeConnectionManager,
    ChangelakeCredentials,
)
from dbt.adapters.changelake.impl import ChangelakeAdapter
from dbt.adapters.changelake.relation import ChangelakeRelation
from dbt.include import changelake

Plugin = AdapterPlugin(
    adapter=ChangelakeAdapter,  # type: ignore[arg-type]
    credentials=ChangelakeCredentials,
    include_path=changelake.PACKAGE_PATH,
)

__all__ = [
    "ChangelakeAdapter",
    "ChangelakeColumn",
    "ChangelakeConnectionManager",
    "ChangelakeCredentials",
    "ChangelakeRelation",
    "Plugin",
]
