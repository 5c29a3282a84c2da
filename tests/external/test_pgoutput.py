"""pgoutput decoding of a real PostgreSQL server's changes, and the PostgreSQL type mapping.

One database gets one history of statements (``History``), each in its own transaction whose xid
is noted; the tests read the decoded transaction of each statement by name.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import struct
import uuid
from dataclasses import dataclass
from decimal import Decimal

import psycopg
import pyarrow as pa
import pytest
import sqlalchemy as sa
from support.postgres import create_database

from changelake.errors import ChangelakeError, SourceError, TypeMismatchError, UnsupportedError
from changelake.external.postgresql.pgoutput import (
    UNCHANGED,
    Change,
    Decoder,
    Relation,
    Transaction,
    Truncate,
    format_lsn,
    parse_lsn,
)
from changelake.external.postgresql.pgtypes import TYPE_TABLE, converter, spark_type
from changelake.ingest.values import arrow_type
from changelake.schema import Column, normalize_type

UTC = dt.UTC
PEEK = (
    "SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes("
    "'s', NULL, NULL, 'proto_version', '1', 'publication_names', 'p')"
)
KINDS = """
CREATE TABLE kinds (
    id integer PRIMARY KEY,
    small smallint,
    big bigint,
    price numeric(10,2),
    amount numeric,
    ratio real,
    score double precision,
    flag boolean,
    name text,
    code character varying(20),
    letters character(3),
    ident uuid,
    doc json,
    docb jsonb,
    day date,
    local_at timestamp without time zone,
    at timestamp(3) with time zone,
    payload bytea,
    note text,
    body text
)
"""
KIND_TYPES = {
    "id": "int",
    "small": "int",
    "big": "bigint",
    "price": "decimal(10,2)",
    "amount": "decimal(38,18)",
    "ratio": "double",
    "score": "double",
    "flag": "boolean",
    "name": "string",
    "code": "string",
    "letters": "string",
    "ident": "string",
    "doc": "string",
    "docb": "string",
    "day": "date",
    "local_at": "timestamp",
    "at": "timestamp",
    "payload": "binary",
    "note": "string",
    "body": "string",
}
IDENT = uuid.UUID("6f1c4a5e-0b7d-4c39-9a51-2f8e1d3c7b90")
FIRST = {
    "id": 1,
    "small": -7,
    "big": 9_000_000_000,
    "price": Decimal("12.34"),
    "amount": Decimal("-1234567.000000000000000001"),
    "ratio": 1.5,
    "score": -2.25e-10,
    "flag": True,
    "name": "naïve ✓ 'quoted'\nline",
    "code": "abc",
    "letters": "ab",
    "ident": IDENT,
    "doc": '{"a": [1, 2]}',
    "docb": '{"b": 1, "a": 2}',
    "day": dt.date(2024, 2, 29),
    "local_at": dt.datetime(2024, 1, 2, 3, 4, 5, 678901),
    "at": dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "payload": b"\x00\n\xff",
    "note": "first",
    "body": "short",
}
# What changelake reads back for FIRST: char(3) is blank-padded, jsonb normalized, timestamp(3)
# rounded to milliseconds, a timestamp without time zone read in UTC.
FIRST_READ = {
    **FIRST,
    "letters": "ab ",
    "ident": str(IDENT),
    "docb": '{"a": 2, "b": 1}',
    "local_at": dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    "at": dt.datetime(2024, 1, 2, 1, 4, 5, 123000, tzinfo=UTC),
}
SPECIAL = {"id": 2, "ratio": math.inf, "score": math.nan, "name": "", "payload": b""}
BIG = "".join(random.Random(7).choices("0123456789abcdef", k=200_000))


@dataclass(frozen=True)
class History:
    """The decoded transactions of the statements run on the source, by step name."""

    dsn: str
    steps: dict[str, Transaction]
    transactions: tuple[Transaction, ...]
    rows: tuple[tuple[str, str, bytes], ...]
    format_types: dict[str, str]
    started: dt.datetime
    finished: dt.datetime


def insert(conn: psycopg.Connection, table: str, values: dict[str, object]) -> None:
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(values.values()))


@pytest.fixture(scope="module")
def history(pg_server) -> History:
    url = sa.make_url(create_database(pg_server, "pgoutput_" + uuid.uuid4().hex[:8]))
    dsn = f"host={url.host} port={url.port} dbname={url.database} user={url.username}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The test server runs with synchronous_commit off, and decoding reads only flushed WAL:
        # this session's commits flush before they return, so the peek below sees all of them.
        conn.execute("SET synchronous_commit = on")
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute(KINDS)
        conn.execute("CREATE TABLE full_rows (id integer PRIMARY KEY, v text, body text)")
        conn.execute("ALTER TABLE full_rows REPLICA IDENTITY FULL")
        conn.execute("CREATE TABLE unpublished (id integer)")
        conn.execute("CREATE PUBLICATION p FOR TABLE kinds, full_rows")
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        format_types = dict(
            conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                " WHERE attrelid = 'kinds'::regclass AND attnum > 0 AND NOT attisdropped"
                " ORDER BY attnum"
            ).fetchall()
        )
        started = conn.execute("SELECT now()").fetchone()[0]
        xids: dict[str, int] = {}

        def step(name: str, *statements: str) -> None:
            with conn.transaction():
                xids[name] = conn.execute("SELECT txid_current()").fetchone()[0] & 0xFFFFFFFF
                for statement in statements:
                    conn.execute(statement)

        with conn.transaction():
            xids["insert"] = conn.execute("SELECT txid_current()").fetchone()[0] & 0xFFFFFFFF
            insert(conn, "kinds", FIRST)
        with conn.transaction():
            xids["special"] = conn.execute("SELECT txid_current()").fetchone()[0] & 0xFFFFFFFF
            insert(conn, "kinds", SPECIAL)
        step("update", "UPDATE kinds SET note = 'changed' WHERE id = 1")
        step("update_key", "UPDATE kinds SET id = 3 WHERE id = 2")
        step("delete", "DELETE FROM kinds WHERE id = 3")
        step(
            "many",
            "INSERT INTO kinds (id, note) VALUES (10, 'ten'), (11, 'eleven')",
            "UPDATE kinds SET note = 'TEN' WHERE id = 10",
            "DELETE FROM kinds WHERE id = 11",
        )
        step("unpublished", "INSERT INTO unpublished VALUES (1)")
        step("toast", f"INSERT INTO kinds (id, note, body) VALUES (20, 'big', '{BIG}')")
        step("toast_update", "UPDATE kinds SET note = 'touched' WHERE id = 20")
        step("full_insert", f"INSERT INTO full_rows VALUES (1, 'a', '{BIG}')")
        step("full_update", "UPDATE full_rows SET v = 'b' WHERE id = 1")
        step("full_delete", "DELETE FROM full_rows WHERE id = 1")
        step("truncate", "TRUNCATE kinds")
        step("truncate_both", "TRUNCATE kinds, full_rows RESTART IDENTITY CASCADE")
        step("alter", "ALTER TABLE kinds ADD COLUMN extra integer")
        step("after_alter", "INSERT INTO kinds (id, extra) VALUES (30, 7)")
        finished = conn.execute("SELECT now()").fetchone()[0]
        rows = tuple(conn.execute(PEEK).fetchall())
    transactions = tuple(Decoder().feed(rows))
    by_xid = {t.xid: t for t in transactions}
    steps = {name: by_xid[xid] for name, xid in xids.items() if xid in by_xid}
    return History(dsn, steps, transactions, rows, format_types, started, finished)


def read(change_values: tuple, relation: Relation, format_types: dict[str, str]) -> dict:
    """A tuple's values by column name, converted as an external table would."""
    return {
        column.name: value
        if value is None or value is UNCHANGED
        else converter(spark_type(format_types[column.name]))(value)
        for column, value in zip(relation.columns, change_values, strict=True)
    }


