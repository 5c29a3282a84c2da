"""Changelogs are exact: APPLY CHANGES checks every row's op, key and sequence whatever the
form they come in (a column, an expression, a constant the optimizer folds), and a changelog
written by COPY INTO, in every format and file type, carries every column type exactly: read
back with PyArrow it holds the source's values, and applied with APPLY CHANGES it makes a copy
equal to the source."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
import pytest
from conftest import rows
from pyspark.sql import functions as F

import changelake
from changelake.changelog.layout import ExportDirectory
from changelake.clock import ManualClock
from changelake.errors import InvalidStatementError

# -- bad rows fail the statement, whatever form the bad value has ---------------------------------

# Row 1 is good in every form; row 2 is bad in the column and expression forms; a constant is
# bad in every row.
_SOURCE = "id INT, v STRING, seq BIGINT, flink STRING, odf INT, no_id INT, no_seq BIGINT"
_ROWS = "(1, 'a', 1, '+I', 0, NULL, NULL), (2, 'b', 2, 'U', 5, NULL, NULL)"
_ROW = r"row with id=\d, seq=\d"
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
    "sequence column": ("id, v, no_seq AS seq", "",
                        r"id=\d, seq=NULL: SEQUENCE BY column seq is NULL"),
    "sequence expression": ("id, v, CASE WHEN id > 1 THEN NULL ELSE seq END AS seq", "",
                            "id=2, seq=NULL: SEQUENCE BY column seq is NULL"),
    "sequence constant": ("id, v, CAST(NULL AS BIGINT) AS seq", "",
                          r"id=\d, seq=NULL: SEQUENCE BY column seq is NULL"),
}  # fmt: skip
SCD2 = ("op constant", "key constant")


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


# -- every format x file type keeps every value ---------------------------------------------------

UTC = dt.timezone.utc
COLUMNS = ("id", "ts", "d", "dec", "bin", "dbl", "big", "b", "s", "i")
TYPES = (
    "id BIGINT, ts TIMESTAMP, d DATE, dec DECIMAL(38,10), bin BINARY, dbl DOUBLE, big BIGINT,"
    " b BOOLEAN, s STRING, i INT"
)
_TRICKY = "quote \" apostrophe ' backslash \\ newline\n tab\t unicode é ∑ 😀 nul\x00 end"
# id -> values; version 1 inserts rows 1-4, 2 updates row 2, 3 deletes row 3, 4 inserts row 5.
FIRST = {
    1: (dt.datetime(2024, 1, 2, 3, 4, 5, 123456, UTC), dt.date(2024, 1, 2),
        Decimal("1234567890123456789012345678.0123456789"), b"\x00\xff\n\"'", 1.7976931348623157e308,
        2**63 - 1, True, _TRICKY, 2**31 - 1),
    2: (dt.datetime(1969, 12, 31, 23, 59, 59, 999999, UTC), dt.date(1969, 12, 31),
        Decimal("-0.0000000001"), b"", 5e-324, -(2**63), False, "", -(2**31)),
    3: (None,) * 9,
    4: (dt.datetime(2300, 6, 15, 12, 0, 0, 1, UTC), dt.date(1, 1, 1),
        Decimal("99999999999999999999999999.9999999999"), bytes(range(256)), -1.5e-300, 0, True,
        "日本語\r\n", 0),
}  # fmt: skip
UPDATED_2 = (dt.datetime(2024, 5, 6, 7, 8, 9, 7, UTC), dt.date(1969, 12, 31),
             Decimal("-0.0000000002"), b"\x01\x02", 5e-324, 42, None, "changed \"2\"\n", -(2**31))  # fmt: skip
UPDATE_2 = (
    "UPDATE src SET ts = CAST('2024-05-06T07:08:09.000007Z' AS TIMESTAMP),"
    " dec = CAST('-0.0000000002' AS DECIMAL(38,10)), bin = unhex('0102'), big = 42, b = NULL,"
    " s = 'changed \"2\"\\n' WHERE id = 2"
)
ROW_5 = (dt.datetime(2024, 11, 3, 5, 30, tzinfo=UTC), dt.date(9999, 12, 31), Decimal(0),
         b"\xfe", -0.1, -1, False, " ", 7)  # fmt: skip
FINAL = {1: FIRST[1], 2: UPDATED_2, 4: FIRST[4], 5: ROW_5}

# format clause, op column format for APPLY, whether an update leaves its old image
FORMATS = {
    "ODF": ("ODF", "ODF", True),
    "FLINK": ("FLINK", "FLINK", True),
    "RETRACT": ("RETRACT", "ODF", True),
    "UPSERT": ("UPSERT, KEYS => (id)", "ODF", False),
    "DEBEZIUM": ("DEBEZIUM", "DEBEZIUM", True),
}
DELETING_OPS = {1, 2, "-U", "-D"}


@pytest.fixture(scope="module")
def source(spark, tmp_path_factory):
    """A warehouse with table ``src`` (the history above), in a session time zone that is not
    UTC; shared by the tests below, which each write their own files and copy."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    session = changelake.connect(str(tmp_path_factory.mktemp("exact") / "wh"), spark=spark,
                                 clock=ManualClock())  # fmt: skip
    session.sql(f"CREATE TABLE src ({TYPES})")
    first = [(k, *v) for k, v in FIRST.items()]
    session.append("src", spark.createDataFrame(first, TYPES))
    session.sql(UPDATE_2)
    session.sql("DELETE FROM src WHERE id = 3")
    session.append("src", spark.createDataFrame([(5, *ROW_5)], TYPES))
    yield session
    session.close()
    spark.conf.set("spark.sql.session.timeZone", zone)


