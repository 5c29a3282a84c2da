"""The Python API beside SQL: session.table(name, version=) and session.append(name, data)."""

from __future__ import annotations

import datetime as dt
import decimal

import pandas as pd
import pyarrow as pa
import pytest
from conftest import rows

from changelake.errors import (
    ColumnNotFoundError,
    NotNullViolationError,
    TableNotFoundError,
    TimeTravelError,
)


@pytest.fixture
def people(session):
    session.sql("CREATE TABLE people (id INT NOT NULL, name STRING, score DOUBLE)")
    session.sql("INSERT INTO people VALUES (1, 'Jeff', 1.5), (2, 'Donny', 2.5)")
    return session


def test_table_now_and_at_version(people):
    people.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    assert rows(people.table("people")) == [(1, "Jeffrey", 1.5), (2, "Donny", 2.5)]
    assert rows(people.table("people", version=1)) == [(1, "Jeff", 1.5), (2, "Donny", 2.5)]
    assert rows(people.table("people", version=0)) == []
    assert people.table("PEOPLE").columns == ["id", "name", "score"]


def test_table_errors(people):
    with pytest.raises(TableNotFoundError, match="Did you mean people"):
        people.table("peeple")
    with pytest.raises(TimeTravelError, match="no version 9"):
        people.table("people", version=9)


def test_append_spark_dataframe(people, spark):
    df = spark.createDataFrame([(3, "Walter", 3.0)], "id int, name string, score double")
    result = people.append("people", df).first()
    assert (result.operation, result.version, result.rows_inserted) == ("INSERT", 2, 3 - 2)
    assert rows(people.table("people"))[-1] == (3, "Walter", 3.0)


def test_append_pandas_by_name_with_missing_nullable(people):
    frame = pd.DataFrame({"NAME": ["Maud", "Uli"], "id": [4, 5]})  # other order, no score
    people.append("people", frame)
    assert rows(people.sql("SELECT * FROM people WHERE id >= 4")) == [
        (4, "Maud", None),
        (5, "Uli", None),
    ]
    history = people.sql("DESCRIBE HISTORY people").collect()
    assert history[-1].rows_inserted == 2


def test_append_pandas_all_null_column(people):
    people.append("people", pd.DataFrame({"id": [6], "name": [None]}))
    assert rows(people.sql("SELECT * FROM people WHERE id = 6")) == [(6, None, None)]


def test_append_arrow_table(people):
    table = pa.table({"score": [9.0, None], "id": pa.array([7, 8], pa.int64())})
    people.append("people", table)
    assert rows(people.sql("SELECT id, name, score FROM people WHERE id > 6")) == [
        (7, None, 9.0),
        (8, None, None),
    ]


def test_append_arrow_all_types(session):
    session.sql(
        "CREATE TABLE t (i INT, b BIGINT, d DECIMAL(10,2), f DOUBLE, ok BOOLEAN, s STRING,"
        " day DATE, at TIMESTAMP, raw BINARY)"
    )
    at = dt.datetime(2024, 5, 1, 12, 30)
    table = pa.table(
        {
            "i": [1],
            "b": [2**40],
            "d": [decimal.Decimal("12.34")],
            "f": [0.5],
            "ok": [True],
            "s": ["x"],
            "day": [dt.date(2024, 5, 1)],
            "at": pa.array([at], pa.timestamp("us")),
            "raw": [b"\x00\x01"],
        }
    )
    session.append("t", table)
    assert rows(session.table("t")) == [
        (
            1,
            2**40,
            decimal.Decimal("12.34"),
            0.5,
            True,
            "x",
            dt.date(2024, 5, 1),
            at,
            bytearray(b"\x00\x01"),
        )
    ]


def test_append_unknown_column_suggests_and_changes_nothing(people):
    with pytest.raises(ColumnNotFoundError, match="Did you mean name"):
        people.append("people", pd.DataFrame({"id": [9], "nmae": ["x"]}))
    assert people.catalog.table("people").current_version == 1


def test_append_missing_not_null_column(people):
    with pytest.raises(NotNullViolationError, match="id"):
        people.append("people", pa.table({"name": ["nobody"]}))
    with pytest.raises(NotNullViolationError, match="people.id"):
        people.append("people", pd.DataFrame({"id": [None, 3], "name": ["a", "b"]}, dtype=object))
    assert people.catalog.table("people").current_version == 1
    assert len(rows(people.table("people"))) == 2


def test_append_rejects_other_objects(people):
    from changelake.errors import InvalidStatementError

    with pytest.raises(InvalidStatementError, match="pandas"):
        people.append("people", [(1, "a", 1.0)])


def test_append_inside_transaction(people, spark):
    people.sql("BEGIN")
    people.append("people", pa.table({"id": [10], "name": ["txn"]}))
    assert rows(people.sql("SELECT id FROM people WHERE id = 10")) == [(10,)]
    people.sql("ROLLBACK")
    assert rows(people.sql("SELECT id FROM people WHERE id = 10")) == []
