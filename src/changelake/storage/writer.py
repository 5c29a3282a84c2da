"""Writing data files and deletion-vector files from Spark executors.

Values are checked on the way out (types, NOT NULL) by expressions inside the write job, so a bad
row fails the job before anything is committed; the error is translated for the user.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TypeVar

from pyspark.sql import DataFrame
from pyspark.sql.types import DataType

from changelake.catalog.model import DataFile, NewDeletes
from changelake.errors import InvalidStatementError, TypeMismatchError, UnsupportedError
from changelake.schema import (
    KEY_HASHES,
    ROW_VERSION,
    STORED_ROW_ID,
    Column,
    TableSchema,
    check_column_name,
    key_hashes,
    quoted,
)
from changelake.spark import native
from changelake.spark.errors import current_statement, not_null_marker, spark_errors
from changelake.spark.local import sql_literal
from changelake.storage.deletion import DV_FILE, DV_POS, counted
from changelake.storage.footers import describe_files
from changelake.storage.index import index_files
from changelake.storage.snapshot import FILE, POS, RID, VER, spark_type
from changelake.storage.warehouse import Warehouse

T = TypeVar("T")
_ROWS_PER_FILE = 2_000_000

# The families of the table types: a value may go into a column if its family may be cast to the
# column's (``_ALLOWED``); others are a type mismatch. A Spark type's family is its table type's
# (``_SPARK_TO_TYPE``), a NULL literal's (void) its own.
_FAMILY = {
    "int": "number",
    "bigint": "number",
    "double": "number",
    "string": "string",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "binary": "binary",
}
_ALLOWED = {
    "number": {"number", "string", "boolean", "null"},
    "string": {"string", "number", "boolean", "date", "timestamp", "null"},
    "boolean": {"boolean", "string", "number", "null"},
    "date": {"date", "timestamp", "string", "null"},
    "timestamp": {"timestamp", "date", "string", "null"},
    "binary": {"binary", "string", "null"},
}


def _family(dtype: DataType) -> str:
    name = dtype.simpleString()
    if name.startswith("decimal"):
        return "number"
    if name == "void":
        return "null"
    return _FAMILY.get(_SPARK_TO_TYPE.get(name, name), name)


def check_assignable(source: DataType, target_type: str, *, column: str, table: str) -> None:
    """Raise TypeMismatchError if a ``source`` value can never go into a ``target_type`` column."""
    target = _family(spark_type(target_type))
    if _family(source) not in _ALLOWED.get(target, {target}):
        raise TypeMismatchError(
            f"Column {column!r} of table {table} is {target_type.upper()}, but the value given for"
            f" it is {source.simpleString().upper()}; cast it explicitly or fix the value."
        )


def conform(
    values: Sequence[tuple[str, DataType]], schema: TableSchema, *, table: str
) -> list[str]:
    """SQL expressions casting ``values`` ((SQL expression, Spark type) of each of the table's
    columns, in table order) to the table's physical columns (text: one call into the JVM for
    all of them), a NULL in a NOT NULL column failing the job."""
    exprs = []
    for col, (source, dtype) in zip(schema.columns, values, strict=True):
        check_assignable(dtype, col.type, column=col.name, table=table)
        value = f"CAST({source} AS {col.type})"
        if not col.nullable:
            marker = sql_literal(not_null_marker(f"{table}.{col.name}"))
            value = f"CASE WHEN {value} IS NULL THEN raise_error({marker}) ELSE {value} END"
        exprs.append(f"{value} AS {quoted(col.physical)}")
    return exprs


def data_columns(
    values: Sequence[tuple[str, DataType]],
    schema: TableSchema,
    *,
    table: str,
    row_id: str | None = None,
    row_version: str | None = None,
) -> list[str]:
    """SQL expressions of a data file's columns: the table's (``conform``), the identities
    ``row_id`` and ``row_version`` (SQL expressions; None: NULL) and, for a table with a row key
    and no aggregate state, its ``KEY_HASHES``."""
    columns = conform(values, schema, table=table)
    for value, hidden in ((row_id, STORED_ROW_ID), (row_version, ROW_VERSION)):
        columns.append(f"CAST({value or 'NULL'} AS BIGINT) AS {hidden}")
    key = schema.row_key
    # a table with aggregate state finds its stored rows by their addresses, never by a
    # lookup: its hashes would only make its files (and its refreshes' inputs) larger
    if key is not None and not schema.state:
        source = values[schema.columns.index(key)][0]
        hashes = key_hashes(f"CAST({source} AS STRING)")
        columns += [f"{h} AS {name}" for h, (name, _, _) in zip(hashes, KEY_HASHES, strict=True)]
    return columns


@contextmanager
def translated_errors(*, table: str) -> Iterator[None]:
    """Turn Spark failures caused by bad values into changelake errors, named after the enclosing
    statement (or, outside one, after the write to ``table``)."""
    with spark_errors(current_statement() or f"Writing to {table}"):
        yield


def run_checked(action: Callable[[], T], *, table: str) -> T:
    with translated_errors(table=table):
        return action()


def write_data(
    warehouse: Warehouse,
    df: DataFrame,
    *,
    schema: TableSchema,
    table: str,
    directory: str,
    row_id: str | None = None,
    row_version: str | None = None,
    partitions: int | None = None,
    cached: bool = False,
    one_file_if_small: bool = False,
) -> list[DataFile]:
    """Write ``df`` as data files into ``directory`` (not committed), in ``partitions`` files if
    given (``cached``: ``df`` is a projection of persisted rows, regrouped without a shuffle),
    or, with ``one_file_if_small``, in one file if its plan ran as small (``Relation.frame``).

    The first columns of ``df`` are the table's, in table order; ``row_id`` and ``row_version``
    name further columns of ``df`` holding identities to materialize. A table with a row key
    and no aggregate state has its ``KEY_HASHES`` written too.
    """
    values = [(quoted(f.name), f.dataType) for f in df.schema.fields[: len(schema.columns)]]
    columns = data_columns(
        values,
        schema,
        table=table,
        row_id=row_id and quoted(row_id),
        row_version=row_version and quoted(row_version),
    )
    out = native.select(df, columns)
    if partitions is not None:
        # Rows already in memory are regrouped for free; otherwise spread the write evenly.
        out = out.coalesce(partitions) if cached or df.is_cached else out.repartition(partitions)
    uri = warehouse.uri(directory)
    run_checked(
        lambda: native.write_parquet(out, uri, one_file_if_small=one_file_if_small), table=table
    )
    return index_files(
        df.sparkSession, warehouse, describe_files(warehouse, directory), directory=directory
    )


def partitions_for(rows: int) -> int:
    return max(1, -(-rows // _ROWS_PER_FILE))


def write_deletes(
    warehouse: Warehouse,
    deleted: DataFrame,
    *,
    counts: Mapping[str, int] | None,
    directory: str,
    table: str,
    images: TableSchema | None,
    small: bool = False,
) -> tuple[dict[str, NewDeletes], bool]:
    """Write the deleted (``_cl_file``, ``_cl_pos``) pairs of ``deleted`` as one DV file; with
    ``images`` (the table's schema), each beside the row's before-image: ``deleted`` then also
    has the old values under the columns' names and ``_cl_rid`` / ``_cl_ver``.

    Returns the deletes recorded per data file name and whether a position was written twice.
    ``counts``: the deleted rows per data file name, when the caller counted them (then nothing
    is written for none); else they are read from the file written (``deletion.counted``), so
    the write is the statement's only job. ``small``: ``deleted`` comes from a small input,
    which one task reads (no shuffle, no second job).
    """
    if counts is not None and not counts:
        return {}, False
    columns = dv_columns(images)
    # One file; from a large input through a shuffle of the (few) deleted rows, so the read that
    # finds them (or materializes them, when ``deleted`` is persisted) stays parallel.
    selected = native.select(deleted, columns)
    dv = selected.coalesce(1) if small else selected.repartition(1)
    run_checked(lambda: native.write_parquet(dv, warehouse.uri(directory)), table=table)
    written = describe_files(warehouse, directory)
    if not written:
        return {}, False
    (dv_file,) = written
    repeated = False
    if counts is None:
        counts, repeated = counted(deleted.sparkSession, warehouse, dv_file.path)
    return {
        name: NewDeletes(file_path="", dv_path=dv_file.path, row_count=n)
        for name, n in counts.items()
    }, repeated


def dv_columns(images: TableSchema | None, sources: Mapping[str, str] | None = None) -> list[str]:
    """SQL expressions of a DV file's columns over deleted rows with their ``FILE`` and ``POS``
    and, with ``images`` (see ``write_deletes``), their old values and identity; ``sources``:
    the SQL expression of a column whose value is not under its name."""
    columns = [f"{FILE} AS {DV_FILE}", f"{POS} AS {DV_POS}"]
    if images is not None:
        sources = sources or {}
        columns += [
            f"CAST({sources.get(c.name, quoted(c.name))} AS {c.type}) AS {quoted(c.physical)}"
            for c in images.columns
        ]
        columns += [f"{RID} AS {STORED_ROW_ID}", f"{VER} AS {ROW_VERSION}"]
    return columns


_SPARK_TO_TYPE = {
    "int": "int",
    "smallint": "int",
    "tinyint": "int",
    "bigint": "bigint",
    "float": "double",
    "double": "double",
    "string": "string",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp",
    "binary": "binary",
    "void": "string",
}


def schema_of_dataframe(df: DataFrame, *, about: str) -> TableSchema:
    """The table schema of ``df``'s columns (all nullable); errors name ``about``."""
    columns = []
    seen: set[str] = set()
    for i, field in enumerate(df.schema.fields, start=1):
        check_column_name(field.name)
        if field.name.lower() in seen:
            raise InvalidStatementError(
                f"{about}: column name {field.name} appears twice; alias one."
            )
        seen.add(field.name.lower())
        columns.append(Column(i, field.name, table_type(field.dataType, field.name, about), True))
    return TableSchema(tuple(columns))


def table_type(data_type: DataType, name: str, about: str) -> str:
    """The table column type that holds Spark values of ``data_type`` (column ``name``)."""
    simple = data_type.simpleString()
    type_name = simple if simple.startswith("decimal") else _SPARK_TO_TYPE.get(simple)
    if type_name is None:
        raise UnsupportedError(
            f"{about}: column {name} would have type {simple.upper()}, which tables"
            " cannot hold; cast it to a supported type."
        )
    return type_name
