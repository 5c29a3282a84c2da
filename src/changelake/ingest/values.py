"""Per-type value converters of the ingest validation (see ``changelake.ingest.validate``).

A converter takes one non-NULL Python value and returns the value handed to ``pa.array`` for the
column's Arrow type, or raises ``Rejected`` with the reason. Converters are the definition of what
a column accepts; the vectorized paths of ``validate`` only take shortcuts proven to agree with them.
"""

from __future__ import annotations

import datetime as dt
import numbers
import re
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa

from changelake import arrow_types
from changelake.errors import IngestValidationError, UnsupportedError
from changelake.schema import Column

MAX_STRING_BYTES = 16 * 1024 * 1024
MAX_BINARY_BYTES = 8 * 1024 * 1024

_EPOCH = dt.datetime(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)
_INT_LITERAL = re.compile(r"[+-]?[0-9]+")
_DECIMAL_LITERAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_FLOAT_SPECIAL = re.compile(r"[+-]?(?:inf|infinity)|nan", re.IGNORECASE)
_DATE_LITERAL = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TRUE = frozenset({"true", "t", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "off", "0"})
_INT_RANGES = {"int": (-(2**31), 2**31 - 1), "bigint": (-(2**63), 2**63 - 1)}

Converter = Callable[[Any], Any]


class Rejected(Exception):
    """A value a column cannot take; the argument says why."""


def show(value: Any) -> str:
    """A value as quoted in a message: numbers plain, everything else by repr, kept short."""
    text = str(value) if isinstance(value, Decimal | float | int) else repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def arrow_type(column: Column) -> pa.DataType:
    """The Arrow type rows of ``column`` are built in."""
    try:
        return arrow_types.arrow_type(column.type)
    except UnsupportedError as e:
        raise IngestValidationError(
            f"Column {column.name!r} has type {column.type!r}, which streaming ingest does not"
            " support."
        ) from e


def display_type(column: Column) -> str:
    return column.type.upper().replace(" ", "")


def _not_bool(value: Any, what: str) -> None:
    if isinstance(value, bool):
        raise Rejected(f"{value} is a bool; pass {what}, e.g. 1 for True.")


def _integral(value: Any) -> int:
    _not_bool(value, "an int")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise Rejected(f"{show(value)} is not a whole number.")
        return int(value)
    if isinstance(value, Decimal):
        if not value.is_finite() or value != value.to_integral_value():
            raise Rejected(f"{show(value)} is not a whole number.")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if not _INT_LITERAL.fullmatch(text):
            raise Rejected(f"{show(value)} is not an integer literal.")
        return int(text)
    raise Rejected(f"{type(value).__name__} {show(value)} is not a number.")


def _int_converter(type_name: str) -> Converter:
    low, high = _INT_RANGES[type_name]

    def convert(value: Any) -> int:
        number = _integral(value)
        if not low <= number <= high:
            raise Rejected(f"{show(value)} is out of range {low}..{high}.")
        return number

    return convert


def _double(value: Any) -> float:
    _not_bool(value, "a number")
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if _FLOAT_SPECIAL.fullmatch(text):
            return float(text)
        if not _DECIMAL_LITERAL.fullmatch(text):
            raise Rejected(f"{show(value)} is not a number literal.")
        number = float(text)
    elif isinstance(value, numbers.Integral):
        try:
            return float(value)
        except OverflowError:
            raise Rejected(f"{show(value)} is too large for a DOUBLE.") from None
    elif isinstance(value, Decimal):
        if value.is_snan():
            raise Rejected(f"{show(value)} is a signaling NaN.")
        if not value.is_finite():
            return float(value)
        number = float(value)
    else:
        raise Rejected(f"{type(value).__name__} {show(value)} is not a number.")
    if number in (float("inf"), float("-inf")):
        raise Rejected(f"{show(value)} is too large for a DOUBLE.")
    return number


def _decimal_converter(precision: int, scale: int) -> Converter:
    quantum = Decimal(1).scaleb(-scale)
    context = Context(prec=precision + 2, rounding=ROUND_HALF_UP)
    whole = precision - scale

    def convert(value: Any) -> Decimal:
        _not_bool(value, "a number")
        if isinstance(value, Decimal):
            number = value
        elif isinstance(value, numbers.Integral):
            number = Decimal(int(value))
        elif isinstance(value, float):
            number = Decimal(repr(value))
        elif isinstance(value, str):
            text = value.strip()
            if not _DECIMAL_LITERAL.fullmatch(text):
                raise Rejected(f"{show(value)} is not a decimal literal.")
            number = Decimal(text)
        else:
            raise Rejected(f"{type(value).__name__} {show(value)} is not a number.")
        if not number.is_finite():
            raise Rejected(f"{show(value)} is not a finite number.")
        # Checked before rounding too, so a huge exponent never makes quantize work hard.
        if number and number.adjusted() >= whole + 1:
            digits = number.adjusted() + 1
        else:
            try:
                number = number.quantize(quantum, context=context)
            except InvalidOperation:  # pragma: no cover - prec leaves room for every fitting value
                raise Rejected(f"{show(value)} does not fit.") from None
            digits = number.adjusted() + 1 if number else 0
            if digits <= whole:
                return number
        raise Rejected(f"{show(value)} has {digits} digits before the point, at most {whole} fit.")

    return convert


