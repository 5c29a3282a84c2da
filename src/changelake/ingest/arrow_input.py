"""Arrow and pandas input of ``RowValidator.arrow``: whole columns cast with ``pyarrow.compute``.

A cast is only taken where Arrow's safe cast agrees with the converters of ``values``; a column
whose cast fails, or whose source Arrow cannot cast the same way (floats into DECIMAL, text into
numbers, ...), is converted value by value by those converters instead.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import IngestValidationError
from changelake.ingest.values import MAX_BINARY_BYTES, MAX_STRING_BYTES, display_type
from changelake.schema import Column

_EPOCH = dt.datetime(1970, 1, 1)
_UTC_MICROS = pa.timestamp("us", tz="UTC")
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_NUMBERS = frozenset({"int", "float", "decimal", "text"})
# Source kinds (see _kind) that can hold values of each column type.
_ACCEPTS = {
    "int": _NUMBERS,
    "bigint": _NUMBERS,
    "double": _NUMBERS,
    "decimal": _NUMBERS,
    "boolean": frozenset({"bool", "int", "text"}),
    "string": frozenset({"text", "int", "float", "decimal", "bool"}),
    "binary": frozenset({"bytes", "text"}),
    "date": frozenset({"date", "text"}),
    "timestamp": frozenset({"timestamp", "date", "text"}),
}
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def input_columns(data: Any) -> dict[str, pa.Array | pa.ChunkedArray | list[Any]]:
    """Input column name -> its values: Arrow, or a Python list for a pandas column Arrow
    cannot convert on its own (e.g. an object column mixing ints and text)."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        names, columns = data.column_names, data.columns
    elif type(data).__module__.startswith("pandas"):
        names, columns = _pandas_columns(data)
    else:
        raise IngestValidationError(
            f"Expected a pyarrow Table or RecordBatch or a pandas DataFrame, got"
            f" {type(data).__name__}; pass a list of dicts to rows() instead."
        )
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise IngestValidationError(f"The input has more than one column named {twice[0]!r}.")
    return dict(zip(names, columns, strict=True))


def _pandas_columns(frame: Any) -> tuple[list[str], list[Any]]:
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        return table.column_names, table.columns
    except _ARROW_ERRORS:
        pass
    names, columns = [], []
    for name, series in frame.items():
        names.append(str(name))
        try:
            columns.append(pa.array(series, from_pandas=True))
        except _ARROW_ERRORS:
            missing = series.isna().tolist()
            columns.append(
                [None if m else v for v, m in zip(series.tolist(), missing, strict=True)]
            )
    return names, columns


def _kind(data_type: pa.DataType) -> str:
    t = pa.types
    if t.is_dictionary(data_type):
        return _kind(data_type.value_type)
    checks = (
        ("null", t.is_null),
        ("bool", t.is_boolean),
        ("int", t.is_integer),
        ("float", t.is_floating),
        ("decimal", t.is_decimal),
        ("text", lambda x: t.is_string(x) or t.is_large_string(x) or str(x) == "string_view"),
        (
            "bytes",
            lambda x: (
                t.is_binary(x)
                or t.is_large_binary(x)
                or t.is_fixed_size_binary(x)
                or str(x) == "binary_view"
            ),
        ),
        ("date", t.is_date),
        ("timestamp", t.is_timestamp),
    )
    return next((name for name, check in checks if check(data_type)), "other")


def _target(column: Column) -> str:
    return "decimal" if column.type.startswith("decimal") else column.type


def incompatibility(name: str, data_type: pa.DataType, column: Column) -> str | None:
    """Why input column ``name`` can never fill ``column``, or None when some values can."""
    kind = _kind(data_type)
    if kind == "null" or kind in _ACCEPTS[_target(column)]:
        return None
    return (
        f"Input column {name!r} is {data_type}, which cannot become column {column.name!r}"
        f" of type {display_type(column)}."
    )


def raise_schema_problems(problems: list[str], table: str, columns: tuple[Column, ...]) -> None:
    listed = ", ".join(
        f"{c.name} {display_type(c)}{'' if c.nullable else ' NOT NULL'}" for c in columns
    )
    raise IngestValidationError(
        f"The input does not fit table {table}: {' '.join(problems)} The table's columns are:"
        f" {listed}."
    )


