"""Relations: a changelake warehouse has one namespace, so dbt's schema is a name prefix.

A relation of schema ``main`` is the warehouse object of its own name; a relation of any other
schema ``s`` is the object ``s__name``. So dbt's custom schemas, and the schema of each test run,
stay apart in one warehouse, and ``drop_schema`` drops the objects with its prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dbt_common.dataclass_schema import StrEnum

from dbt.adapters.base.relation import BaseRelation, Policy

MAIN = "main"
SEPARATOR = "__"


def stored_name(schema: str | None, identifier: str) -> str:
    """The warehouse's name for ``identifier`` in dbt schema ``schema``."""
    if not schema or schema.lower() == MAIN:
        return identifier.lower()
    return f"{schema}{SEPARATOR}{identifier}".lower()


def split_name(name: str) -> tuple[str, str]:
    """(schema, identifier) of a warehouse object's name: the inverse of ``stored_name``."""
    schema, sep, identifier = name.partition(SEPARATOR)
    return (schema, identifier) if sep and schema and identifier else (MAIN, name)


class ChangelakeRelationType(StrEnum):
    """dbt's relation types, and changelake's dynamic table (named as dbt-snowflake names it)."""

    Table = "table"
    View = "view"
    CTE = "cte"
    External = "external"
    DynamicTable = "dynamic_table"


@dataclass(frozen=True, eq=False, repr=False)
class ChangelakeRelation(BaseRelation):
    type: ChangelakeRelationType | None = None
    quote_character: str = "`"
    quote_policy: Policy = field(
        default_factory=lambda: Policy(database=False, schema=False, identifier=False)
    )
    include_policy: Policy = field(
        default_factory=lambda: Policy(database=False, schema=True, identifier=True)
    )
    renameable_relations: frozenset = frozenset({ChangelakeRelationType.Table})
    replaceable_relations: frozenset = frozenset(
        {ChangelakeRelationType.View, ChangelakeRelationType.Table}
    )

    def render(self) -> str:
        identifier = self.path.identifier if self.include_policy.identifier else None
        if identifier is None:  # a schema alone (create_schema, list_relations)
            return (self.path.schema or "") if self.include_policy.schema else ""
        schema = self.path.schema if self.include_policy.schema else None
        name = stored_name(schema, identifier)
        return self.quoted(name) if self.quote_policy.identifier else name

    @property
    def is_dynamic_table(self) -> bool:
        return self.type == ChangelakeRelationType.DynamicTable

    @classmethod
    def get_relation_type(cls) -> type[ChangelakeRelationType]:
        return ChangelakeRelationType