def decimals_from_floats(values: Sequence[float | None], kind: pa.Decimal128Type) -> list[Any]:
    """Floats (or None) rounded as the DECIMAL converter rounds them, for ``pa.array`` to check
    against the precision; raises ArithmeticError on NaN, infinity or a huge exponent."""
    quantum = Decimal(1).scaleb(-kind.scale)
    context = Context(prec=kind.precision + 2, rounding=ROUND_HALF_UP)
    return [
        None if v is None else Decimal(repr(v)).quantize(quantum, context=context) for v in values
    ]


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise Rejected(f"{show(value)} is not a boolean; use true/false, yes/no, on/off or 1/0.")
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise Rejected(f"{show(value)} is not a boolean; use True/False, 1/0 or 'true'/'false'.")


def _string(value: Any) -> str:
    if isinstance(value, str):
        text = str.__str__(value)
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, numbers.Integral | float | Decimal):
        try:
            text = str(value)
        except ValueError:  # more digits than sys.get_int_max_str_digits()
            raise Rejected("the integer has too many digits to write as text.") from None
    else:
        raise Rejected(f"{type(value).__name__} {show(value)} is not text; pass a str.")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise Rejected(f"{show(value)} is not valid Unicode (a lone surrogate).") from None
    if size > MAX_STRING_BYTES:
        raise Rejected(f"the text is {size} bytes in UTF-8, at most {MAX_STRING_BYTES} fit.")
    return text


def _binary(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
    elif isinstance(value, str):
        try:
            data = bytes.fromhex(value)
        except ValueError:
            raise Rejected(f"{show(value)} is not hex; pass bytes or a hex string.") from None
    else:
        raise Rejected(f"{type(value).__name__} {show(value)} is not bytes or a hex string.")
    if len(data) > MAX_BINARY_BYTES:
        raise Rejected(f"the value is {len(data)} bytes, at most {MAX_BINARY_BYTES} fit.")
    return data


def _date(value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        raise Rejected(f"{show(value)} is a datetime; pass .date() to store the day.")
    if isinstance(value, dt.date):
        return dt.date(value.year, value.month, value.day)
    if isinstance(value, str):
        text = value.strip()
        if _DATE_LITERAL.fullmatch(text):
            try:
                return dt.date.fromisoformat(text)
            except ValueError:
                pass
        raise Rejected(f"{show(value)} is not a date in the form YYYY-MM-DD.")
    raise Rejected(f"{type(value).__name__} {show(value)} is not a date.")


def wall_micros(moment: dt.datetime) -> int:
    """Microseconds of a datetime's wall-clock time since 1970-01-01 00:00, ignoring tzinfo."""
    return (moment.replace(tzinfo=None) - _EPOCH) // _MICRO


def _timestamp_converter(zone: dt.tzinfo) -> Converter:
    """Naive values are wall-clock times in ``zone``; the result is microseconds since the epoch."""

    def to_micros(moment: dt.datetime) -> int:
        if type(moment) is not dt.datetime:  # e.g. pd.Timestamp: digits below the µs are dropped
            moment = dt.datetime(
                *moment.timetuple()[:6], moment.microsecond, moment.tzinfo, fold=moment.fold
            )
        offset = moment.utcoffset()
        if offset is None:
            offset = moment.replace(tzinfo=zone).utcoffset()
        return wall_micros(moment) - offset // _MICRO

    def convert(value: Any) -> int:
        if isinstance(value, dt.datetime):
            return to_micros(value)
        if isinstance(value, dt.date):
            return to_micros(dt.datetime(value.year, value.month, value.day))
        if isinstance(value, str):
            text = value.strip()
            if text[-1:] in ("Z", "z"):
                text = f"{text[:-1]}+00:00"
            try:
                return to_micros(dt.datetime.fromisoformat(text))
            except ValueError:
                raise Rejected(
                    f"{show(value)} is not an ISO 8601 timestamp such as '2024-05-01T12:30:00Z'."
                ) from None
        raise Rejected(f"{type(value).__name__} {show(value)} is not a datetime.")

    return convert


def converter(column: Column, *, zone: dt.tzinfo) -> Converter:
    """The converter of ``column``'s type."""
    if column.type in _INT_RANGES:
        return _int_converter(column.type)
    kind = arrow_type(column)
    if pa.types.is_decimal(kind):
        return _decimal_converter(kind.precision, kind.scale)
    return {
        "double": _double,
        "boolean": _boolean,
        "string": _string,
        "binary": _binary,
        "date": _date,
        "timestamp": _timestamp_converter(zone),
    }[column.type]


def fast_types(column: Column) -> frozenset[type]:
    """Python types whose values ``pa.array`` builds exactly as the converter would.

    A column whose values are all of these types (or None) may skip the converter: when
    ``pa.array`` succeeds, every value was accepted and became what the converter returns.
    """
    by_type: dict[str, tuple[type, ...]] = {
        "int": (int,),
        "bigint": (int,),
        "double": (float, int),
        "boolean": (bool,),
        "string": (str,),
        "binary": (bytes,),
        "date": (dt.date,),
        "timestamp": (dt.datetime,),
    }
    return frozenset((type(None), *by_type.get(column.type, (Decimal, int))))


def zone_info(name: str) -> dt.tzinfo:
    """The IANA time zone ``name``; UTC is the stdlib's fixed-offset UTC."""
    if name.upper() == "UTC":
        return dt.timezone.utc
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError) as e:
        raise IngestValidationError(
            f"Unknown time zone {name!r}; use an IANA name such as 'UTC' or 'Europe/Berlin'."
        ) from e
