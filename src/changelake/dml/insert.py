"""INSERT INTO ... VALUES | SELECT, and appends from Python."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.arrow_types import arrow_type
from changelake.catalog.writes import WriteKind
from changelake.dml.common import Target, commit_write, write_rows
from changelake.dml.result import StatementResult
from changelake.dml.statements import Insert
from changelake.errors import (
    InvalidStatementError,
    NotNullViolationError,
    TypeMismatchError,
)
from changelake.plan.bind import Binder
from changelake.runtime.env import Context
from changelake.schema import ROW_VERSION, STORED_ROW_ID, Column, TableSchema
from changelake.storage.footers import describe_files, trusted_statistics
from changelake.storage.warehouse import Warehouse

# The column types whose literals ``_coerce`` converts (and DECIMAL); a row with any other type of
# column (TIMESTAMP) goes through Spark.
_LITERAL_TYPES = frozenset({"int", "bigint", "double", "boolean", "string", "date", "binary"})


def target_columns(schema: TableSchema, listed: list[str] | None, *, table: str) -> list[Column]:
    """The columns an INSERT provides values for, in the order given."""
    if listed is None:
        return list(schema.columns)
    chosen = [schema.column(name, table=table) for name in listed]
    if len({c.column_id for c in chosen}) != len(chosen):
        raise InvalidStatementError(f"INSERT into {table} names a column more than once.")
    return chosen


def widened_to_table(
    df: DataFrame, schema: TableSchema, chosen: list[Column], *, table: str
) -> DataFrame:
    """``df`` (one column per chosen column) widened to every table column, NULL where missing."""
    if len(df.columns) != len(chosen):
        raise InvalidStatementError(
            f"INSERT into {table} expects {len(chosen)} value(s) per row"
            f" ({', '.join(c.name for c in chosen)}), but the source gives {len(df.columns)}."
        )
    df = df.toDF(*[f"_c{i}" for i in range(len(chosen))])  # by position: names may repeat
    given = {c.column_id: df.columns[i] for i, c in enumerate(chosen)}
    exprs = []
    for c in schema.columns:
        if c.column_id in given:
            exprs.append(F.col(f"`{given[c.column_id]}`").alias(c.name))
        elif not c.nullable:
            raise NotNullViolationError(
                f"Column {table}.{c.name} is NOT NULL but the INSERT gives it no value."
            )
        else:
            exprs.append(F.lit(None).cast(c.type).alias(c.name))
    return df.select(*exprs)


def insert(ctx: Context, statement: Insert) -> StatementResult:
    """INSERT [OVERWRITE] INTO table [(columns)] VALUES ... | SELECT ..."""
    source, overwrite = statement.source, statement.overwrite
    target = (Target.of if overwrite else Target.for_append)(ctx, statement.table)
    schema, name = target.state.schema, target.info.name
    chosen = target_columns(schema, statement.columns, table=name)
    files = None
    binder = Binder(ctx)
    if isinstance(source, exp.Values) and not overwrite:
        files = _write_literal_rows(
            ctx.warehouse, source, schema, chosen, table=name, statement_id=ctx.statement_id
        )
    if files is None:
        df = widened_to_table(binder.query(source), schema, chosen, table=name)
        files = write_rows(ctx, df, schema=schema, table=name)
    removed = tuple(f.file.path for f in target.state.files) if overwrite else ()
    write = target.write(
        WriteKind.CHANGE if overwrite else WriteKind.APPEND,
        added=tuple(files),
        removed=removed,
        inserted=sum(f.row_count for f in files),
        deleted=target.state.live_rows if overwrite else 0,
    )
    operation = "INSERT OVERWRITE" if overwrite else "INSERT"
    return commit_write(ctx, operation, write, stream_reads=binder.stream_reads.values())


def append_dataframe(ctx: Context, target: Target, df: DataFrame) -> StatementResult:
    """Append a Spark DataFrame, matching its columns to the table's by name."""
    schema, name = target.state.schema, target.info.name
    by_lower = {c.lower(): c for c in df.columns}
    unknown = [c for c in df.columns if schema.find(c) is None]
    if unknown:
        schema.column(unknown[0], table=name)  # raises with a suggestion
    chosen = [c for c in schema.columns if c.name.lower() in by_lower]
    df = df.select(*[F.col(f"`{by_lower[c.name.lower()]}`") for c in chosen])
    df = widened_to_table(df, schema, chosen, table=name)
    files = write_rows(ctx, df, schema=schema, table=name)
    inserted = sum(f.row_count for f in files)
    write = target.write(WriteKind.APPEND, added=tuple(files), inserted=inserted)
    return commit_write(ctx, "INSERT", write)


# -- literal rows: written by the driver, which already holds them in the statement text ------