def same(a: object, b: object) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or (
        a == b and type(a) is type(b)
    )


def assert_read(actual: dict, expected: dict) -> None:
    unequal = {
        k: (actual[k], expected.get(k)) for k in actual if not same(actual[k], expected.get(k))
    }
    assert not unequal


# --- against PostgreSQL --------------------------------------------------------------------------


def test_every_published_transaction_once_in_commit_order(history):
    assert set(history.steps) == {
        "insert", "special", "update", "update_key", "delete", "many", "toast", "toast_update",
        "full_insert", "full_update", "full_delete", "truncate", "truncate_both", "after_alter",
    }  # fmt: skip
    # PostgreSQL 15 sends no transaction without a published change (the DDL, `unpublished`).
    assert len(history.transactions) == len(history.steps)
    final = [t.final_lsn for t in history.transactions]
    assert final == sorted(final) and len(set(final)) == len(final)
    for t in history.transactions:
        assert t.final_lsn < t.end_lsn
        assert history.started <= t.commit_time <= history.finished
        assert t.commit_time.tzinfo is not None and t.commit_time.utcoffset() == dt.timedelta(0)
        assert t.changes


def test_row_lsns_increase_and_a_commit_row_is_at_its_end_lsn(history):
    lsns = [parse_lsn(lsn) for lsn, _, _ in history.rows]
    assert lsns == sorted(lsns)
    commits = [parse_lsn(lsn) for lsn, _, data in history.rows if data[:1] == b"C"]
    assert commits == [t.end_lsn for t in history.transactions]
    assert all(format_lsn(parse_lsn(lsn)) == lsn for lsn, _, _ in history.rows)


