"""The one Arrow type table agrees with PySpark's conversion of the Spark type of each name."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type

from changelake.arrow_types import arrow_type
from changelake.errors import UnsupportedError
from changelake.schema import normalize_type
from changelake.storage.snapshot import spark_type

TYPES = [
    "INT",
    "BIGINT",
    "DOUBLE",
    "BOOLEAN",
    "STRING",
    "BINARY",
    "DATE",
    "TIMESTAMP",
    "NUMBER(10,2)",
    "DECIMAL(38,0)",
    "NUMBER(3, 3)",
]


@pytest.mark.parametrize("sql_type", TYPES)
def test_arrow_type_is_pyspark_conversion_with_utc_session(spark, sql_type):
    name = normalize_type(sql_type)
    assert arrow_type(name) == to_arrow_type(spark_type(name), timezone="UTC")


def test_timestamp_is_a_point_in_time():
    assert arrow_type("timestamp") == pa.timestamp("us", tz="UTC")


def test_unknown_type_is_unsupported():
    with pytest.raises(UnsupportedError, match="interval"):
        arrow_type("interval")
