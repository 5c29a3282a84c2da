"""Which way a scan is read (storage/read_path.choose), from what the session can do: the
decision alone, no Spark (test_native.py checks that each way reads the same rows)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from changelake.catalog.model import DataFile
from changelake.storage.read_path import ReadPath, Scan, Way, choose

PHYSICAL = StructType([StructField("c1", LongType())])


def _file(name: str) -> DataFile:
    return DataFile(f"data/{name}", row_count=10, size_bytes=100, base_row_id=0, begin_version=1)


FILES = (_file("a.parquet"), _file("b.parquet"))
DELETED = ((f"dv/{FILES[0].path}.dv", FILES[0], None),)
PLAIN = Scan(FILES, PHYSICAL, positions=True)
WITH_DVS = Scan(FILES, PHYSICAL, identity=True, deleted=DELETED)
LATE = Scan(FILES, PHYSICAL, identity=True, only={"a.parquet": pa.array([1], pa.int64())})


@pytest.mark.parametrize(
    ("scan", "reader", "expressions", "past", "way", "deletes"),
    [
        (WITH_DVS, True, True, False, Way.FORMAT, Way.FORMAT),
        (LATE, True, True, False, Way.FORMAT, Way.FORMAT),
        (WITH_DVS, True, True, True, Way.EXPRESSIONS, Way.JOINS),
        (WITH_DVS, False, True, False, Way.EXPRESSIONS, Way.EXPRESSIONS),
        (WITH_DVS, False, True, True, Way.EXPRESSIONS, Way.JOINS),
        (WITH_DVS, False, False, False, Way.JOINS, Way.JOINS),
        (LATE, False, False, False, Way.JOINS, Way.JOINS),
        (PLAIN, False, False, False, Way.JOINS, Way.JOINS),
    ],
)
def test_the_way_follows_what_the_session_can_do(scan, reader, expressions, past, way, deletes):
    path = choose(scan, reader=reader, expressions=expressions, positions_past_driver=past)
    assert (path.way, path.deletes) == (way, deletes)
    assert path.reason


def test_a_scan_says_what_it_cannot_be():
    with pytest.raises(ValueError, match="ROW_IDs"):
        Scan(FILES, PHYSICAL, row_ids_of=1)
    with pytest.raises(ValueError, match="tags"):
        Scan(FILES, PHYSICAL, identity=True, tags=(1,))
    with pytest.raises(ValueError, match="not both"):
        Scan(FILES, PHYSICAL, deleted=DELETED, only={"a.parquet": pa.array([1], pa.int64())})
    with pytest.raises(ValueError, match="deletes by"):
        ReadPath(Way.JOINS, Way.EXPRESSIONS, "")
    assert Scan(FILES, PHYSICAL).file_tags == (None, None)