def test_relation_describes_the_table(history):
    (change,) = history.steps["insert"].changes
    relation = change.relation
    assert (relation.schema, relation.name, relation.replica_identity) == ("public", "kinds", "d")
    assert [c.name for c in relation.columns] == list(KIND_TYPES)
    assert [c.name for c in relation.columns if c.is_key] == ["id"]
    by_name = {c.name: c for c in relation.columns}
    assert (by_name["id"].type_oid, by_name["id"].type_modifier) == (23, -1)
    assert by_name["price"].type_modifier == (10 << 16 | 2) + 4  # numeric's typmod encoding
    assert by_name["code"].type_modifier == 20 + 4  # varchar's: length + VARHDRSZ


def test_type_mapping_of_the_tables_columns(history):
    mapped = {name: spark_type(pg, column=name) for name, pg in history.format_types.items()}
    assert mapped == KIND_TYPES


def test_insert_values_convert_to_what_was_written(history):
    (change,) = history.steps["insert"].changes
    assert (change.kind, change.old, change.old_is_key) == ("INSERT", None, False)
    values = read(change.new, change.relation, history.format_types)
    assert_read(values, FIRST_READ)
    for index, (name, value) in enumerate(values.items()):
        pa.array([value], arrow_type(Column(index + 1, name, KIND_TYPES[name])))


def test_special_values_nulls_and_empties(history):
    (change,) = history.steps["special"].changes
    values = read(change.new, change.relation, history.format_types)
    assert_read(values, {name: None for name in KIND_TYPES} | SPECIAL)


def test_update_of_a_non_key_column_sends_no_old_row(history):
    (change,) = history.steps["update"].changes
    assert (change.kind, change.old, change.old_is_key) == ("UPDATE", None, False)
    values = read(change.new, change.relation, history.format_types)
    assert_read(values, FIRST_READ | {"note": "changed"})


def test_update_of_the_key_sends_the_old_key(history):
    (change,) = history.steps["update_key"].changes
    assert (change.kind, change.old_is_key) == ("UPDATE", True)
    assert change.old == ("2",) + (None,) * (len(KIND_TYPES) - 1)
    values = read(change.new, change.relation, history.format_types)
    assert_read(values, {name: None for name in KIND_TYPES} | SPECIAL | {"id": 3})


