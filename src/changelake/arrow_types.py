"""THE Arrow type of each changelake column type: what PyArrow builds and writes for a column.

Every Parquet file changelake writes without Spark (streaming ingest, INSERT of literals, an
external table's follow) holds its columns in these types, so that Spark reads them with the
table's schema exactly as it reads the files it writes itself. The answers are PySpark's own
(``pyspark.sql.pandas.types.to_arrow_type`` of the Spark type, session time zone UTC), written out
because PySpark's parsers of a type name need a JVM and this module runs without one;
``tests/test_arrow_types.py`` checks the two agree.

A TIMESTAMP is Spark's ``TimestampType`` (a point in time): microseconds, adjusted to UTC. Arrow
without a time zone would be Parquet's local time, which Spark reads as TIMESTAMP_NTZ.
"""

from __future__ import annotations

import re

import pyarrow as pa

from changelake.errors import UnsupportedError

_SIMPLE = {
    "int": pa.int32(),
    "bigint": pa.int64(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def arrow_type(type_name: str) -> pa.DataType:
    """The Arrow type of a column of changelake type ``type_name`` (as the catalog stores it).

    >>> arrow_type("decimal(10,2)"), arrow_type("timestamp")
    (Decimal128Type(decimal128(10, 2)), TimestampType(timestamp[us, tz=UTC]))
    """
    simple = _SIMPLE.get(type_name)
    if simple is not None:
        return simple
    decimal = _DECIMAL.fullmatch(type_name)
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
    raise UnsupportedError(
        f"Column type {type_name!r} has no Arrow type in changelake; expected one of"
        f" {', '.join(_SIMPLE)} or decimal(p,s)."
    )
