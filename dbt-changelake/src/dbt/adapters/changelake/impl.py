"""The changelake adapter: relations and columns from changelake's catalog (SHOW statements and
a query's schema), no information_schema; materializations in ``dbt/include/changelake``."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from dbt_common.contracts.constraints import ConstraintType
from dbt_common.exceptions import DbtDatabaseError, DbtRuntimeError

from dbt.adapters.base import AdapterConfig, available
from dbt.adapters.base.impl import ConstraintSupport
from dbt.adapters.base.relation import InformationSchema
from dbt.adapters.changelake.column import ChangelakeColumn
from dbt.adapters.changelake.connections import DATABASE, ChangelakeConnectionManager
from dbt.adapters.changelake.relation import (
    MAIN,
    ChangelakeRelation,
    ChangelakeRelationType,
    split_name,
)
from dbt.adapters.sql import SQLAdapter

# The SHOW statements that list a warehouse's objects, and the dbt type of what each lists.
_LISTINGS = (
    ("SHOW DYNAMIC TABLES", ChangelakeRelationType.DynamicTable),
    ("SHOW TABLES", ChangelakeRelationType.Table),
    ("SHOW VIEWS", ChangelakeRelationType.View),
)


@dataclass
class ChangelakeConfig(AdapterConfig):
    """Model configs the adapter reads (dynamic tables name theirs as dbt-snowflake does)."""

    target_lag: str | None = None
    refresh_mode: str | None = None
    initialize: str | None = None
    on_configuration_change: str | None = None
    merge_update_columns: list[str] | None = None
    merge_exclude_columns: list[str] | None = None


class ChangelakeAdapter(SQLAdapter):
    ConnectionManager = ChangelakeConnectionManager
    Relation = ChangelakeRelation
    Column = ChangelakeColumn
    AdapterSpecificConfigs = ChangelakeConfig

    CONSTRAINT_SUPPORT = {
        ConstraintType.check: ConstraintSupport.NOT_SUPPORTED,
        ConstraintType.not_null: ConstraintSupport.ENFORCED,
        ConstraintType.unique: ConstraintSupport.NOT_SUPPORTED,
        ConstraintType.primary_key: ConstraintSupport.NOT_SUPPORTED,
        ConstraintType.foreign_key: ConstraintSupport.NOT_SUPPORTED,
    }

    @classmethod
    def date_function(cls) -> str:
        return "current_timestamp()"

    @classmethod
    def is_cancelable(cls) -> bool:
        return False

    @classmethod
    def quote(cls, identifier: str) -> str:
        return f"`{identifier}`"

    # -- seeds: agate's column types as changelake types ----------------------------------------

    @classmethod
    def convert_text_type(cls, agate_table: Any, col_idx: int) -> str:
        return "string"

    @classmethod
    def convert_number_type(cls, agate_table: Any, col_idx: int) -> str:
        import agate

        decimals = agate_table.aggregate(agate.MaxPrecision(col_idx))
        return "double" if decimals else "bigint"

    @classmethod
    def convert_integer_type(cls, agate_table: Any, col_idx: int) -> str:
        return "bigint"

    @classmethod
    def convert_boolean_type(cls, agate_table: Any, col_idx: int) -> str:
        return "boolean"

    @classmethod
    def convert_datetime_type(cls, agate_table: Any, col_idx: int) -> str:
        return "timestamp"

    @classmethod
    def convert_date_type(cls, agate_table: Any, col_idx: int) -> str:
        return "date"

    @classmethod
    def convert_time_type(cls, agate_table: Any, col_idx: int) -> str:
        return "string"

    # -- what exists --------------------------------------------------------------------------

    def _objects(self) -> list[tuple[str, str, int | None]]:
        """Every object of the warehouse: (name, dbt type, rows for tables)."""
        found: dict[str, tuple[str, str, int | None]] = {}
        for statement, kind in _LISTINGS:
            _, table = self.execute(statement, fetch=True)
            for row in table:
                name = str(row["name"])
                rows = row.get("rows") if "rows" in table.column_names else None
                found.setdefault(name, (name, str(kind), None if rows is None else int(rows)))
        return list(found.values())

    def list_relations_without_caching(
        self, schema_relation: ChangelakeRelation
    ) -> list[ChangelakeRelation]:
        wanted = (schema_relation.schema or MAIN).lower()
        relations = []
        for name, kind, _ in self._objects():
            schema, identifier = split_name(name)
            if schema == wanted:
                relations.append(
                    self.Relation.create(
                        database=schema_relation.database,
                        schema=schema_relation.schema,
                        identifier=identifier,
                        type=kind,
                    )
                )
        return relations

    def list_schemas(self, database: str) -> list[str]:
        return sorted({MAIN} | {split_name(name)[0] for name, _, _ in self._objects()})

    def check_schema_exists(self, database: str, schema: str) -> bool:
        return schema.lower() in self.list_schemas(database)

    def create_schema(self, relation: ChangelakeRelation) -> None:
        pass  # a schema is a name prefix: it exists with its first object

    def drop_schema(self, relation: ChangelakeRelation) -> None:
        """Drop every object of the schema: dependents (views, dynamic tables) first."""
        self.cache.drop_schema(relation.database, relation.schema)
        left = self.list_relations_without_caching(relation)
        while left:
            failed = []
            for rel in sorted(left, key=lambda r: r.type == ChangelakeRelationType.Table):
                try:
                    self.execute(_drop_statement(rel))
                except DbtDatabaseError:
                    failed.append(rel)  # another object of the schema still depends on it
            if len(failed) == len(left):
                raise DbtRuntimeError(
                    f"Could not drop schema {relation.schema}: objects outside it depend on"
                    f" {', '.join(r.render() for r in failed)}."
                )
            left = failed

    @available
    def get_columns_in_relation(self, relation: ChangelakeRelation) -> list[ChangelakeColumn]:
        try:
            _, cursor = self.connections.add_select_query(f"SELECT * FROM {relation} LIMIT 0")
        except DbtDatabaseError as e:
            if "does not exist" in str(e):
                return []
            raise
        return [self.Column(name, kind) for name, kind, *_ in cursor.description or []]

    def expand_column_types(self, goal: Any, current: Any) -> None:
        pass  # no sized types: nothing to widen

    @available
    def dynamic_table_changes(
        self, relation: ChangelakeRelation, sql: str, target_lag: str, refresh_mode: str
    ) -> dict[str, Any]:
        """How a dynamic table differs from its model: ``query`` (its query changed: replace
        it) and ``settings`` (``option = value`` for ALTER ... SET: lag, refresh mode)."""
        # changelake's own reading of lags; imported here, as it brings changelake's catalog
        # (SQLAlchemy: half a second), which only dynamic tables need
        from changelake.dynamic.spec import describe_lag
        from changelake.dynamic.spec import target_lag as lag_seconds

        _, table = self.execute("SHOW DYNAMIC TABLES", fetch=True)
        found = [dict(zip(table.column_names, r, strict=True)) for r in table]
        state = next((r for r in found if r["name"] == relation.render()), None)
        if state is None:
            raise DbtRuntimeError(f"{relation} is not a dynamic table (SHOW DYNAMIC TABLES).")
        about = f"dynamic table {relation}"
        lag = describe_lag(lag_seconds(target_lag, about=about))
        settings = []
        if lag != state["target_lag"]:
            value = "DOWNSTREAM" if lag == "DOWNSTREAM" else f"'{lag}'"
            settings.append(f"target_lag = {value}")
        if refresh_mode.upper() != str(state["refresh_mode"]).upper():
            settings.append(f"refresh_mode = {refresh_mode.upper()}")
        return {"query": _squeezed(state["text"]) != _squeezed(sql), "settings": settings}

    # -- dbt docs: the catalog from SHOW TABLES and each relation's columns --------------------

    def _get_one_catalog(
        self,
        information_schema: InformationSchema,
        schemas: set[str],
        used_schemas: Any,
    ) -> Any:
        from dbt_common.clients.agate_helper import table_from_rows

        rows = []
        wanted = {s.lower() for s in schemas}
        for name, kind, count in self._objects():
            schema, identifier = split_name(name)
            if schema not in wanted:
                continue
            relation = self.Relation.create(
                database=information_schema.database or DATABASE,
                schema=next(s for s in schemas if s.lower() == schema),
                identifier=identifier,
                type=kind,
            )
            for index, column in enumerate(self.get_columns_in_relation(relation), start=1):
                rows.append(
                    (
                        relation.database,
                        relation.schema,
                        identifier,
                        "table" if kind == ChangelakeRelationType.DynamicTable else kind,
                        None,
                        None,
                        column.name,
                        index,
                        column.dtype,
                        None,
                        "Row count",
                        count,
                        "Rows in the table's current version",
                        count is not None,
                    )
                )
        return self._catalog_filter_table(table_from_rows(rows, _CATALOG_COLUMNS), used_schemas)

    @available
    def seed_values(self, rows: Any) -> str:
        """Rows of a seed as a VALUES list of string literals (the INSERT casts them)."""
        return ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)

    @available
    def query_columns(self, sql: str) -> list[ChangelakeColumn]:
        """The columns ``sql`` gives, with their types (the query is planned, not run)."""
        _, cursor = self.connections.add_select_query(f"SELECT * FROM ({sql}) AS q LIMIT 0")
        return [self.Column(name, kind) for name, kind, *_ in cursor.description or []]

    def valid_incremental_strategies(self) -> list[str]:
        return ["append", "merge", "delete+insert", "microbatch"]

    def timestamp_add_sql(self, add_to: str, number: int = 1, interval: str = "hour") -> str:
        return f"{add_to} + interval {number} {interval}"

    def debug_query(self) -> None:
        self.execute("SELECT 1 AS id")


_CATALOG_COLUMNS = (
    "table_database",
    "table_schema",
    "table_name",
    "table_type",
    "table_comment",
    "table_owner",
    "column_name",
    "column_index",
    "column_type",
    "column_comment",
    "stats:rows:label",
    "stats:rows:value",
    "stats:rows:description",
    "stats:rows:include",
)


def _squeezed(query: str) -> str:
    return " ".join(query.split()).rstrip(";").strip()


def _literal(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "'true'" if value else "'false'"
    if isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
    elif isinstance(value, dt.date):
        text = value.isoformat()
    else:
        text = str(value)
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _drop_statement(relation: ChangelakeRelation) -> str:
    kind = {
        ChangelakeRelationType.DynamicTable: "DYNAMIC TABLE",
        ChangelakeRelationType.View: "VIEW",
    }.get(relation.type, "TABLE")
    return f"DROP {kind} IF EXISTS {relation}"