def test_delete_sends_the_key(history):
    (change,) = history.steps["delete"].changes
    assert (change.kind, change.new, change.old_is_key) == ("DELETE", None, True)
    assert change.old == ("3",) + (None,) * (len(KIND_TYPES) - 1)


def test_a_transaction_of_several_changes_keeps_their_order(history):
    changes = history.steps["many"].changes
    assert [(c.kind, (c.new or c.old)[0]) for c in changes] == [
        ("INSERT", "10"),
        ("INSERT", "11"),
        ("UPDATE", "10"),
        ("DELETE", "11"),
    ]
    assert changes[2].new[list(KIND_TYPES).index("note")] == "TEN"


def test_an_unchanged_toasted_value_is_not_sent(history):
    (inserted,) = history.steps["toast"].changes
    assert inserted.new[-1] == BIG
    (updated,) = history.steps["toast_update"].changes
    note, body = list(KIND_TYPES).index("note"), list(KIND_TYPES).index("body")
    assert updated.new[note] == "touched" and updated.new[body] is UNCHANGED
    assert repr(UNCHANGED) == "UNCHANGED"


def test_replica_identity_full_sends_whole_old_rows(history):
    (inserted,) = history.steps["full_insert"].changes
    relation = inserted.relation
    assert (relation.name, relation.replica_identity) == ("full_rows", "f")
    assert all(c.is_key for c in relation.columns)  # FULL flags every column as key
    (updated,) = history.steps["full_update"].changes
    assert (updated.old, updated.old_is_key) == (("1", "a", BIG), False)
    assert updated.new == ("1", "b", UNCHANGED)
    (deleted,) = history.steps["full_delete"].changes
    assert (deleted.kind, deleted.old, deleted.old_is_key) == ("DELETE", ("1", "b", BIG), False)


def test_truncate(history):
    (plain,) = history.steps["truncate"].changes
    assert isinstance(plain, Truncate)
    assert [r.name for r in plain.relations] == ["kinds"]
    assert (plain.cascade, plain.restart_identity) == (False, False)
    (both,) = history.steps["truncate_both"].changes
    assert sorted(r.name for r in both.relations) == ["full_rows", "kinds"]
    assert (both.cascade, both.restart_identity) == (True, True)


def test_a_schema_change_brings_a_new_relation(history):
    (change,) = history.steps["after_alter"].changes
    assert [c.name for c in change.relation.columns] == [*KIND_TYPES, "extra"]
    assert change.new[0] == "30" and change.new[-1] == "7"
    before = history.steps["insert"].changes[0].relation
    assert before.oid == change.relation.oid and before != change.relation


def test_rows_fed_in_pieces_decode_alike(history):
    decoder = Decoder()
    half = len(history.rows) // 2 + 1
    pieces = [*decoder.feed(history.rows[:half]), *decoder.feed(history.rows[half:])]
    assert tuple(pieces) == history.transactions
    assert {r.name for r in decoder.relations.values()} == {"kinds", "full_rows"}


def test_a_change_of_a_relation_never_described_is_refused(history):
    start = next(i for i, (_, _, d) in enumerate(history.rows) if d[:1] == b"U")
    begin = max(i for i in range(start) if history.rows[i][2][:1] == b"B")
    assert all(d[:1] != b"R" for _, _, d in history.rows[begin:start])  # described earlier
    with pytest.raises(SourceError, match=f"at LSN {history.rows[start][0]}.*no Relation"):
        list(Decoder().feed(history.rows[begin:]))


