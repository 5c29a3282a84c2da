"""Changes rendered as changelogs (ODF, FLINK, DEBEZIUM, RETRACT, UPSERT): the ODF RFC's
leaderboard streams, order and pairing rules, a replay oracle (applying each changelog to the
start state gives the end state), a Parquet round trip, and bad input."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow.parquet as pq
import pytest
from conftest import rows

from changelake.changes import scan
from changelake.errors import ColumnNotFoundError, InvalidStatementError, SqlSyntaxError

LEADERBOARD = (
    "CREATE VIEW leaderboard AS SELECT * FROM (SELECT ROW_NUMBER() OVER (ORDER BY score DESC)"
    " AS place, player, score FROM match_scores) WHERE place <= 2"
)
# The RFC's match_scores, one INSERT per match (versions 1, 2, 3).
MATCHES = (
    "(1, 'Alice', 100), (1, 'Bob', 80)",
    "(2, 'Alice', 70), (2, 'Charlie', 90)",
    "(3, 'Bob', 60), (3, 'Charlie', 110)",
)
# The RFC's streams, per match: (op, place, player, score).
RFC_RETRACT = [
    [("+A", 1, "Alice", 100), ("+A", 2, "Bob", 80)],
    [("-R", 2, "Bob", 80), ("+A", 2, "Charlie", 90)],
    [("-R", 1, "Alice", 100), ("-R", 2, "Charlie", 90), ("+A", 1, "Charlie", 110),
     ("+A", 2, "Alice", 100)],
]  # fmt: skip
RFC_UPSERT = [
    [("+A", 1, "Alice", 100), ("+A", 2, "Bob", 80)],
    [("+A", 2, "Charlie", 90)],
    [("+A", 1, "Charlie", 110), ("+A", 2, "Alice", 100)],
]
RFC_CHANGELOG = [
    [("+A", 1, "Alice", 100), ("+A", 2, "Bob", 80)],
    [("-C", 2, "Bob", 80), ("+C", 2, "Charlie", 90)],
    [("-C", 1, "Alice", 100), ("+C", 1, "Charlie", 110), ("-C", 2, "Charlie", 90),
     ("+C", 2, "Alice", 100)],
]  # fmt: skip
ODF_OPS = {0: "+A", 1: "-R", 2: "-C", 3: "+C"}


def _leaderboard(session) -> None:
    session.sql("CREATE TABLE match_scores (match_id INT, player STRING, score INT)")
    session.sql(LEADERBOARD)
    for values in MATCHES:
        session.sql(f"INSERT INTO match_scores VALUES {values}")


def _stream(session, fmt: str, version: int) -> list[tuple]:
    got = session.sql(
        f"SELECT op, place, player, score FROM leaderboard CHANGES (INFORMATION => DEFAULT,"
        f" FORMAT => {fmt}) AT (VERSION => {version - 1}) END (VERSION => {version})"
    ).collect()
    return [(ODF_OPS[r.op], r.place, r.player, r.score) for r in got]


def test_the_rfc_leaderboard_as_retract_upsert_and_changelog_streams(session):
    _leaderboard(session)
    for version in (1, 2, 3):
        want_retract = RFC_RETRACT[version - 1]
        got = _stream(session, "RETRACT", version)
        # A retract stream is equal up to order inside a commit; each update's -R precedes its +A.
        assert Counter(got) == Counter(want_retract)
        assert _stream(session, "UPSERT, KEYS => (place)", version) == RFC_UPSERT[version - 1]
        assert _stream(session, "ODF, KEYS => (place)", version) == RFC_CHANGELOG[version - 1]
    # The Python API renders the same.
    odf = session.changes("leaderboard", start=2, end=3, format="odf", keys=["place"])
    assert [ODF_OPS[r.op] for r in odf.collect()] == ["-C", "+C", "-C", "+C"]


def _history(session, seed: int) -> None:
    rng = random.Random(seed)
    session.sql("CREATE TABLE t (id INT, v STRING)")
    next_id = 0
    for _ in range(6):
        kind = rng.choice(["insert", "insert", "update", "delete"])
        if kind == "insert" or next_id == 0:
            values = ", ".join(f"({next_id + i}, 'v{rng.randrange(9)}')" for i in range(3))
            session.sql(f"INSERT INTO t VALUES {values}")
            next_id += 3
        elif kind == "update":
            session.sql(f"UPDATE t SET v = 'u{rng.randrange(9)}' WHERE id % 3 = {rng.randrange(3)}")
        else:
            session.sql(f"DELETE FROM t WHERE id = {rng.randrange(next_id)}")


def _assert_changelog_order(odf: list) -> None:
    """Rows come out by commit version, then ROW_ID, the -C of a pair directly before its +C,
    and ``offset`` increases strictly along that order."""
    offsets = [r.offset for r in odf]
    assert offsets == sorted(set(offsets))
    keys = [(r["METADATA$COMMIT_VERSION"], r["METADATA$ROW_ID"]) for r in odf]
    assert keys == sorted(keys)
    ops = [ODF_OPS[r.op] for r in odf]
    for i, op in enumerate(ops):
        if op == "-C":
            assert ops[i + 1] == "+C" and keys[i] == keys[i + 1]
        if op == "+C":
            assert ops[i - 1] == "-C"
        if i and keys[i - 1] == keys[i]:
            assert (ops[i - 1], op) == ("-C", "+C")


def test_odf_order_holds_across_many_partitions(session, monkeypatch):
    """A change scan in changelog order spreads rows over partitions by ROW_ID range; with a
    partition per 2 rows, a DEFAULT result spans several partitions (offsets skip between
    them) and still comes out ordered, with the same rows as the plain format."""
    monkeypatch.setattr(scan, "ROWS_PER_PARTITION", 2)
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("INSERT INTO t SELECT id, CAST(id AS STRING) FROM range(0, 200)")
    session.sql("INSERT INTO t SELECT id, CAST(id AS STRING) FROM range(200, 300)")
    session.sql("UPDATE t SET v = 'u' WHERE id % 3 = 0")
    session.sql("DELETE FROM t WHERE id % 7 = 0")
    session.sql("UPDATE t SET v = v WHERE id % 5 = 0")  # no-op pairs are not changes
    for start, information in ((1, "DEFAULT"), (0, "DEFAULT"), (1, "APPEND_ONLY"), (3, "DEFAULT")):
        clause = f"CHANGES (INFORMATION => {information}{{}}) AT (VERSION => {start})"
        odf = session.sql(f"SELECT * FROM t {clause.format(', FORMAT => ODF')}").collect()
        _assert_changelog_order(odf)
        assert len({r.offset >> 33 for r in odf}) > 1
        plain = session.sql(f"SELECT * FROM t {clause.format('')}").collect()
        as_plain = {"+A": "INSERT", "-R": "DELETE", "-C": "DELETE", "+C": "INSERT"}
        assert Counter(
            (r.id, r.v, as_plain[ODF_OPS[r.op]], r["METADATA$ROW_ID"]) for r in odf
        ) == Counter((r.id, r.v, r["METADATA$ACTION"], r["METADATA$ROW_ID"]) for r in plain)
    session.sql("CREATE STREAM s ON TABLE t AT (VERSION => 1)")
    plain = session.sql("SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)")
    flink = session.sql("SELECT * FROM s CHANGES (FORMAT => FLINK)").collect()
    ids = [r["METADATA$ROW_ID"] for r in flink]
    assert ids == sorted(ids) and len(flink) == plain.count()
    assert len({r.offset >> 33 for r in flink}) > 1


def _replay(start: list[tuple], events: list[tuple[str, tuple]]) -> Counter:
    state = Counter(start)
    for op, row in events:
        if op in ("+A", "+C", "+I", "+U", "c", "u+", "r"):
            state[row] += 1
        else:
            state[row] -= 1
            assert state[row] >= 0, f"retracted a row that is not there: {row}"
    return +state


@pytest.mark.parametrize("information", ["DEFAULT", "REDO"])
def test_every_format_replays_the_start_state_into_the_end_state(session, information):
    _history(session, seed=11)
    end = session.catalog.table("t").current_version
    for start in sorted({0, end // 2, end - 1}):
        before = rows(session.sql(f"SELECT id, v FROM t AT (VERSION => {start})"))
        after = Counter(rows(session.sql(f"SELECT id, v FROM t AT (VERSION => {end})")))
        clause = f"CHANGES (INFORMATION => {information}, FORMAT => {{}}) AT (VERSION => {start})"
        odf = session.sql(f"SELECT * FROM t {clause.format('ODF')}").collect()
        _assert_changelog_order(odf)
        ops = [ODF_OPS[r.op] for r in odf]
        assert _replay(before, [(ODF_OPS[r.op], (r.id, r.v)) for r in odf]) == after
        flink = session.sql(f"SELECT op, op_code, id, v FROM t {clause.format('FLINK')}").collect()
        assert [(r.op, r.op_code) for r in flink] == [
            {"+A": ("+I", 0), "-R": ("-D", 3), "-C": ("-U", 1), "+C": ("+U", 2)}[op] for op in ops
        ]
        assert _replay(before, [(r.op, (r.id, r.v)) for r in flink]) == after
        retract = session.sql(f"SELECT op, id, v FROM t {clause.format('RETRACT')}").collect()
        assert {r.op for r in retract} <= {0, 1}
        assert _replay(before, [(ODF_OPS[r.op], (r.id, r.v)) for r in retract]) == after
        debezium = session.sql(f"SELECT * FROM t {clause.format('DEBEZIUM')}").collect()
        events = []
        for r in debezium:
            assert r.op in ("c", "u", "d") and r.source.table == "t"
            if r.before is not None:
                events.append(("-", (r.before.id, r.before.v)))
            if r.after is not None:
                events.append(("+A", (r.after.id, r.after.v)))
        assert _replay(before, events) == after
        if information == "DEFAULT":
            upsert = session.sql(
                f"SELECT op, id, v FROM t {clause.format('UPSERT, KEYS => (id)')}"
            ).collect()
            state = {row[0]: row for row in before}
            for r in upsert:
                if r.op == 0:
                    state[r.id] = (r.id, r.v)
                else:
                    del state[r.id]
            assert Counter(state.values()) == after


def test_odf_survives_a_parquet_round_trip(session, tmp_path):
    _history(session, seed=3)
    odf = session.sql(
        "SELECT * FROM t CHANGES (INFORMATION => REDO, FORMAT => ODF) AT (VERSION => 0)"
    )
    path = str(tmp_path / "odf")
    odf.write.parquet(path)
    files = [f for f in (tmp_path / "odf").iterdir() if f.suffix == ".parquet"]
    schema = pq.read_schema(files[0])
    assert str(schema.field("op").type) == "int32"
    back = session.spark.read.parquet(path).orderBy("offset").collect()
    assert [tuple(r) for r in back] == [tuple(r) for r in odf.collect()]
    versions = [r["METADATA$COMMIT_VERSION"] for r in back]
    assert versions == sorted(versions)


def test_a_stream_renders_as_a_changelog_and_is_consumed(session):
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("CREATE STREAM s ON TABLE t SHOW_INITIAL_ROWS = TRUE")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    first = session.sql("SELECT op, after.id AS id FROM s CHANGES (FORMAT => DEBEZIUM)").collect()
    assert sorted((r.op, r.id) for r in first) == [("r", 1), ("r", 2)]
    session.sql("CREATE TABLE log (op INT, id INT, v STRING)")
    session.sql("INSERT INTO log SELECT op, id, v FROM s CHANGES (FORMAT => ODF)")
    session.sql("UPDATE t SET v = 'B' WHERE id = 2")
    session.sql("INSERT INTO log SELECT op, id, v FROM s CHANGES (FORMAT => ODF)")
    assert rows(session.sql("SELECT * FROM log")) == [
        (0, 1, "a"),
        (0, 2, "b"),
        (2, 2, "b"),
        (3, 2, "B"),
    ]
    assert rows(session.sql("SELECT * FROM s")) == []


def test_bad_changelog_requests_say_what_to_write(session):
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("INSERT INTO t VALUES (1, 'a')")
    cases = [
        ("FORMAT => ODFF", InvalidStatementError, "Did you mean ODF"),
        ("FORMAT => UPSERT", InvalidStatementError, "KEYS"),
        ("FORMAT => UPSERT, KEYS => (idd)", ColumnNotFoundError, "Did you mean id"),
        ("KEYS => (id)", InvalidStatementError, "FORMAT"),
        ("FORMT => ODF", SqlSyntaxError, "INFORMATION => ..., FORMAT"),
        ("FORMAT => ODF, FORMAT => FLINK", SqlSyntaxError, "FORMAT"),
    ]
    for clause, error, message in cases:
        with pytest.raises(error, match=message):
            session.sql(f"SELECT * FROM t CHANGES ({clause}) AT (VERSION => 0)").collect()
    session.sql("CREATE STREAM s ON TABLE t")
    with pytest.raises(InvalidStatementError, match="FORMAT => ...\\) alone"):
        session.sql("SELECT * FROM s CHANGES (INFORMATION => DEFAULT, FORMAT => ODF)")
