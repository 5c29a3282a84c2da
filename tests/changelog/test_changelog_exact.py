"""Changelogs are exact: APPLY CHANGES checks every row's op, key and sequence whatever the
form they come in (a column, an expression, a constant the optimizer folds), and a changelog
written by COPY INTO, in every format and file type, carries every column type exactly: read
back with PyArrow it holds the source's values, and applied with APPLY CHANGES it makes a copy
equal to the source."""

from __future__ import annotations

import re

import pytest
from conftest import rows

from changelake.errors import InvalidStatementError

# -- bad rows fail the statement, whatever form the bad value has ---------------------------------

# Row 1 is good in every form; row 2 is bad in the column and expression forms; a constant is
# bad in every row.
_SOURCE = "id INT, v STRING, seq BIGINT, flink STRING, odf INT, no_id INT, no_seq BIGINT"
_ROWS = "(1, 'a', 1, '+I', 0, NULL, NULL), (2, 'b', 2, 'U', 5, NULL, NULL)"
_ROW = r"row with id=\d, seq=\d"
_UNKNOWN_FLINK = "unknown FLINK op value {} "
_IMAGE = "STRUCT<id: INT, v: STRING>"

# (SELECT list over the source, options after KEYS (id) SEQUENCE BY seq, message)
BAD = {
    "op column": ("id, v, seq, flink AS op", "OP COLUMN op FORMAT FLINK",
                  r"row with id=2, seq=2: unknown FLINK op value U "),
    "op expression": ("id, v, seq, CASE WHEN id > 1 THEN 'U' ELSE '+I' END AS op",
                      "OP COLUMN op FORMAT FLINK", r"id=2, seq=2: unknown FLINK op value U "),
    "op constant": ("id, v, seq, 'U' AS op", "OP COLUMN op FORMAT FLINK",
                    _ROW + ": unknown FLINK op value U "),
    "op constant expression": ("id, v, seq, concat('+', 'X') AS op", "OP COLUMN op FORMAT FLINK",
                               _ROW + r": unknown FLINK op value \+X "),
    "op NULL constant": ("id, v, seq, CAST(NULL AS STRING) AS op", "OP COLUMN op FORMAT FLINK",
                         _ROW + ": unknown FLINK op value NULL "),
    "ODF op column": ("id, v, seq, odf AS op", "OP COLUMN op FORMAT ODF",
                      "id=2, seq=2: unknown ODF op value 5 "),
    "ODF op constant": ("id, v, seq, 5 AS op", "OP COLUMN op FORMAT ODF",
                        _ROW + ": unknown ODF op value 5 "),
    "Debezium op constant": (
        f"seq, 'x' AS op, named_struct('id', id, 'v', v) AS after, CAST(NULL AS {_IMAGE}) AS"
        " before", "OP COLUMN op FORMAT DEBEZIUM", _ROW + ": unknown DEBEZIUM op value x "),
    "Snowflake op constant": (
        "id, v, seq, 'UPDATE' AS METADATA$ACTION, false AS METADATA$ISUPDATE",
        "OP COLUMN METADATA$ACTION FORMAT SNOWFLAKE", _ROW + ": unknown SNOWFLAKE op value UPDATE "),
    "key column": ("no_id AS id, v, seq", "", r"id=NULL, seq=\d: KEYS column id is NULL"),
    "key expression": ("CASE WHEN seq > 1 THEN NULL ELSE id END AS id, v, seq", "",
                       "id=NULL, seq=2: KEYS column id is NULL"),
    "key constant": ("CAST(NULL AS INT) AS id, v, seq", "",
                     r"id=NULL, seq=\d: KEYS column id is NULL"),
    "key constant expression": ("nullif(1, 1) AS id, v, seq", "",
                                r"id=NULL, seq=\d: KEYS column id is NULL"),
    "sequence column": ("id, v, no_seq AS seq", "",
                        r"id=\d, seq=NULL: SEQUENCE BY column seq is NULL"),
    "sequence expression": ("id, v, CASE WHEN id > 1 THEN NULL ELSE seq END AS seq", "",
                            "id=2, seq=NULL: SEQUENCE BY column seq is NULL"),
    "sequence constant": ("id, v, CAST(NULL AS BIGINT) AS seq", "",
                          r"id=\d, seq=NULL: SEQUENCE BY column seq is NULL"),
    "sequence constant expression": ("id, v, CAST(nullif(1, 1) AS BIGINT) AS seq", "",
                                     r"id=\d, seq=NULL: SEQUENCE BY column seq is NULL"),
}  # fmt: skip
SCD2 = ("op constant", "ODF op constant", "key constant", "sequence constant")


def _bad_source(session) -> None:
    session.sql(f"CREATE TABLE src ({_SOURCE})")
    session.sql(f"INSERT INTO src VALUES {_ROWS}")


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_bad_op_key_or_sequence_fails_the_statement_in_every_form(session, scd_type):
    _bad_source(session)
    validity = ", __START_AT BIGINT, __END_AT BIGINT" if scd_type == 2 else ""
    session.sql(f"CREATE TABLE c (id INT, v STRING{validity})")
    stored = f"STORED AS SCD TYPE {scd_type}"
    # A first apply, so that the target and its state have rows to join with.
    session.sql(f"APPLY CHANGES INTO c FROM (SELECT 3 AS id, 'z' AS v, CAST(0 AS BIGINT) AS seq) KEYS (id)"
                f" SEQUENCE BY seq {stored}")  # fmt: skip
    before = (session.catalog.table("c").current_version, rows(session.sql("SELECT * FROM c")))
    missed = []
    for case, (select, options, message) in BAD.items():
        if scd_type == 2 and case not in SCD2:
            continue
        statement = (
            f"APPLY CHANGES INTO c FROM (SELECT {select} FROM src) KEYS (id) SEQUENCE BY seq"
            f" {options} {stored}"
        )
        try:
            session.sql(statement)
            missed.append(f"{case}: applied")
        except InvalidStatementError as e:
            if not re.search(message, str(e)):
                missed.append(f"{case}: {e}")
    assert missed == []
    after = (session.catalog.table("c").current_version, rows(session.sql("SELECT * FROM c")))
    assert after == before