def test_each_call_of_the_sql_function_describes_relations_again(history):
    after_first = format_lsn(history.steps["insert"].end_lsn)
    with psycopg.connect(history.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_replication_slot_advance('s', %s::pg_lsn)", [after_first])
        rows = conn.execute(PEEK).fetchall()
    assert [data[:1] for _, _, data in rows[:3]] == [b"B", b"R", b"I"]
    assert tuple(Decoder().feed(rows)) == history.transactions[1:]


# --- synthetic messages ---------------------------------------------------------------------------


def _begin(final_lsn: int, xid: int, micros: int = 0) -> bytes:
    return b"B" + struct.pack("!QqI", final_lsn, micros, xid)


def _commit(lsn: int, end_lsn: int) -> bytes:
    return b"C" + struct.pack("!BQQq", 0, lsn, end_lsn, 0)


def _relation(oid: int, *columns: str) -> bytes:
    described = b"".join(
        struct.pack("!B", i == 0) + name.encode() + b"\0" + struct.pack("!Ii", 25, -1)
        for i, name in enumerate(columns)
    )
    return b"R" + struct.pack("!I", oid) + b"s\0t\0d" + struct.pack("!h", len(columns)) + described


def _tuple(*values: bytes) -> bytes:
    return struct.pack("!h", len(values)) + b"".join(values)


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"t" + struct.pack("!i", len(raw)) + raw


def _insert(oid: int, *values: bytes) -> bytes:
    return b"I" + struct.pack("!I", oid) + b"N" + _tuple(*values)


def _rows(*messages: bytes) -> list[tuple[str, str, bytes]]:
    return [(format_lsn(0x100 + i), "1", m) for i, m in enumerate(messages)]


RELATION = _relation(16384, "id", "v")


def test_synthetic_transaction_with_ignored_messages():
    messages = _rows(
        _begin(0x1_0000_0200, 4_000_000_000, micros=86_400_000_001),
        b"O" + struct.pack("!Q", 5) + b"origin\0",
        b"Y" + struct.pack("!I", 16500) + b"public\0mood\0",
        b"M" + struct.pack("!BQ", 1, 7) + b"prefix\0" + struct.pack("!i", 2) + b"hi",
        RELATION,
        _insert(16384, _text("1"), b"n"),
        b"U"
        + struct.pack("!I", 16384)
        + b"K"
        + _tuple(_text("1"), b"n")
        + b"N"
        + _tuple(b"n", b"u"),
        b"D" + struct.pack("!I", 16384) + b"O" + _tuple(_text("2"), _text("é")),
        _commit(0x1_0000_0200, 0x1_0000_0300),
    )
    (transaction,) = Decoder().feed(messages)
    relation = Relation(16384, "s", "t", "d", transaction.changes[0].relation.columns)
    assert transaction == Transaction(
        xid=4_000_000_000,
        final_lsn=0x1_0000_0200,
        end_lsn=0x1_0000_0300,
        commit_time=dt.datetime(2000, 1, 2, 0, 0, 0, 1, tzinfo=UTC),
        changes=(
            Change("INSERT", relation, new=("1", None), old=None, old_is_key=False),
            Change("UPDATE", relation, new=(None, UNCHANGED), old=("1", None), old_is_key=True),
            Change("DELETE", relation, new=None, old=("2", "é"), old_is_key=False),
        ),
    )


@pytest.mark.parametrize(
    ("messages", "found"),
    [
        ([b"S" + struct.pack("!I", 9)], "message 'S' .*does not decode"),
        ([b""], "empty message"),
        ([_begin(1, 1), _begin(2, 2)], "Begin while transaction 1"),
        ([_insert(16384, _text("1"), b"n")], "outside of one"),
        ([_begin(1, 1), _insert(16384, _text("1"), b"n")], "no Relation message"),
        ([RELATION, _begin(1, 1), _insert(16384, _text("1"))], "tuple of 1 columns"),
        ([RELATION, _begin(1, 1), _insert(16384, _text("1"), b"b")], "binary format"),
        ([RELATION, _begin(1, 1), _insert(16384, _text("1"), b"x")], "value kind 'x'"),
        ([RELATION, _begin(1, 1), _insert(16384, _text("1"), b"n")[:-1]], "ends after"),
        ([RELATION, _begin(1, 1), _insert(16384, _text("1"), b"n") + b"!"], "1 bytes after"),
        ([RELATION, _begin(1, 1), _insert(16384, _text("1"), b"t\0\0\0\1\xff")], "UTF-8"),
        ([b"R" + struct.pack("!I", 1) + b"unterminated"], "without its terminating NUL"),
        ([RELATION, _begin(1, 1), b"D" + struct.pack("!I", 16384) + b"N"], "marker 'N'"),
        ([_begin(1, 1), _commit(2, 3)], "Commit at 0/2 .* commits at 0/1"),
    ],
)
def test_malformed_or_unknown_messages_are_refused(messages, found):
    rows = _rows(*messages)
    with pytest.raises(SourceError, match=found) as raised:
        list(Decoder().feed(rows))
    assert isinstance(raised.value, ChangelakeError)
    assert f"at LSN {rows[-1][0]}" in str(raised.value)


# --- LSNs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0/0", 0),
        ("0/1925168", 0x1925168),
        ("16/B374D848", 0x16_B374D848),
        ("FFFFFFFF/FFFFFFFF", 2**64 - 1),
    ],
)
def test_lsn_text_round_trips(text, value):
    assert parse_lsn(text) == value
    assert format_lsn(value) == text
    assert parse_lsn(text.lower()) == value


