"""Timestamp strings read without Spark agree with Spark's CAST in the session time zone."""

from __future__ import annotations

import pytest

from changelake.plan.points import local_epoch

TEXTS = [
    "2024-05-01",
    "2024-05-01 12:00:00",
    "2024-05-01T12:00:00.5",
    " 2024-12-31 23:59:59.999999 ",
    "2024-03-10 02:30:00",  # skipped in New York
    "2024-11-03 01:30:00",  # repeated in New York
    "2024-03-31 02:30:00.25",  # skipped in Berlin
    "2024-10-27 02:30:00",  # repeated in Berlin
    "2024-04-07 01:45:00",  # repeated (by half an hour) on Lord Howe Island
    "1970-01-01 00:00:00",
]
ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe"]


@pytest.mark.parametrize("zone", ZONES)
def test_parsed_timestamps_equal_spark_casts(spark, zone):
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        casts = ", ".join(f"unix_micros(CAST('{t}' AS TIMESTAMP))" for t in TEXTS)
        expected = list(spark.sql(f"SELECT {casts}").first())
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    parsed = [local_epoch(t, zone) for t in TEXTS]
    assert [round(p * 1_000_000) for p in parsed] == expected


@pytest.mark.parametrize(
    "text",
    [
        "yesterday",
        "2024-5-1",
        "2024-05-01 12:00",
        "2024-05-01 12:00:00+02:00",
        "2024-02-30",
        "1900-01-01 00:00:00",
        "2024-05-01 12:00:00.1234567",
    ],
)
def test_what_only_spark_can_read_is_left_to_it(text):
    assert local_epoch(text, "Europe/Berlin") is None
    assert local_epoch("2024-05-01", "+02:00") is None
