"""SQL points in time (``AT | BEFORE | END (kind => expression)``) as typed ``Point`` values."""

from __future__ import annotations

import datetime as dt
import functools
import re
import zoneinfo

from pyspark.sql import SparkSession
from sqlglot import exp

from changelake.changes.formats import Format, Rendering
from changelake.changes.plan import Information
from changelake.dialect import to_spark
from changelake.errors import InvalidStatementError
from changelake.txn.points import Edge, Point, PointKind

KINDS = ("VERSION", "TIMESTAMP", "TS", "OFFSET", "STATEMENT", "STREAM")
_KIND = {
    "VERSION": PointKind.VERSION,
    "TIMESTAMP": PointKind.TIMESTAMP,
    "TS": PointKind.TIMESTAMP,
    "OFFSET": PointKind.OFFSET,
    "STATEMENT": PointKind.STATEMENT,
    "STREAM": PointKind.STREAM,
}


def evaluate(spark: SparkSession, expression: exp.Expression) -> object:
    """The value of a constant expression: literals directly, anything else through Spark."""
    if isinstance(expression, exp.Literal):
        return expression.this if expression.is_string else _number(expression.this)
    if isinstance(expression, exp.Neg) and isinstance(expression.this, exp.Literal):
        return -_number(expression.this.this)
    try:
        return spark.sql(f"SELECT {to_spark(expression)}").first()[0]
    except Exception as e:  # any failure here is the user's expression
        raise InvalidStatementError(
            f"Cannot evaluate {to_spark(expression)!r} as a constant: {str(e).splitlines()[0]}"
        ) from e


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


# Timestamp strings parsed without Spark: a date, or a date and a time with up to six fractional
# digits, no zone, in years whose zone rules Python and Java agree on. Anything else (a zone, a
# special value such as 'yesterday', a partial time) goes to Spark's CAST.
_TIMESTAMP = re.compile(
    r"\s*(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?\s*"
)
_YEARS = range(1970, 2101)


@functools.lru_cache(maxsize=16)
def _zone(name: str) -> zoneinfo.ZoneInfo | None:
    try:
        return zoneinfo.ZoneInfo(name)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        return None  # e.g. an offset such as '+08:00': Spark knows it, CAST handles it


def local_epoch(text: str, zone_name: str) -> float | None:
    """Seconds since the epoch of timestamp string ``text`` read in time zone ``zone_name`` as
    Spark's CAST(text AS TIMESTAMP) reads it, or None where only Spark can tell. A local time
    that a clock change skipped or repeated resolves as in Java: moved on by the gap, or the
    earlier of the two instants (Python's ``fold=0`` gives both)."""
    found = _TIMESTAMP.fullmatch(text)
    zone = _zone(zone_name)
    if found is None or zone is None or int(found.group(1)) not in _YEARS:
        return None
    fields = [int(g) if g else 0 for g in found.groups()[:6]]
    micros = int((found.group(7) or "").ljust(6, "0"))
    try:
        local = dt.datetime(*fields, micros, tzinfo=zone)  # type: ignore[misc]
    except ValueError:
        return None  # no such date: Spark's error says so
    return local.timestamp()


def _epoch(spark: SparkSession, expression: exp.Expression) -> float:
    value = evaluate(spark, expression)
    if isinstance(value, str):
        parsed = local_epoch(value, str(spark.conf.get("spark.sql.session.timeZone")))
        if parsed is not None:
            return parsed
        value = spark.sql(f"SELECT CAST({exp.Literal.string(value).sql()} AS TIMESTAMP)").first()[0]
        if value is None:
            raise InvalidStatementError(
                f"{expression.sql()} is not a timestamp; write e.g. '2024-05-01 12:00:00'."
            )
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime.combine(value, dt.time()).timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise InvalidStatementError(f"{expression.sql()} is not a timestamp.")


def point_of(spark: SparkSession, clause: exp.HistoricalData) -> Point:
    """The point an ``AT | BEFORE | END (...)`` clause names."""
    edge = Edge(str(clause.this).upper())
    kind_text = str(clause.args.get("kind") or "").upper()
    kind = _KIND.get(kind_text)
    if kind is None:
        raise InvalidStatementError(
            f"Unknown time travel kind {kind_text!r}; use one of {', '.join(KINDS)}."
        )
    expression = clause.expression
    value: int | float | str
    if kind is PointKind.TIMESTAMP:
        value = _epoch(spark, expression)
    else:
        raw = evaluate(spark, expression)
        if kind in (PointKind.STATEMENT, PointKind.STREAM):
            value = str(raw)
        elif isinstance(raw, int | float) and not isinstance(raw, bool):
            value = raw
        else:
            value = str(raw)  # rejected by resolve with the expected kind of value
    return Point(kind, value, edge, text=expression.sql())


def changes_clause(
    spark: SparkSession, changes: exp.Changes
) -> tuple[Information, Point | None, Point | None]:
    """``CHANGES (INFORMATION => ...) AT|BEFORE (...) [END (...)]`` as values."""
    given = changes.args.get("information")
    information = Information.parse(given.name) if given is not None else Information.DEFAULT
    start, end = changes.args.get("at_before"), changes.args.get("end")
    return (
        information,
        point_of(spark, start) if start is not None else None,
        point_of(spark, end) if end is not None else None,
    )


def rendering_of(changes: exp.Changes) -> Rendering | None:
    """The changelog ``FORMAT => f [, KEYS => (...)]`` a CHANGES clause asks for, if any."""
    given = changes.args.get("format")
    keys = changes.args.get("keys")
    if given is None:
        if keys is not None:
            raise InvalidStatementError("KEYS => (...) goes with FORMAT => ...: add the format.")
        return None
    names = tuple(k.name for k in keys.expressions) if keys is not None else ()
    return Rendering(Format.parse(given.name), names)