@pytest.mark.parametrize("text", ["", "1925168", "0/", "/1", "0/1/2", "x/1", "100000000/0", "0/-1"])
def test_malformed_lsns_are_refused(text):
    with pytest.raises(SourceError, match="PostgreSQL LSN"):
        parse_lsn(text)


def test_format_lsn_refuses_values_outside_64_bits():
    with pytest.raises(SourceError):
        format_lsn(-1)
    with pytest.raises(SourceError):
        format_lsn(2**64)


# --- types ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pg_type", "expected"),
    [
        ("smallint", "int"),
        ("integer", "int"),
        ("int4", "int"),
        ("bigint", "bigint"),
        ("numeric(10,2)", "decimal(10,2)"),
        ("numeric(38,0)", "decimal(38,0)"),
        ("numeric(7)", "decimal(7,0)"),
        ("numeric", "decimal(38,18)"),
        ("decimal(5, 5)", "decimal(5,5)"),
        ("real", "double"),
        ("double precision", "double"),
        ("boolean", "boolean"),
        ("text", "string"),
        ("character varying(20)", "string"),
        ("character varying", "string"),
        ("character(3)", "string"),
        ("uuid", "string"),
        ("json", "string"),
        ("jsonb", "string"),
        ("date", "date"),
        ("timestamp without time zone", "timestamp"),
        ("timestamp(0) without time zone", "timestamp"),
        ("timestamp with time zone", "timestamp"),
        ("TIMESTAMP(3)  WITH TIME ZONE", "timestamp"),
        ("bytea", "binary"),
    ],
)
def test_spark_type(pg_type, expected):
    assert spark_type(pg_type) == expected
    assert normalize_type(expected) == expected  # a type the catalog stores as it is


@pytest.mark.parametrize(
    ("pg_type", "reason"),
    [
        ("integer[]", "an array"),
        ("character varying(20)[]", "an array"),
        ("numeric(40,2)", "more digits than the 38"),
        ("numeric(5,-2)", "scale outside"),
        ("numeric(2,5)", "scale outside"),
        ("time without time zone", ""),
        ("interval", ""),
        ("money", ""),
        ("xml", ""),
        ('"Mood"', ""),
        ("public.mood", ""),
        ("integer(4)", ""),
    ],
)
def test_unsupported_types_are_refused_with_a_way_out(pg_type, reason):
    with pytest.raises(UnsupportedError, match="column list without it") as raised:
        spark_type(pg_type, column="c")
    message = str(raised.value)
    assert f"Column 'c' has PostgreSQL type {pg_type!r}" in message and reason in message
    assert "cast it in a view on the source" in message