def _images(file_type: str, fmt: str, files: list[Path]) -> list[tuple[bool, tuple]]:
    """(deleting, row image) of every change in ``files``, read with PyArrow and decoded by
    the conventions the README states, independently of Spark."""
    found = []
    for f in files:
        if file_type == "PARQUET":
            records = pq.read_table(f).to_pylist()
        else:
            records = pa_json.read_json(f, parse_options=_json_schema(fmt)).to_pylist()
        for r in records:
            if fmt == "DEBEZIUM":
                found += [(side == "before", _row(file_type, fmt, r[side]))
                          for side in ("before", "after") if r[side] is not None]  # fmt: skip
            else:
                found.append((r["op"] in DELETING_OPS, _row(file_type, fmt, r)))
    return sorted(found, key=repr)


_ARROW = {"id": pa.int64(), "ts": pa.string(), "d": pa.string(), "dec": pa.string(),
          "bin": pa.string(), "dbl": pa.float64(), "big": pa.int64(), "b": pa.bool_(),
          "s": pa.string(), "i": pa.int64()}  # fmt: skip


def _json_schema(fmt: str) -> pa_json.ParseOptions:
    """The image columns as JSON holds them: timestamps, decimals and binary values as strings,
    dates as strings (Debezium: day counts)."""
    types = {**_ARROW, "d": pa.int64()} if fmt == "DEBEZIUM" else _ARROW
    image = [pa.field(c, t) for c, t in types.items()]
    if fmt == "DEBEZIUM":
        return pa_json.ParseOptions(
            explicit_schema=pa.schema([("before", pa.struct(image)), ("after", pa.struct(image))])
        )
    return pa_json.ParseOptions(explicit_schema=pa.schema(image))


_MICROS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _row(file_type: str, fmt: str, record: dict) -> tuple:
    values = [record[c] for c in COLUMNS]
    if file_type == "PARQUET":
        return tuple(values)
    key, ts, d, dec, bin_, *rest = values
    if ts is not None:
        assert _MICROS.fullmatch(ts), ts
        ts = dt.datetime.fromisoformat(ts)
    if d is not None:
        d = (
            dt.date(1970, 1, 1) + dt.timedelta(days=d)
            if fmt == "DEBEZIUM"
            else dt.date.fromisoformat(d)
        )
    if dec is not None:
        assert re.fullmatch(r"-?\d+\.\d{10}", dec), dec  # plain, with the column's scale
        dec = Decimal(dec)
    if bin_ is not None:
        bin_ = base64.b64decode(bin_, validate=True)
    return (key, ts, d, dec, bin_, *rest)


def _expected(fmt: str) -> list[tuple[bool, tuple]]:
    inserted = [*[(k, *v) for k, v in FIRST.items()], (2, *UPDATED_2), (5, *ROW_5)]
    deleted = [(2, *FIRST[2])] if FORMATS[fmt][2] else []
    deleted.append((3, *FIRST[3]))
    return sorted([(False, r) for r in inserted] + [(True, r) for r in deleted], key=repr)


