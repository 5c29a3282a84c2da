"""Source rows as apply events: key, sequence, upsert or delete, and the target's new values.

What an OP COLUMN value means, per FORMAT:

- ODF: 0 (+A) and 3 (+C) upsert, 1 (-R) delete, 2 (-C) ignored (the +C after it carries the
  new image);
- FLINK: ``+I`` and ``+U`` upsert, ``-D`` delete, ``-U`` ignored;
- DEBEZIUM: ``c``, ``u``, ``r`` upsert the ``after`` image, ``d`` deletes the key of the
  ``before`` image; the target's columns are read from those structs, their values as Debezium
  writes them in JSON (``json_values.py``: a date as a day count, binary as base64, ...);
- SNOWFLAKE (the op column is ``METADATA$ACTION``, beside ``METADATA$ISUPDATE``): INSERT upserts,
  DELETE deletes, and the DELETE half of an update is ignored.

Without an OP COLUMN every row is an upsert. ``APPLY AS DELETE WHEN cond`` makes a row for which
``cond`` holds a delete (rows the format ignores stay ignored).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
)

from changelake.changelog.json_values import decoded
from changelake.changelog.spec import ApplySpec, OpFormat
from changelake.changes.columns import METADATA_ISUPDATE
from changelake.dialect import to_spark
from changelake.errors import ColumnNotFoundError, InvalidStatementError, did_you_mean
from changelake.schema import TableSchema, quoted
from changelake.spark.errors import invalid_input
from changelake.storage.snapshot import spark_type
from changelake.storage.writer import check_assignable

SEQ = "_cl_seq"
DELETE = "_cl_del"  # True delete, False upsert, NULL ignored
HASH = "_cl_hash"
PROBLEM = "_cl_problem"

_ODF = "0 (+A), 1 (-R), 2 (-C), 3 (+C)"
_FLINK = "'+I', '-U', '+U', '-D'"
_DEBEZIUM = "'c', 'u', 'd', 'r'"
_SNOWFLAKE = "'INSERT', 'DELETE'"


@dataclass(frozen=True)
class Events:
    """``df``: the key and value columns (target names and types), ``_cl_seq``, ``_cl_del``,
    ``_cl_hash`` (of the values, 0 for deletes) and ``_cl_problem`` (what is wrong with the row,
    NULL for a good one); ``seq_type`` is the sequence column's type."""

    df: DataFrame
    keys: tuple[str, ...]
    values: tuple[str, ...]
    seq_type: str


def _field(fields: list[StructField], name: str, *, what: str, where: str) -> StructField:
    for f in fields:
        if f.name.lower() == name.lower():
            return f
    names = [f.name for f in fields]
    raise ColumnNotFoundError(
        f"{what} {name!r} is not a column of the source of {where}.{did_you_mean(name, names)}"
        f" Its columns are: {', '.join(names)}."
    )


def resolve(
    schema: StructType, path: tuple[str, ...], *, what: str, where: str
) -> tuple[Column, DataType]:
    """The column at ``path`` (through structs, names case-insensitive) and its type."""
    fields, column, dtype = list(schema.fields), None, None
    for i, part in enumerate(path):
        if i and not isinstance(dtype, StructType):
            raise InvalidStatementError(
                f"{what} {'.'.join(path)}: {'.'.join(path[:i])} is not a struct in the source of"
                f" {where}."
            )
        found = _field(fields, part, what=what, where=where)
        column = F.col(quoted(found.name)) if column is None else column[found.name]
        dtype = found.dataType
        fields = list(dtype.fields) if isinstance(dtype, StructType) else []
    assert column is not None and dtype is not None
    return column, dtype


def table_type(dtype: DataType, *, where: str, name: str) -> str:
    """The table type name of an orderable sequence type; InvalidStatementError otherwise."""
    if isinstance(dtype, StructType | MapType | ArrayType | BinaryType | NullType):
        raise InvalidStatementError(
            f"{where}: SEQUENCE BY column {name} is {dtype.simpleString().upper()}, which cannot"
            " be ordered; use a number, string, date or timestamp column (e.g. a version or an"
            " offset)."
        )
    simple = dtype.simpleString()
    return {"smallint": "int", "tinyint": "int", "float": "double"}.get(simple, simple)


def chosen_columns(spec: ApplySpec, schema: TableSchema, reserved: set[str]) -> list[str]:
    """The target columns the apply writes: KEYS plus COLUMNS, or every column but EXCEPT's and
    the SCD TYPE 2 validity columns; each must exist in the target."""
    where = f"APPLY CHANGES INTO {spec.target}"

    def column(name: str) -> str:
        return schema.column(name, table=spec.target).name

    keys = [column(k) for k in spec.keys]
    if spec.columns is not None:
        listed = [column(c) for c in spec.columns]
        for name in listed:
            if name.lower() in reserved:
                raise InvalidStatementError(
                    f"{where}: {name} is written by SCD TYPE 2 itself; do not list it in COLUMNS."
                )
    else:
        excluded = {column(c).lower() for c in spec.except_columns or ()}
        listed = [c for c in schema.names if c.lower() not in excluded]
    return keys + [c for c in listed if c.lower() not in reserved and c not in keys]