def _literal_value(node: exp.Expression) -> tuple[bool, Any]:
    if isinstance(node, exp.Null):
        return True, None
    if isinstance(node, exp.Boolean):
        return True, node.this
    if isinstance(node, exp.Literal):
        if node.is_string:
            return True, node.this
        text = node.this
        if "e" in text.lower():  # 1e3 is a DOUBLE in Spark SQL, 1.5 a DECIMAL
            return True, float(text)
        if "." in text:
            return True, decimal.Decimal(text)
        return True, int(text)
    if isinstance(node, exp.Neg):
        ok, value = _literal_value(node.this)
        return ok and isinstance(
            value, int | float | decimal.Decimal
        ), -value if ok and value is not None else None
    return False, None


def _takes_literals(column: Column) -> bool:
    return column.type in _LITERAL_TYPES or column.type.startswith("decimal")


def _write_literal_rows(
    warehouse: Warehouse,
    values: exp.Values,
    schema: TableSchema,
    chosen: list[Column],
    *,
    table: str,
    statement_id: str,
) -> list | None:
    """Write VALUES made only of literals straight to Parquet; None to fall back to Spark."""
    if not all(_takes_literals(c) for c in schema.columns):
        return None
    rows = []
    for row in values.expressions:
        items = row.expressions if isinstance(row, exp.Tuple) else [row]
        parsed = [_literal_value(i) for i in items]
        if not all(ok for ok, _ in parsed):
            return None
        if len(parsed) != len(chosen):
            raise InvalidStatementError(
                f"INSERT into {table} expects {len(chosen)} value(s) per row"
                f" ({', '.join(c.name for c in chosen)}), but a row gives {len(parsed)}."
            )
        rows.append([v for _, v in parsed])
    given = {c.column_id: i for i, c in enumerate(chosen)}
    arrays, fields = [], []
    for c in schema.columns:
        kind = arrow_type(c.type)
        raw = [r[given[c.column_id]] for r in rows] if c.column_id in given else [None] * len(rows)
        if not c.nullable and any(v is None for v in raw):
            raise NotNullViolationError(
                f"NULL value for NOT NULL column {table}.{c.name}; nothing was written."
                " Provide a value or make the column nullable."
            )
        arrays.append(_to_arrow(raw, kind, column=c, table=table))
        fields.append(pa.field(c.physical, kind))
    arrays += [pa.nulls(len(rows), pa.int64()), pa.nulls(len(rows), pa.int64())]
    fields += [pa.field(STORED_ROW_ID, pa.int64()), pa.field(ROW_VERSION, pa.int64())]
    data = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    return write_arrow(warehouse, data, statement_id=statement_id)


def _to_arrow(raw: list[Any], kind: pa.DataType, *, column: Column, table: str) -> pa.Array:
    def mismatch(value: Any) -> TypeMismatchError:
        return TypeMismatchError(
            f"Type mismatch for column {table}.{column.name} ({column.type.upper()}): value"
            f" {value!r} cannot be converted; nothing was written. Fix the value or cast it."
        )

    out = []
    for v in raw:
        if v is None:
            out.append(None)
            continue
        try:
            out.append(_coerce(v, column.type))
        except (ValueError, TypeError, decimal.InvalidOperation, ArithmeticError):
            raise mismatch(v) from None  # the message says it all; Python's adds nothing
    try:
        return pa.array(out, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        bad = next((v for v in raw if v is not None), None)
        raise mismatch(bad) from None


def _coerce(value: Any, type_name: str) -> Any:
    if type_name in ("int", "bigint"):
        # as Spark's CAST: numbers truncate toward zero, strings must be whole numbers
        result = int(value.strip()) if isinstance(value, str) else int(value)
        limit = 2**31 if type_name == "int" else 2**63
        if not -limit <= result < limit:
            raise ValueError("out of range")
        return result
    if type_name == "double":
        return float(value)
    if type_name.startswith("decimal"):
        _, scale = type_name[8:-1].split(",")
        return decimal.Decimal(str(value).strip()).quantize(
            decimal.Decimal(1).scaleb(-int(scale)), rounding=decimal.ROUND_HALF_UP
        )
    if type_name == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float | decimal.Decimal):
            return value != 0
        text = str(value).strip().lower()
        if text in ("true", "t", "yes", "y", "1"):
            return True
        if text in ("false", "f", "no", "n", "0"):
            return False
        raise ValueError(text)
    if type_name == "string":
        if isinstance(value, bool):
            return "true" if value else "false"
        return value if isinstance(value, str) else str(value)
    if type_name == "date":
        if not isinstance(value, str):
            raise TypeError(value)
        return dt.date.fromisoformat(value.strip())
    if type_name == "binary":
        if isinstance(value, str):
            return value.encode()
        raise TypeError(value)
    raise TypeError(type_name)


def write_arrow(wh: Warehouse, data: pa.Table, *, statement_id: str) -> list:
    """Write an Arrow table (physical columns) as one data file of the statement."""
    directory = wh.data_dir(statement_id)
    wh.fs.create_dir(wh.fs_path(directory), recursive=True)
    pq.write_table(
        data,
        wh.fs_path(f"{directory}/part-00000-{statement_id}.parquet"),
        filesystem=wh.fs,
        write_statistics=trusted_statistics(data),
    )
    return describe_files(wh, directory)