@pytest.mark.parametrize("file_type", ["PARQUET", "JSON"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_changelog_file_keeps_every_value(source, tmp_path, fmt, file_type):
    session = source
    clause, op_format, _ = FORMATS[fmt]
    query = f"SELECT * FROM src CHANGES (INFORMATION => REDO, FORMAT => {clause}) AT (VERSION => 0)"
    out = (
        session.sql(f"COPY INTO '{tmp_path}' FROM ({query}) FILE_FORMAT = (TYPE = {file_type})")
        .collect()[0]
        .directory
    )
    manifest = ExportDirectory.at(str(tmp_path)).manifest(Path(out).name)
    assert manifest is not None
    files = [Path(out) / f.name for f in manifest.files]
    # PyArrow reads what the source holds.
    assert _images(file_type, fmt, files) == _expected(fmt)
    # Spark reads back what the query returned (the offsets aside: each run numbers anew).
    copy = f"copy_{fmt}_{file_type}".lower()
    session.sql(f"CREATE TABLE {copy} ({TYPES})")
    typed = session.read_changelog(out, format=fmt.lower(), table=copy)
    want = session.sql(query)
    assert typed.schema.simpleString() == want.schema.simpleString()
    assert _without_offsets(typed, fmt) == _without_offsets(want, fmt)
    # APPLY CHANGES makes an equal copy; Debezium files also without the table's types.
    log = session.read_changelog(out, format=fmt.lower(), table=None if fmt == "DEBEZIUM" else copy)
    sequence = "source.offset" if fmt == "DEBEZIUM" else "offset"
    session.apply_changes(copy, log, keys=["id"], sequence_by=sequence, op_column="op",
                          op_format=op_format)  # fmt: skip
    assert rows(session.sql(f"SELECT * FROM {copy}")) == rows(session.sql("SELECT * FROM src"))
    assert len(rows(session.sql(f"SELECT * FROM {copy}"))) == len(FINAL)


def _without_offsets(df, fmt: str) -> list[tuple]:
    if fmt == "DEBEZIUM":
        df = df.withColumn("source", df["source"].dropFields("offset"))
    else:
        df = df.drop("offset")
    return sorted((tuple(r) for r in df.collect()), key=repr)


def test_debezium_json_from_elsewhere_reads_as_debezium_writes_it(session, tmp_path):
    """Debezium's own encodings, read without the table's types: MicroTimestamp microseconds
    and ZonedTimestamp with an offset, Date day counts, decimals as strings or numbers, bytes as
    base64; in a file of inserts only, ``before`` is NULL in every line (JSON gives it no type)."""
    after = [
        {"id": 1, "ts": 1704164645123456, "d": 19724, "dec": "12.3400", "bin": "AP8=", "n": 7},
        {"id": 2, "ts": "2024-01-02T05:04:05.000001+02:00", "d": "2024-01-03", "dec": 5,
         "bin": "", "n": None},
    ]  # fmt: skip
    path = tmp_path / "cdc.json"
    path.write_text(
        "".join(
            json.dumps({"op": "c", "before": None, "after": a, "source": {"version": i}}) + "\n"
            for i, a in enumerate(after)
        )
    )
    session.sql(
        "CREATE TABLE c (id INT, ts TIMESTAMP, d DATE, dec DECIMAL(10,4), bin BINARY, n INT)"
    )
    log = session.read_changelog(str(path), format="debezium")
    session.apply_changes(
        "c", log, keys=["id"], sequence_by="source.version", op_column="op", op_format="debezium"
    )
    got = session.table("c").select(
        "id", F.unix_micros("ts"), "d", F.col("dec").cast("string"), F.hex("bin"), "n"
    )
    assert rows(got) == [
        (1, 1704164645123456, dt.date(2024, 1, 2), "12.3400", "00FF", 7),
        (2, 1704164645000001, dt.date(2024, 1, 3), "5.0000", "", None),
    ]
    # A value that is not of its column's type fails the apply; Spark alone would read NULL.
    bad = {
        "op": "u",
        "before": None,
        "after": {**after[0], "dec": "12.x"},
        "source": {"version": 9},
    }
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(InvalidStatementError, match=r"a line does not hold values .*12\.x"):
        session.apply_changes(
            "c",
            session.read_changelog(str(path), format="debezium", table="c"),
            keys=["id"], sequence_by="source.version", op_column="op", op_format="debezium",
        )  # fmt: skip
    assert rows(session.table("c").select("id", F.col("dec").cast("string"))) == [
        (1, "12.3400"),
        (2, "5.0000"),
    ]