def normalize(source: DataFrame, spec: ApplySpec, schema: TableSchema, chosen: list[str]) -> Events:
    """``source`` as events for target columns ``chosen`` (keys first)."""
    where = f"APPLY CHANGES INTO {spec.target}"
    keys, values = chosen[: len(spec.keys)], chosen[len(spec.keys) :]
    seq, seq_dtype = resolve(
        source.schema, spec.sequence_by, what="SEQUENCE BY column", where=where
    )
    seq_type = table_type(seq_dtype, where=where, name=spec.sequence_name)
    fmt = spec.op_format
    op = raw_op = None
    if spec.op_column is not None:
        raw_op, _ = resolve(source.schema, spec.op_column, what="OP COLUMN", where=where)
        op = raw_op
    if fmt is OpFormat.DEBEZIUM:
        images = _debezium_images(source.schema, where)
        deleted = F.lower(raw_op) == "d"

        def value(name: str) -> Column:
            target = spark_type(schema.column(name, table=spec.target).type)
            before, after = (
                _image_value(side, fields, name, target=target, where=where)
                for side, fields in images
            )
            return F.when(deleted, before).otherwise(after)

    else:

        def value(name: str) -> Column:
            found = _field(source.schema.fields, name, what="Column", where=where)
            check_assignable(
                found.dataType, schema.column(name, table=spec.target).type, column=name,
                table=spec.target,
            )  # fmt: skip
            return F.col(quoted(found.name))

    typed = {c: value(c).cast(schema.column(c, table=spec.target).type) for c in chosen}
    kind, unknown = _kind(source, fmt, op, where)
    if spec.delete_when is not None:
        condition = F.coalesce(F.expr(to_spark(spec.delete_when)), F.lit(False))
        kind = F.when(kind.isNotNull() & condition, F.lit(True)).otherwise(kind)
    digest = value_hash([typed[c] for c in values])
    problem = _problem(source, spec, fmt, op, typed, keys, seq, unknown)
    df = source.select(
        *[typed[c].alias(c) for c in chosen],
        seq.alias(SEQ),
        kind.alias(DELETE),
        (F.when(kind, F.lit(0)).otherwise(digest) if values else F.lit(0))
        .cast("bigint")
        .alias(HASH),
        problem.alias(PROBLEM),
    )
    return Events(df, tuple(keys), tuple(values), seq_type)


def value_hash(values: list[Column]) -> Column:
    """A hash of an upsert's values (NULL flags included, so NULLs in other places differ)."""
    if not values:
        return F.lit(0).cast("bigint")
    return F.xxhash64(*values, *[v.isNull() for v in values])


def _debezium_images(
    schema: StructType, where: str
) -> tuple[tuple[str, list[StructField] | None], ...]:
    """(column, its fields) of the ``before`` and ``after`` images; fields None for a column
    that is NULL in every row (JSON read without a schema types it STRING)."""
    images = []
    for side in ("before", "after"):
        found = next((f for f in schema.fields if f.name.lower() == side), None)
        if found is None or not isinstance(found.dataType, StructType | StringType | NullType):
            raise InvalidStatementError(
                f"{where}: FORMAT DEBEZIUM needs struct columns before and after (the row images);"
                f" the source has {', '.join(schema.names)}."
            )
        fields = found.dataType.fields if isinstance(found.dataType, StructType) else None
        images.append((found.name, fields))
    if all(fields is None for _, fields in images):
        raise InvalidStatementError(
            f"{where}: FORMAT DEBEZIUM needs struct columns before and after (the row images);"
            " both are NULL in every row of the source."
        )
    return tuple(images)


def _image_value(
    side: str, fields: list[StructField] | None, name: str, *, target: DataType, where: str
) -> Column:
    """Column ``name`` of image ``side`` as a ``target`` value, read as Debezium writes it
    (``json_values.py``); NULL when the side is NULL in every row."""
    if fields is None:
        return F.lit(None).cast(target)
    found = _field(fields, name, what="Column", where=where)
    return decoded(F.col(quoted(side))[found.name], source=found.dataType, target=target)


def _kind(
    source: DataFrame, fmt: OpFormat | None, op: Column | None, where: str
) -> tuple[Column, Column]:
    """(delete flag: True, False, or NULL when ignored; whether the op value is unknown)."""
    if fmt is None or op is None:
        return F.lit(False), F.lit(False)
    if fmt is OpFormat.ODF:
        upsert, delete, ignored = op.isin(0, 3), op == 1, op == 2
    elif fmt is OpFormat.FLINK:
        upsert, delete, ignored = op.isin("+I", "+U"), op == "-D", op == "-U"
    elif fmt is OpFormat.DEBEZIUM:
        lower = F.lower(op)
        upsert, delete, ignored = lower.isin("c", "u", "r"), lower == "d", F.lit(False)
    else:
        name = next((c for c in source.columns if c.upper() == METADATA_ISUPDATE), None)
        if name is None:
            raise InvalidStatementError(
                f"{where}: FORMAT SNOWFLAKE reads METADATA$ISUPDATE beside the op column"
                " (METADATA$ACTION); the source has no such column."
            )
        is_update = F.coalesce(F.col(quoted(name)), F.lit(False))
        upsert = op == "INSERT"
        delete, ignored = (op == "DELETE") & ~is_update, (op == "DELETE") & is_update
    known = F.coalesce(upsert | delete | ignored, F.lit(False))
    kind = F.when(upsert, F.lit(False)).when(delete, F.lit(True))
    return kind, ~known


