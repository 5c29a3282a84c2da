"""An external table's rows as changelake stores them: the source's columns in changelake types,
and a row key (the hidden ROW_KEY column) made of the source key's values, so the rows of one
source key keep one identity and a source UPDATE is an update pair in CHANGES."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from changelake.catalog.model import (
    EXTERNAL_PROPERTY,
    DataFile,
)
from changelake.catalog.requests import CreateTable, IfExists
from changelake.catalog.writes import TableWrite
from changelake.schema import ROW_KEY, Column, TableSchema, quoted
from changelake.spark.local import sql_literal


def table_schema(columns: Sequence[tuple[str, str]]) -> TableSchema:
    """The stored schema of (name, changelake type) columns, with the row key last."""
    visible = [Column(i + 1, name, type_, True) for i, (name, type_) in enumerate(columns)]
    return TableSchema((*visible, Column(len(visible) + 1, ROW_KEY, "string", True)))


def row_key_sql(
    keys: Sequence[str], types: dict[str, str], prefix: str = "", table: str = ""
) -> str:
    """The row key of the key columns' values (SQL text): JSON of their values, timestamps as
    microseconds (so the key does not depend on the session's time zone). ``prefix``: the key's
    values are in columns named ``prefix + key``, of ``table`` if given."""
    parts = []
    for name in keys:
        value = f"{table}.{quoted(prefix + name)}" if table else quoted(prefix + name)
        if types[name].startswith("timestamp"):
            value = f"unix_micros(CAST({value} AS TIMESTAMP))"
        parts.append(f"{sql_literal(name)}, {value}")
    return f"to_json(named_struct({', '.join(parts)}))"


def row_key(keys: Sequence[str], types: dict[str, str], prefix: str = "") -> SparkColumn:
    """``row_key_sql`` as a column."""
    return F.expr(row_key_sql(keys, types, prefix))


def stored_rows(df: DataFrame, schema: TableSchema, keys: Sequence[str]) -> DataFrame:
    """``df`` (the source's columns by name) as the table's stored columns and its row key."""
    types = {c.name: c.type for c in schema.stored}
    values = [F.col(quoted(c.name)).cast(c.type).alias(c.name) for c in schema.stored]
    return df.select(*values).withColumn(ROW_KEY, row_key(keys, types))


def first_load(
    name: str,
    schema: TableSchema,
    properties: Sequence[tuple[str, str]],
    files: Sequence[DataFile],
    if_exists: IfExists,
    *,
    kind: str,
) -> TableWrite:
    """An external table's first rows: the write that creates table ``name``, marked an external
    table of ``kind``, holding ``files``. Its commit defines the table (``DefineExternalTable``)."""
    marked = {**dict(properties), EXTERNAL_PROPERTY: kind}
    table = CreateTable(name, schema, tuple(sorted(marked.items())), if_exists=if_exists)
    return TableWrite.creating(table, files)
