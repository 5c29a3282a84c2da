"""Client-side validation of rows for streaming ingest: what each column type accepts.

A channel reads its table's schema when it opens; every insert call is checked against it here,
before anything is sent. Valid rows come back as an Arrow table under the Parquet column names;
every invalid row comes back as one ``InsertError`` per bad column, so one bad row never rejects
its neighbours.

Rows (``RowValidator.rows``) are mappings from column name to value:

* Keys match column names case-insensitively. A key that matches no column, or two keys of one
  row that differ only in case, make the row invalid. A missing key is NULL.
* NULL (``None`` or a missing key) in a NOT NULL column makes the row invalid.
* INT / BIGINT: ``int`` (not ``bool``), an integral ``float`` or ``Decimal`` (``3.0``), or a
  string holding an integer (``" 42"``; surrounding whitespace is ignored). Values outside the
  32-bit / 64-bit range are invalid.
* DECIMAL(p,s): ``int``, ``Decimal``, ``float`` (taken as written: ``Decimal(repr(x))``) or a
  string holding a decimal (``"12.5"``, ``"1e3"``). The value is rounded to ``s`` decimal places,
  halves away from zero (ROUND_HALF_UP: 0.125 -> 0.13, -0.125 -> -0.13); at most ``p - s``
  digits may remain before the point. NaN and infinity are invalid.
* DOUBLE: ``float``, ``int``, ``Decimal`` or a string holding a number. NaN and +/-infinity are
  kept, from floats or the strings ``NaN``, ``Infinity``, ``-Infinity``, ``inf``, ``-inf`` (any
  case). Spark orders NaN above every number: ``NaN > x`` is true for every other x. Numbers too
  large for a double (``1e400``) and ``bool`` are invalid.
* BOOLEAN: ``bool``; the strings true/false, t/f, yes/no, y/n, on/off, 1/0 (any case, trimmed);
  the ints 0 and 1.
* STRING: ``str``; ``int``, ``float`` and ``Decimal`` are written with ``str()``, ``bool`` as
  ``true`` / ``false``. Bytes, lists, dicts etc. are invalid, as are strings over 16 MiB in UTF-8
  and strings that are not valid Unicode (lone surrogates).
* BINARY: ``bytes``, ``bytearray``, ``memoryview``, or a string of hex digits. At most 8 MiB.
* DATE: ``datetime.date`` (a ``datetime.datetime`` is invalid: pass ``.date()``) or a string
  ``YYYY-MM-DD``.
* TIMESTAMP (stored in UTC, microseconds): ``datetime.datetime``; a ``datetime.date`` is midnight;
  a string in ISO 8601 (``2024-05-01T12:30:00``, a trailing ``Z`` or ``+02:00`` offset allowed).
  Values with a time zone (or offset) are converted to UTC. Values without one are wall-clock
  times in the validator's ``default_timezone`` (UTC unless set): a time that occurs twice (when
  clocks go back) is the first occurrence unless ``fold=1``; a time skipped when clocks go forward
  is moved forward by the gap (02:30 -> 03:30), as Python and Java do. Digits below the
  microsecond are dropped.
* A row that is not a mapping is invalid.

Arrow tables, record batches and pandas DataFrames (``RowValidator.arrow``) follow the same
rules per value, cast column by column. Their columns are matched to the table's by name
(case-insensitively); a column that matches nothing, a NOT NULL column missing from the input, or
a column whose type can never hold the target type (binary into INT, timestamp into DATE, ...)
rejects the whole call with ``IngestValidationError``. In pandas input NaN, NaT and None are NULL,
as pandas treats them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import did_you_mean
from changelake.ingest import arrow_input
from changelake.ingest.values import (
    Rejected,
    arrow_type,
    converter,
    decimals_from_floats,
    display_type,
    fast_types,
    zone_info,
)
from changelake.schema import TableSchema

if TYPE_CHECKING:
    import pandas

__all__ = ["InsertError", "RowValidator", "Validated"]

_NONE = type(None)
_FLOATS = frozenset({float, _NONE})


@dataclass(frozen=True)
class InsertError:
    """Why one row of an insert call was not accepted.

    ``column`` is None for problems of the row as a whole (not a mapping, keys that match no
    column); ``value`` is then the row, or a dict of the offending keys and their values.
    """

    row_index: int
    column: str | None
    value: Any
    message: str
    row: Any = None


@dataclass(frozen=True)
class Validated:
    """The outcome of one insert call: the valid rows as Arrow, and the errors of the others."""

    good: pa.Table
    errors: tuple[InsertError, ...]
    total: int


# (row index, value as given, message) per rejected cell of one column.
CellErrors = list[tuple[int, Any, str]]


class RowValidator:
    """Checks and converts the rows of insert calls into one table's Arrow schema."""

    def __init__(self, schema: TableSchema, *, table: str, default_timezone: str = "UTC"):
        self._table = table
        self._columns = schema.columns
        self.columns = schema.columns  # what its rows hold, as the table had them
        self._names = tuple(c.name for c in schema.columns)
        self._index_of_lower = {c.name.lower(): i for i, c in enumerate(schema.columns)}
        self._types = [arrow_type(c) for c in schema.columns]
        self._zone = zone_info(default_timezone)
        self._converters = [converter(c, zone=self._zone) for c in schema.columns]
        self._fast = [fast_types(c) for c in schema.columns]
        if self._zone is not dt.timezone.utc:
            # pa.array reads naive datetimes as UTC; other zones take the converter.
            self._fast = [
                frozenset({_NONE}) if c.type == "timestamp" else f
                for c, f in zip(schema.columns, self._fast, strict=True)
            ]
        self._arrow_schema = pa.schema(
            [
                pa.field(c.physical, t, nullable=c.nullable)
                for c, t in zip(schema.columns, self._types, strict=True)
            ]
        )
        self._all_keys = itemgetter(*self._names) if self._names else None

    @property
    def arrow_schema(self) -> pa.Schema:
        """Physical column names (``c<id>``) in table order, with the Arrow types rows become."""
        return self._arrow_schema

    def rows(self, rows: Sequence[Any]) -> Validated:
        """Validate mappings of column name to value; see the module docstring for the rules."""
        rows = rows if isinstance(rows, list | tuple) else list(rows)
        values = self._transpose(rows)
        errors: list[InsertError] = []
        skip: list[set[int]] = [set() for _ in self._columns]
        if values is None:
            values = self._transpose_slowly(rows, errors, skip)
        arrays = []
        for index, column_values in enumerate(values):
            array, cells = self._build(index, column_values, skip[index])
            arrays.append(array)
            name = self._names[index]
            errors.extend(InsertError(i, name, v, m, rows[i]) for i, v, m in cells)
        return self._result(arrays, errors, len(rows))

    def arrow(self, data: pa.Table | pa.RecordBatch | pandas.DataFrame) -> Validated:
        """Validate a table of values; see the module docstring for the rules."""
        given = arrow_input.input_columns(data)
        total = len(data)
        matched = self._match_columns(given)
        arrays, errors = [], []
        for index, column in enumerate(self._columns):
            source_name = matched.get(index)
            if source_name is None:
                arrays.append(pa.nulls(total, self._types[index]))
                continue
            source = given[source_name]
            if isinstance(source, list):
                array, cells = self._build(index, source, set())
            else:
                array, cells = self._build_arrow(index, arrow_input.flatten(source))
            arrays.append(array)
            errors.extend(
                InsertError(i, column.name, v, m, arrow_input.row_of(given, i)) for i, v, m in cells
            )
        return self._result(arrays, errors, total)

    def _transpose(self, rows: list[Any]) -> list[Sequence[Any]] | None:
        """Per-column values when every row is a dict keyed by exact column names, else None."""
        names = self._names
        if not rows:
            return [[] for _ in names]
        if set(map(type, rows)) != {dict}:
            return None
        if self._all_keys is not None and set(map(len, rows)) == {len(names)}:
            try:
                picked = list(map(self._all_keys, rows))
            except KeyError:
                pass
            else:
                return list(zip(*picked, strict=True)) if len(names) > 1 else [picked]
        exact = frozenset(names)
        if not all(row.keys() <= exact for row in rows):
            return None
        return [[row.get(name) for row in rows] for name in names]

    def _transpose_slowly(
        self, rows: list[Any], errors: list[InsertError], skip: list[set[int]]
    ) -> list[list[Any]]:
        """Per-column values of any rows; structural problems go to ``errors`` and ``skip``."""
        values: list[list[Any]] = [[None] * len(rows) for _ in self._columns]
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                errors.append(
                    InsertError(
                        i,
                        None,
                        row,
                        f"Row {i} is not a mapping of column name to value but a"
                        f" {type(row).__name__}; pass a dict such as {{'id': 1}}.",
                        row,
                    )
                )
                for cells in skip:
                    cells.add(i)
                continue
            unknown: dict[Any, Any] = {}
            seen: dict[int, list[Any]] = {}
            for key, value in row.items():
                index = self._index_of_lower.get(key.lower()) if isinstance(key, str) else None
                if index is None:
                    unknown[key] = value
                    continue
                seen.setdefault(index, []).append(key)
                values[index][i] = value
            if unknown:
                errors.append(InsertError(i, None, unknown, self._unknown_message(unknown), row))
            for index, keys in seen.items():
                if len(keys) > 1:
                    skip[index].add(i)
                    values[index][i] = None
                    spelled = " and ".join(repr(k) for k in keys)
                    errors.append(
                        InsertError(
                            i,
                            self._names[index],
                            {k: row[k] for k in keys},
                            f"Keys {spelled} both name column {self._names[index]!r} (names"
                            " match case-insensitively); keep one of them.",
                            row,
                        )
                    )
        return values

    def _unknown_message(self, unknown: dict[Any, Any]) -> str:
        hints = " ".join(
            f"Key {key!r} matches no column of table {self._table}."
            f"{did_you_mean(str(key), self._names)}"
            for key in unknown
        )
        return f"{hints} Its columns are: {', '.join(self._names)}."

    def _build(
        self, index: int, values: Sequence[Any], skip: set[int]
    ) -> tuple[pa.Array, CellErrors]:
        """One column as Arrow, and its rejected cells; ``skip`` rows already have an error."""
        kind = self._types[index]
        types = set(map(type, values))
        if types <= self._fast[index] or (pa.types.is_decimal(kind) and types <= _FLOATS):
            try:
                trusted = (
                    values if types <= self._fast[index] else decimals_from_floats(values, kind)
                )
                array = pa.array(trusted, type=kind)
            except (pa.ArrowException, ValueError, TypeError, ArithmeticError):
                array = None
            if array is not None and arrow_input.within_size(array):
                cells: CellErrors = []
                if array.null_count and not self._columns[index].nullable:
                    cells = [
                        (i, None, self._not_null_message(index))
                        for i, v in enumerate(values)
                        if v is None and i not in skip
                    ]
                return array, cells
        return self._build_slowly(index, values, skip)

    def _build_slowly(
        self, index: int, values: Sequence[Any], skip: set[int]
    ) -> tuple[pa.Array, CellErrors]:
        convert = self._converters[index]
        column = self._columns[index]
        out: list[Any] = []
        cells: CellErrors = []
        for i, value in enumerate(values):
            if value is None:
                out.append(None)
                if not column.nullable and i not in skip:
                    cells.append((i, None, self._not_null_message(index)))
                continue
            try:
                out.append(convert(value))
            except Rejected as e:
                out.append(None)
                cells.append((i, value, f"Column {column.name!r} is {display_type(column)}: {e}"))
        return pa.array(out, type=self._types[index]), cells

    def _build_arrow(self, index: int, source: pa.Array) -> tuple[pa.Array, CellErrors]:
        column = self._columns[index]
        array = arrow_input.cast(source, column, self._types[index], zone=self._zone)
        if array is None:
            return self._build_slowly(index, arrow_input.python_values(source), set())
        cells: CellErrors = []
        if array.null_count and not column.nullable:
            nulls = pc.indices_nonzero(array.is_null()).to_pylist()
            cells = [(i, None, self._not_null_message(index)) for i in nulls]
        return array, cells

    def _not_null_message(self, index: int) -> str:
        return f"Column {self._names[index]!r} is NOT NULL but the row has no value for it."

    def _match_columns(self, given: dict[str, Any]) -> dict[int, str]:
        """Table column index -> input column name; schema-level problems raise."""
        matched: dict[int, str] = {}
        problems = []
        for name in given:
            index = self._index_of_lower.get(name.lower())
            if index is None:
                problems.append(
                    f"Input column {name!r} matches no column of table {self._table}."
                    f"{did_you_mean(name, self._names)}"
                )
            elif index in matched:
                problems.append(
                    f"Input columns {matched[index]!r} and {name!r} both name column"
                    f" {self._names[index]!r}; keep one of them."
                )
            else:
                matched[index] = name
        missing = [
            c.name for i, c in enumerate(self._columns) if not c.nullable and i not in matched
        ]
        if missing:
            problems.append(f"NOT NULL columns missing from the input: {', '.join(missing)}.")
        for index, name in matched.items():
            source = given[name]
            if not isinstance(source, list):
                problem = arrow_input.incompatibility(name, source.type, self._columns[index])
                if problem:
                    problems.append(problem)
        if problems:
            arrow_input.raise_schema_problems(problems, self._table, self._columns)
        return matched

    def _result(self, arrays: list[pa.Array], errors: list[InsertError], total: int) -> Validated:
        table = pa.Table.from_arrays(arrays, schema=self._arrow_schema)
        if errors:
            position = {name: i for i, name in enumerate(self._names)}
            errors.sort(key=lambda e: (e.row_index, -1 if e.column is None else position[e.column]))
            bad = {e.row_index for e in errors}
            table = table.filter(pa.array([i not in bad for i in range(total)], pa.bool_()))
        return Validated(good=table, errors=tuple(errors), total=total)