def _problem(
    source: DataFrame,
    spec: ApplySpec,
    fmt: OpFormat | None,
    op: Column | None,
    typed: dict[str, Column],
    keys: list[str],
    seq: Column,
    unknown: Column,
) -> Column:
    """What is wrong with a row (NULL if nothing), in the order the checks are listed."""
    checks: list[tuple[Column, Column]] = [
        (typed[k].isNull(), F.lit(f"KEYS column {k} is NULL")) for k in keys
    ]
    checks.append((seq.isNull(), F.lit(f"SEQUENCE BY column {spec.sequence_name} is NULL")))
    if fmt is not None and op is not None:
        expected = {
            OpFormat.ODF: _ODF,
            OpFormat.FLINK: _FLINK,
            OpFormat.DEBEZIUM: _DEBEZIUM,
            OpFormat.SNOWFLAKE: _SNOWFLAKE,
        }[fmt]
        shown = F.coalesce(op.cast("string"), F.lit("NULL"))
        message = F.concat(
            F.lit(f"unknown {fmt.value} op value "), shown, F.lit(f" (expected {expected})")
        )
        checks.append((unknown, message))
        unpaired = _unpaired(source, fmt, op, typed, keys)
        if unpaired is not None:
            checks.append(unpaired)
    problem = F.lit(None).cast("string")
    for condition, message in reversed(checks):
        problem = F.when(condition, message).otherwise(problem)
    return problem


def _unpaired(
    source: DataFrame, fmt: OpFormat, op: Column, typed: dict[str, Column], keys: list[str]
) -> tuple[Column, Column] | None:
    """A -C (-U) whose next row of the same key in ``offset`` order is not its +C (+U); judged
    only when the source has an ``offset`` column."""
    offset = next((c for c in source.columns if c.lower() == "offset"), None)
    if offset is None or fmt not in (OpFormat.ODF, OpFormat.FLINK):
        return None
    before, after = (2, 3) if fmt is OpFormat.ODF else ("-U", "+U")
    order = Window.partitionBy(*[typed[k] for k in keys]).orderBy(F.col(quoted(offset)))
    following = F.lead(op).over(order)
    name = "-C" if fmt is OpFormat.ODF else "-U"
    pair = "+C" if fmt is OpFormat.ODF else "+U"
    return (
        (op == before) & (following.isNull() | (following != after)),
        F.lit(
            f"{name} without its {pair} directly after it (in offset order, same key); an update"
            f" is {name} then {pair} of one key (render key changes with CHANGES (...,"
            " KEYS => (...)))"
        ),
    )


def checked(events: Events, *, spec: ApplySpec) -> Events:
    """``events`` whose keys, sequence and kind fail the Spark job that reads them at a bad
    row, naming it (an InvalidStatementError once translated): the check runs inside the
    apply's own jobs, before anything is written, not in a query of its own.

    The failure is the value of those columns, not a filter: the optimizer drops a filter, and
    everything under it, once it can prove that no row passes a later one. A constant op
    (``'U' AS op``: ignored, so no row is an event) or a constant NULL key or sequence (no row
    can join) made exactly the bad rows disappear with their check. No step can decide
    anything about a row without evaluating its key, sequence or kind."""
    types = {f.name: f.dataType for f in events.df.schema.fields}
    named = [(k, k) for k in events.keys] + [(spec.sequence_name, SEQ)]
    parts: list[Column] = []
    for shown, column in named:
        text = F.col(quoted(column)).cast("string")
        if isinstance(types[column], StringType):
            text = F.concat(F.lit("'"), text, F.lit("'"))
        parts += [F.lit(f", {shown}=" if parts else f"{shown}="), F.coalesce(text, F.lit("NULL"))]
    message = F.concat(
        F.lit(f"APPLY CHANGES INTO {spec.target}: row with "),
        *parts,
        F.lit(": "),
        F.col(PROBLEM),
        F.lit(". Nothing was applied; fix or filter the source rows."),
    )
    bad = F.col(PROBLEM).isNotNull()
    guarded = {*events.keys, SEQ, DELETE}

    def column(name: str) -> Column:
        value = F.col(quoted(name))
        if name in guarded:
            value = F.when(bad, invalid_input(message)).otherwise(value)
        return value.alias(name)

    return replace(events, df=events.df.select(*[column(c) for c in types if c != PROBLEM]))