def test_type_table_rows_are_what_spark_type_says():
    def concrete(text: str) -> str:
        for general, example in [("(p,s)", "(10,2)"), ("(p,0)", "(10,0)"), ("(p)", "(10)")]:
            text = text.replace(general, example)
        return text.replace("(n)", "(5)")

    for pg_types, changelake_type in TYPE_TABLE:
        expected = concrete(changelake_type.split(" (")[0]).lower()
        for pg_type in pg_types.split(", "):
            assert spark_type(concrete(pg_type)) == expected, (pg_type, changelake_type)


@pytest.mark.parametrize(
    ("target", "text", "expected"),
    [
        ("int", "-2147483648", -2147483648),
        ("bigint", "9223372036854775807", 9223372036854775807),
        ("decimal(10,2)", "12.3", Decimal("12.30")),
        ("decimal(10,2)", "-0.005", Decimal("-0.01")),
        ("decimal(38,18)", "0.1234567890123456785", Decimal("0.123456789012345679")),
        (
            "decimal(38,18)",
            "99999999999999999999.5",
            Decimal("99999999999999999999.500000000000000000"),
        ),
        ("decimal(2,2)", "0", Decimal("0.00")),
        ("double", "1.5e-10", 1.5e-10),
        ("double", "Infinity", math.inf),
        ("double", "-Infinity", -math.inf),
        ("boolean", "t", True),
        ("boolean", "f", False),
        ("string", "x'y", "x'y"),
        ("date", "2024-02-29", dt.date(2024, 2, 29)),
        (
            "timestamp",
            "2024-01-02 03:04:05.123456+00",
            dt.datetime(2024, 1, 2, 3, 4, 5, 123456, UTC),
        ),
        ("timestamp", "2024-01-02 03:04:05+05:30", dt.datetime(2024, 1, 1, 21, 34, 5, tzinfo=UTC)),
        ("timestamp", "2024-01-02 03:04:05.5", dt.datetime(2024, 1, 2, 3, 4, 5, 500000, UTC)),
        ("binary", "\\x0a0bFF", b"\n\x0b\xff"),
        ("binary", "\\x", b""),
    ],
)
def test_converter(target, text, expected):
    value = converter(target)(text)
    assert value == expected and type(value) is type(expected)
    if isinstance(value, Decimal):
        assert value.as_tuple().exponent == -int(target.split(",")[1].rstrip(")"))


def test_converter_keeps_nan():
    assert math.isnan(converter("double")("NaN"))


@pytest.mark.parametrize(
    ("target", "text", "reason"),
    [
        ("decimal(10,2)", "NaN", "NaN and infinity"),
        ("decimal(38,18)", "Infinity", "NaN and infinity"),
        ("decimal(4,2)", "100.00", "more than 2 digits before"),
        ("decimal(4,2)", "99.995", "more than 2 digits before"),
        ("decimal(38,18)", "1" + "0" * 40, "more than 20 digits before"),
        ("date", "infinity", "hold no infinity"),
        ("date", "-infinity", "hold no infinity"),
        ("timestamp", "infinity", "hold no infinity"),
        ("date", "0044-03-15 BC", "start at year 1"),
        ("timestamp", "0001-01-01 00:00:00+01", "expected ISO format"),
        ("date", "10000-01-01", "expected ISO format"),
        ("boolean", "true", "expected 't' or 'f'"),
        ("binary", "abc\\000", "bytea_output to hex"),
        ("binary", "\\xZZ", "bytea_output to hex"),
    ],
)
def test_values_changelake_cannot_hold_are_refused(target, text, reason):
    with pytest.raises(TypeMismatchError, match=reason) as raised:
        converter(target)(text)
    assert f"does not fit changelake type {target}" in str(raised.value)


def test_converter_of_an_unknown_type():
    with pytest.raises(UnsupportedError, match="'interval'"):
        converter("interval")
