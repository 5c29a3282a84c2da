"""Values in JSON changelog files: how COPY INTO writes them so that none is changed, and how
``read_changelog`` and ``APPLY CHANGES ... FORMAT DEBEZIUM`` read them back.

JSON has strings, numbers, booleans and null. ``COPY INTO ... FILE_FORMAT = (TYPE = JSON)``
writes the other types the way Debezium's JSON converter does (without schemas), so that a
Debezium envelope reads as one:

- TIMESTAMP (an instant): an ISO-8601 string in UTC with microseconds,
  ``"2024-01-02T03:04:05.123456Z"`` (Debezium's ``ZonedTimestamp``);
- DATE: ``"2024-01-02"``; in the ``before`` and ``after`` images of a Debezium envelope the days
  since 1970-01-01 (``io.debezium.time.Date``), ``19724``;
- DECIMAL: a string in plain notation with the column's scale, ``"-12.3400"`` (Debezium's
  ``decimal.handling.mode=string``): most JSON readers would make a number a double;
- BINARY: base64;
- DOUBLE: a number whose digits read back as the same double; NaN and ±Infinity, which JSON
  lacks, as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
- BIGINT, INT, BOOLEAN, STRING: as themselves.

Reading accepts these and what other writers use: a timestamp as any ISO-8601 string (without
an offset it is in the session time zone) or integer microseconds since the epoch (Debezium's
``MicroTimestamp``), a date as a string or a day count, a decimal as a string or a number.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DateType,
    DecimalType,
    IntegralType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from changelake.schema import quoted

# The options of Spark's JSON writer that go with ``encoded``.
WRITE_OPTIONS = {
    "ignoreNullFields": "false",  # a NULL is written as null, not left out
    "timeZone": "UTC",
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "dateFormat": "yyyy-MM-dd",
}
IMAGES = ("before", "after")

_Encode = Callable[[Column], Column]


def is_debezium(schema: StructType) -> bool:
    """Whether rows of ``schema`` are Debezium envelopes: ``op`` beside struct images."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    return "op" in types and all(isinstance(types.get(i), StructType) for i in IMAGES)


def encoded(df: DataFrame) -> DataFrame:
    """``df`` with its decimals and dates as the module docstring says; written with
    ``WRITE_OPTIONS``, its JSON holds every value exactly."""
    debezium = is_debezium(df.schema)

    def column(field: StructField) -> Column:
        image = debezium and field.name.lower() in IMAGES
        dates: _Encode = F.unix_date if image else _same
        return _encoded(F.col(quoted(field.name)), field.dataType, dates).alias(field.name)

    if not any(_changes(f.dataType) for f in df.schema.fields):
        return df
    return df.select(*[column(f) for f in df.schema.fields])


def read_type(dtype: DataType) -> DataType:
    """The type to read a JSON field as, before ``decoded`` makes it a ``dtype`` value: dates
    and timestamps as strings, which hold every form they come in."""
    if isinstance(dtype, DateType | TimestampType | TimestampNTZType):
        return StringType()
    if isinstance(dtype, StructType):
        return StructType([StructField(f.name, read_type(f.dataType)) for f in dtype.fields])
    return dtype


def decoded(value: Column, *, source: DataType, target: DataType) -> Column:
    """``value``, of type ``source`` as read from JSON, as a ``target`` value."""
    if isinstance(target, StructType) and isinstance(source, StructType):
        found = {f.name.lower(): f for f in source.fields}
        fields = [
            decoded(value[found[f.name.lower()].name], source=found[f.name.lower()].dataType,
                    target=f.dataType).alias(f.name)
            if f.name.lower() in found else F.lit(None).cast(f.dataType).alias(f.name)
            for f in target.fields
        ]  # fmt: skip
        return F.when(value.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    text = isinstance(source, StringType)
    if isinstance(target, TimestampType | DateType) and (text or isinstance(source, IntegralType)):
        count = F.timestamp_micros if isinstance(target, TimestampType) else _from_days
        if not text:
            return count(value)
        digits = value.rlike(r"^\s*-?[0-9]+\s*$")
        return F.when(digits, count(F.trim(value).cast("bigint"))).otherwise(value.cast(target))
    if isinstance(target, BinaryType) and text:
        return F.unbase64(value)
    return value.cast(target)


def _from_days(days: Column) -> Column:
    return F.date_from_unix_date(days.cast("int"))


def _same(value: Column) -> Column:
    return value


def _changes(dtype: DataType) -> bool:
    if isinstance(dtype, StructType):
        return any(_changes(f.dataType) for f in dtype.fields)
    return isinstance(dtype, DecimalType | DateType)


def _encoded(value: Column, dtype: DataType, dates: _Encode) -> Column:
    if isinstance(dtype, DecimalType):
        return value.cast("string")
    if isinstance(dtype, DateType):
        return dates(value)
    if isinstance(dtype, StructType) and _changes(dtype):
        fields = [_encoded(value[f.name], f.dataType, dates).alias(f.name) for f in dtype.fields]
        return F.when(value.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    return value
