"""PostgreSQL column types as changelake types, and pgoutput's text values as Python values.

``spark_type`` maps the text of ``format_type(atttypid, atttypmod)`` (``'numeric(10,2)'``,
``'timestamp(3) with time zone'``) to the changelake type a column of it gets; ``converter``
turns the text output pgoutput sends for such a column into the value PyArrow and Spark take.
Values are read as a session with ``DateStyle`` ISO (PostgreSQL's default) and ``TimeZone``
UTC prints them. changelake has one TIMESTAMP, an instant: a ``timestamp without time zone``
is read as a wall-clock time in UTC.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import re
from collections.abc import Callable

from changelake.errors import TypeMismatchError, UnsupportedError

__all__ = ["TYPE_TABLE", "converter", "spark_type"]

TYPE_TABLE: tuple[tuple[str, str], ...] = (
    ("smallint, integer", "INT"),
    ("bigint", "BIGINT"),
    ("numeric(p,s)", "DECIMAL(p,s) (p ≤ 38, 0 ≤ s ≤ p)"),
    ("numeric(p)", "DECIMAL(p,0) (p ≤ 38)"),
    ("numeric", "DECIMAL(38,18) (rounded half up to 18 places; over 20 integer digits refused)"),
    ("real, double precision", "DOUBLE"),
    ("boolean", "BOOLEAN"),
    ("text, character varying(n), character(n), uuid, json, jsonb", "STRING"),
    ("date", "DATE"),
    ("timestamp with time zone", "TIMESTAMP"),
    ("timestamp without time zone", "TIMESTAMP (the wall-clock time read in UTC)"),
    ("bytea", "BINARY"),
)
"""What each supported PostgreSQL type becomes (for the docs; rows are Markdown-ready)."""

_MAX_PRECISION = 38
_UNCONSTRAINED_NUMERIC = "decimal(38,18)"
_SIMPLE = {
    "smallint": "int",
    "int2": "int",
    "integer": "int",
    "int": "int",
    "int4": "int",
    "bigint": "bigint",
    "int8": "bigint",
    "real": "double",
    "float4": "double",
    "double precision": "double",
    "float8": "double",
    "boolean": "boolean",
    "bool": "boolean",
    "text": "string",
    "uuid": "string",
    "json": "string",
    "jsonb": "string",
    "date": "date",
    "bytea": "binary",
}
_STRINGS = frozenset({"character varying", "varchar", "character", "char", "bpchar"})
_TIMESTAMPS = frozenset(
    {"timestamp", "timestamp without time zone", "timestamp with time zone", "timestamptz"}
)
_NUMERICS = frozenset({"numeric", "decimal"})
# The type modifier in parentheses; format_type puts a timestamp's between the name and the time
# zone clause: 'timestamp(3) with time zone'.
_MODIFIER = re.compile(r"\(\s*(-?\d+)\s*(?:,\s*(-?\d+)\s*)?\)")
_HOW_TO_FIX = (
    "give the external table a column list without it, or cast it in a view on the source "
    "(to text, say) and follow the view's table instead"
)


def spark_type(pg_type: str, *, column: str | None = None) -> str:
    """The changelake type of a PostgreSQL column of type ``pg_type``, as ``format_type`` prints
    it (common aliases such as ``int4`` or ``varchar(20)`` are taken too); ``column`` names the
    column in the error raised for a type changelake cannot hold.

    >>> spark_type("numeric(10,2)"), spark_type("timestamp(3) with time zone")
    ('decimal(10,2)', 'timestamp')
    """
    text = pg_type.strip().lower()
    if text.endswith("[]"):
        raise _unsupported(pg_type, column, "an array")
    modifier = _MODIFIER.search(text)
    name = " ".join(_MODIFIER.sub(" ", text, count=1).split())
    args = [int(a) for a in modifier.groups() if a is not None] if modifier else []
    if name in _NUMERICS:
        return _decimal(pg_type, column, args)
    if name in _STRINGS and len(args) <= 1:
        return "string"
    if name in _TIMESTAMPS and len(args) <= 1:
        return "timestamp"
    if name in _SIMPLE and not args:
        return _SIMPLE[name]
    raise _unsupported(pg_type, column, "")


def _decimal(pg_type: str, column: str | None, args: list[int]) -> str:
    if not args:
        return _UNCONSTRAINED_NUMERIC
    precision, scale = args[0], args[1] if len(args) > 1 else 0
    if not 1 <= precision <= _MAX_PRECISION:
        reason = f"more digits than the {_MAX_PRECISION} a DECIMAL holds"
        raise _unsupported(pg_type, column, reason)
    if not 0 <= scale <= precision:
        raise _unsupported(pg_type, column, "a scale outside 0 to its precision")
    return f"decimal({precision},{scale})"


def _unsupported(pg_type: str, column: str | None, reason: str) -> UnsupportedError:
    which = (
        f"Column {column!r} has PostgreSQL type {pg_type!r}"
        if column
        else f"PostgreSQL type {pg_type!r}"
    )
    because = f" ({reason})" if reason else ""
    supported = ", ".join(pg for pg, _ in TYPE_TABLE)
    return UnsupportedError(
        f"{which}{because}, which changelake cannot hold: {_HOW_TO_FIX}. "
        f"Supported types: {supported}."
    )


def converter(spark_type: str) -> Callable[[str], object]:
    """A function from the text pgoutput sends for a column of changelake type ``spark_type`` (as
    ``spark_type()`` returns it) to the Python value for it: int, Decimal, float, bool,
    ``datetime.date``, a UTC-aware ``datetime.datetime``, bytes or str. Values changelake cannot
    hold (a numeric NaN, an infinite or BC date) raise ``TypeMismatchError``.

    >>> converter("decimal(5,2)")("12.5"), converter("boolean")("t")
    (Decimal('12.50'), True)
    """
    simple = _CONVERTERS.get(spark_type)
    if simple is not None:
        return simple
    decimal_type = _DECIMAL_TYPE.fullmatch(spark_type)
    if decimal_type is not None:
        return _decimal_converter(int(decimal_type[1]), int(decimal_type[2]))
    raise UnsupportedError(
        f"No conversion of pgoutput values to changelake type {spark_type!r}; expected one of "
        f"{', '.join(_CONVERTERS)} or decimal(p,s)."
    )


def _decimal_converter(precision: int, scale: int) -> Callable[[str], decimal.Decimal]:
    target, integer_digits = f"decimal({precision},{scale})", precision - scale
    quantum = decimal.Decimal(1).scaleb(-scale)
    # Room for the carry of rounding up (99.995 -> 100.00), caught by the check after it.
    context = decimal.Context(prec=precision + 1, rounding=decimal.ROUND_HALF_UP)

    def convert(text: str) -> decimal.Decimal:
        try:
            value = decimal.Decimal(text)
        except decimal.InvalidOperation as e:
            raise _mismatch(text, target, "expected a number") from e
        if not value.is_finite():
            raise _mismatch(text, target, "NaN and infinity have no DECIMAL value")
        if not value or value.adjusted() < integer_digits:
            value = value.quantize(quantum, context=context)
        if value and value.adjusted() >= integer_digits:
            reason = f"it has more than {integer_digits} digits before the decimal point"
            raise _mismatch(text, target, reason)
        return value

    return convert


def _boolean(text: str) -> bool:
    if text not in ("t", "f"):
        raise _mismatch(text, "boolean", "expected 't' or 'f'")
    return text == "t"


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as e:
        raise _mismatch(text, "date", _why_not_a_date(text)) from e


def _timestamp(text: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
    except (ValueError, OverflowError) as e:
        raise _mismatch(text, "timestamp", _why_not_a_date(text)) from e


def _why_not_a_date(text: str) -> str:
    if text in ("infinity", "-infinity"):
        return "changelake's DATE and TIMESTAMP hold no infinity"
    if text.endswith(" BC"):
        return "changelake's DATE and TIMESTAMP start at year 1"
    return "expected ISO format (DateStyle ISO) within years 1 to 9999"


def _binary(text: str) -> bytes:
    if text.startswith("\\x"):
        with contextlib.suppress(ValueError):
            return bytes.fromhex(text[2:])
    reason = "expected bytea's hex output ('\\x0a0b'): set bytea_output to hex on the source"
    raise _mismatch(text[:40], "binary", reason)


def _mismatch(text: str, target: str, reason: str) -> TypeMismatchError:
    return TypeMismatchError(
        f"PostgreSQL value {text!r} does not fit changelake type {target}: {reason}. Filter the "
        f"row out or cast the column in a view on the source."
    )


_CONVERTERS: dict[str, Callable[[str], object]] = {
    "int": int,
    "bigint": int,
    "double": float,  # takes PostgreSQL's NaN, Infinity and -Infinity as they are
    "boolean": _boolean,
    "string": str,
    "date": _date,
    "timestamp": _timestamp,
    "binary": _binary,
}
_DECIMAL_TYPE = re.compile(r"decimal\((\d+),(\d+)\)")
