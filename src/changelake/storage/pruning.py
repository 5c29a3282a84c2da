"""Skipping data files whose per-column statistics prove a filter false for every row."""

from __future__ import annotations

import bisect
import datetime as dt
import decimal
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from changelake.catalog.model import DataFile, LiveFile
from changelake.schema import TableSchema

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
OPS = frozenset({"=", "<", "<=", ">", ">=", "in", "is_null", "is_not_null"})


@dataclass(frozen=True)
class Comparison:
    """``column op value``, one conjunct of a filter; files failing any conjunct are skipped."""

    column: str
    op: str
    value: Any = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown comparison {self.op!r}")


@dataclass(frozen=True)
class Narrowing:
    """Only the rows of a table whose ``column`` holds one of ``values`` (no NULL) are needed:
    files whose statistics leave them out are not read (a recompute of some groups)."""

    column: str
    values: tuple[Any, ...]


def _comparable(column_type: str, value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if column_type.startswith("decimal") or isinstance(value, decimal.Decimal):
        try:
            return decimal.Decimal(str(value))
        except decimal.InvalidOperation:
            return None
    if column_type in ("int", "bigint", "double"):
        # NaN sorts above every number in Spark but compares false in Python: it bounds nothing.
        return value if isinstance(value, int | float) and not _is_nan(value) else None
    if column_type == "string":
        return value if isinstance(value, str) else None
    if column_type == "date":
        # Spark casts '2024-1-5' to a date; only the canonical form orders like the date.
        return value if isinstance(value, str) and _ISO_DATE.fullmatch(value) else None
    return None  # timestamp, binary, boolean: not pruned


def _is_nan(value: int | float) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _may_match(stats: dict[str, Any] | None, column_type: str, cmp: Comparison, rows: int) -> bool:
    if stats is None:
        return True
    nulls = stats.get("nulls", 0)
    if cmp.op == "is_null":
        return nulls > 0
    if cmp.op == "is_not_null":
        return nulls < rows
    if nulls >= rows:
        return False  # every value is NULL: no comparison is true
    if not stats.get("bounded"):
        return True
    lo = _comparable(column_type, stats["min"])
    hi = _comparable(column_type, stats["max"])
    values = cmp.value if cmp.op == "in" else (cmp.value,)
    checked = [_comparable(column_type, v) for v in values]
    if lo is None or hi is None or any(v is None for v in checked):
        return True
    try:
        if cmp.op in ("=", "in"):
            return any(lo <= v <= hi for v in checked)
        (v,) = checked
        return {
            "<": lo < v,
            "<=": lo <= v,
            ">": hi > v,
            ">=": hi >= v,
        }[cmp.op]
    except TypeError:
        return True


def prune(
    files: Sequence[LiveFile], schema: TableSchema, conjuncts: Sequence[Comparison]
) -> list[LiveFile]:
    """The files that may hold a row satisfying all ``conjuncts``."""
    checks = []
    for cmp in conjuncts:
        column = schema.find(cmp.column)
        if column is not None:
            checks.append((column.physical, column.type, cmp))
    if not checks:
        return list(files)
    return [
        f
        for f in files
        if all(
            _may_match(f.file.stats.get(physical), ctype, cmp, f.file.row_count)
            for physical, ctype, cmp in checks
        )
    ]


def holding(
    files: Sequence[LiveFile], schema: TableSchema, keys: Sequence[str], values: Iterable[tuple]
) -> list[LiveFile]:
    """The files that may hold a row whose columns ``keys`` equal one of the tuples ``values``
    (in ``keys`` order): a file is kept unless some key column's statistics leave out every
    value of that column (conservative for compound keys: it may keep a file holding none).
    Sorted once, each file is checked by bisection: the cost follows the files, not files times
    values. A column whose type or statistics do not order here prunes nothing."""
    columns = [schema.find(k) for k in keys]
    ordered: list[tuple[str, str, list] | None] = []
    tuples = list(values)
    for i, column in enumerate(columns):
        found = [_comparable(column.type, _plain(t[i])) for t in tuples] if column else [None]
        if column is None or any(v is None for v in found):
            ordered.append(None)
            continue
        try:
            ordered.append((column.physical, column.type, sorted(set(found))))
        except TypeError:
            ordered.append(None)
    checks = [c for c in ordered if c is not None]
    return [f for f in files if all(_holds_one(f, *c) for c in checks)]


def _plain(value: Any) -> Any:
    """A key value as the statistics hold it (a date as its ISO text)."""
    return value.isoformat() if type(value) is dt.date else value


def _holds_one(file: LiveFile, physical: str, column_type: str, ordered: list) -> bool:
    """Whether ``file``'s statistics of ``physical`` leave room for one of the sorted
    ``ordered`` values (none is NULL)."""
    stats = file.file.stats.get(physical)
    if stats is None:
        return True
    if stats.get("nulls", 0) >= file.file.row_count:
        return False
    if not stats.get("bounded"):
        return True
    lo = _comparable(column_type, stats["min"])
    hi = _comparable(column_type, stats["max"])
    if lo is None or hi is None:
        return True
    try:
        at = bisect.bisect_left(ordered, lo)
        return at < len(ordered) and ordered[at] <= hi
    except TypeError:
        return True


def value_range(
    files: Sequence[DataFile], schema: TableSchema, name: str
) -> tuple[Any, Any] | None:
    """The least and greatest value of column ``name`` in ``files``, from their statistics; None
    if a file has no bounds for it, holds a NULL in it, or its type does not order here."""
    column = schema.find(name)
    if column is None or not files:
        return None
    lows, highs = [], []
    for f in files:
        stats = f.stats.get(column.physical)
        if stats is None or stats.get("nulls", 0) > 0 or not stats.get("bounded"):
            return None
        lo, hi = _comparable(column.type, stats["min"]), _comparable(column.type, stats["max"])
        if lo is None or hi is None:
            return None
        lows.append(lo)
        highs.append(hi)
    try:
        return min(lows), max(highs)
    except TypeError:
        return None