def flatten(source: pa.Array | pa.ChunkedArray) -> pa.Array:
    array = source.combine_chunks() if isinstance(source, pa.ChunkedArray) else source
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def cast(array: pa.Array, column: Column, kind: pa.DataType, *, zone: dt.tzinfo) -> pa.Array | None:
    """``array`` as ``kind`` when a vectorized cast agrees with the converters, else None."""
    source, target = _kind(array.type), _target(column)
    try:
        if source == "null":
            return pa.nulls(len(array), kind)
        if array.type == kind:
            out = array
        elif target in ("int", "bigint"):
            out = pc.cast(array, kind) if source in ("int", "float", "decimal") else None
        elif target == "double":
            out = pc.cast(array, kind) if source in ("int", "float") else None
        elif target == "decimal":
            if source == "int":
                out = pc.cast(pc.cast(array, pa.decimal128(38, 0)), kind)
            elif source == "decimal" and array.type.scale <= kind.scale:
                out = pc.cast(array, kind)
            else:
                out = None
        elif target == "boolean":
            zero_or_one = pc.or_(pc.equal(array, 0), pc.equal(array, 1))
            fits = source == "int" and pc.all(zero_or_one).as_py() is not False
            out = pc.cast(array, kind) if fits else None
        elif target == "string":
            out = pc.cast(array, kind) if source in ("text", "int", "bool") else None
        elif target == "binary":
            out = pc.cast(array, kind) if source == "bytes" else None
        elif target == "date":
            out = pc.cast(array, kind) if source == "date" else None
        else:
            out = _to_utc(array, source, zone)
    except _ARROW_ERRORS:
        return None
    return out if out is not None and within_size(out) else None


def _to_utc(array: pa.Array, source: str, zone: dt.tzinfo) -> pa.Array | None:
    if source == "timestamp" and array.type.tz is not None:
        return pc.cast(array, _UTC_MICROS)
    if source not in ("timestamp", "date"):
        return None
    naive = pc.cast(array, pa.timestamp("us"))
    if zone is dt.timezone.utc:
        return pc.cast(naive, _UTC_MICROS)
    # A wall time skipped by a DST change raises here; the converters move it forward instead.
    local = pc.assume_timezone(naive, timezone=str(zone), ambiguous="earliest", nonexistent="raise")
    return pc.cast(local, _UTC_MICROS)


def python_values(array: pa.Array) -> list[Any]:
    """The values of ``array`` for the converters; timestamps become datetimes (UTC when the
    source has a time zone), with digits below the microsecond dropped."""
    if not pa.types.is_timestamp(array.type):
        return array.to_pylist()
    per_second = _PER_SECOND[array.type.unit]
    aware = array.type.tz is not None
    out: list[Any] = []
    for raw in pc.cast(array, pa.int64()).to_pylist():
        if raw is None:
            out.append(None)
            continue
        try:
            moment = _EPOCH + dt.timedelta(microseconds=raw * 10**6 // per_second)
        except OverflowError:
            out.append(raw)  # outside years 1..9999: the converter rejects a bare number
            continue
        out.append(moment.replace(tzinfo=dt.timezone.utc) if aware else moment)
    return out


def within_size(array: pa.Array) -> bool:
    """False when a string or binary value of ``array`` is over its size limit."""
    if pa.types.is_string(array.type):
        limit = MAX_STRING_BYTES
    elif pa.types.is_binary(array.type):
        limit = MAX_BINARY_BYTES
    else:
        return True
    if array.nbytes <= limit or not len(array):
        return True
    longest = pc.max(pc.binary_length(array)).as_py()
    return longest is None or longest <= limit


def row_of(columns: dict[str, Any], index: int) -> dict[str, Any]:
    """Row ``index`` of the input, by input column name (for error reports)."""
    row = {}
    for name, values in columns.items():
        if isinstance(values, list):
            row[name] = values[index]
            continue
        try:
            row[name] = values[index].as_py()
        except (ValueError, OverflowError):
            row[name] = None
    return row
