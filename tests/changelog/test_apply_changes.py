"""APPLY CHANGES: round trips of every changelog format (B equals A at every consumed point),
SCD TYPE 1 and 2 against a Python model under shuffled, duplicated and late events, tombstones
and their retention, bad input (nothing changes), streams consumed in the same commit, and
changelog files."""

from __future__ import annotations

import random
import uuid

import pytest
from conftest import rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelake.errors import ColumnNotFoundError, InvalidStatementError

FEW = settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
EVENTS = "id INT, v STRING, seq BIGINT, op STRING"


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _history_step(session, table: str, rng: random.Random, next_id: int) -> int:
    kind = rng.choice(["insert", "update", "delete"]) if next_id else "insert"
    if kind == "insert":
        values = ", ".join(f"({next_id + i}, 'v{rng.randrange(5)}')" for i in range(2))
        session.sql(f"INSERT INTO {table} VALUES {values}")
        return next_id + 2
    if kind == "update":
        session.sql(
            f"UPDATE {table} SET v = 'u{rng.randrange(5)}' WHERE id % 2 = {rng.randrange(2)}"
        )
    else:
        session.sql(f"DELETE FROM {table} WHERE id = {rng.randrange(next_id)}")
    return next_id


# (format clause, APPLY options after KEYS (id))
ROUND_TRIPS = {
    "odf": ("ODF", "SEQUENCE BY METADATA$COMMIT_VERSION OP COLUMN op FORMAT ODF"),
    "flink": ("FLINK", "SEQUENCE BY METADATA$COMMIT_VERSION OP COLUMN op FORMAT FLINK"),
    "debezium": ("DEBEZIUM", "SEQUENCE BY source.version OP COLUMN op FORMAT DEBEZIUM"),
    "upsert": (
        "UPSERT, KEYS => (id)",
        "SEQUENCE BY METADATA$COMMIT_VERSION OP COLUMN op FORMAT ODF",
    ),
}


@settings(FEW, max_examples=1)  # each run draws a new history
@given(seed=st.integers(0, 10_000))
def test_every_format_round_trips_a_random_history(session, seed):
    rng = random.Random(seed)
    a = _name("a")
    session.sql(f"CREATE TABLE {a} (id INT, v STRING)")
    stream = _name("s")
    session.sql(f"CREATE STREAM {stream} ON TABLE {a}")
    copies = {fmt: _name(f"b_{fmt}") for fmt in (*ROUND_TRIPS, "stream")}
    for b in copies.values():
        session.sql(f"CREATE TABLE {b} (id INT, v STRING)")
    next_id, consumed = 0, 0
    for _ in range(2):
        for _ in range(rng.randrange(1, 4)):
            next_id = _history_step(session, a, rng, next_id)
        point = session.catalog.table(a).current_version
        for fmt, (clause, options) in ROUND_TRIPS.items():
            source = (
                f"(SELECT * FROM {a} CHANGES (INFORMATION => REDO, FORMAT => {clause})"
                f" AT (VERSION => {consumed}) END (VERSION => {point}))"
            )
            session.sql(f"APPLY CHANGES INTO {copies[fmt]} FROM {source} KEYS (id) {options}")
        session.sql(
            f"APPLY CHANGES INTO {copies['stream']} FROM {stream} CHANGES (FORMAT => ODF)"
            " KEYS (id) SEQUENCE BY METADATA$COMMIT_VERSION OP COLUMN op FORMAT ODF"
        )
        consumed = point
        want = rows(session.sql(f"SELECT * FROM {a}"))
        for fmt, b in copies.items():
            assert rows(session.sql(f"SELECT * FROM {b}")) == want, fmt
    assert not session.stream_has_data(stream)


def _scd1_model(events):
    best = {}
    for id_, v, seq, op in events:
        rank = (seq, op == "D", v or "")
        if id_ not in best or rank > best[id_][0]:
            best[id_] = (rank, op, v)
    return sorted((k, v) for k, (_, op, v) in best.items() if op != "D")


def _scd2_model(events):
    # one event per (key, seq): a delete wins; identical duplicates are one
    by_seq = {}
    for id_, v, seq, op in events:
        prev = by_seq.get((id_, seq))
        if prev is None or (op == "D") > (prev[1] == "D"):
            by_seq[(id_, seq)] = (v, op)
    history = []
    for key in sorted({k for k, _ in by_seq}):
        open_row = None
        for seq in sorted(s for k, s in by_seq if k == key):
            v, op = by_seq[(key, seq)]
            if op == "D" or open_row is None or open_row[1] != v:
                if open_row is not None:
                    history.append((key, open_row[1], open_row[0], seq))
                open_row = None if op == "D" else (seq, v)
        if open_row is not None:
            history.append((key, open_row[1], open_row[0], None))
    return sorted(history, key=lambda r: (r[0], r[2]))


# Per key distinct sequences (equal sequences are tested on their own); values from a small set
# so that identical consecutive upserts happen.
_events = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.sampled_from(["x", "y", None]),
        st.integers(1, 40),
        st.sampled_from(["U", "U", "D"]),
    ),  # fmt: skip
    min_size=1,
    max_size=14,
    unique_by=lambda e: (e[0], e[2]),
)


def _apply_in_batches(session, table, events, rng, *, scd_type):
    shuffled = events + rng.sample(events, k=min(3, len(events)))  # with duplicates
    rng.shuffle(shuffled)
    cut = rng.randrange(len(shuffled) + 1)
    for batch in (shuffled[:cut], shuffled[cut:]):
        session.apply_changes(
            table,
            session.spark.createDataFrame(batch, EVENTS),
            keys=["id"],
            sequence_by="seq",
            delete_when="op = 'D'",
            scd_type=scd_type,
        )


@FEW
@given(events=_events, seed=st.integers(0, 1000))
def test_scd1_and_scd2_of_shuffled_duplicated_batches_equal_the_model(session, events, seed):
    rng = random.Random(seed)
    one, two = _name("one"), _name("two")
    session.sql(f"CREATE TABLE {one} (id INT, v STRING)")
    session.sql(f"CREATE TABLE {two} (id INT, v STRING, __START_AT BIGINT, __END_AT BIGINT)")
    _apply_in_batches(session, one, events, rng, scd_type=1)
    _apply_in_batches(session, two, events, rng, scd_type=2)
    assert rows(session.sql(f"SELECT * FROM {one}")) == _scd1_model(events)
    got = sorted(
        (tuple(r) for r in session.sql(f"SELECT * FROM {two}").collect()),
        key=lambda r: (r[0], r[2]),
    )
    assert got == _scd2_model(events)


def _events_df(session, events):
    return session.spark.createDataFrame(events, EVENTS)


_NO_TRACE = {
    # a delete arriving while the key has no open row; an upsert older than it, arriving later,
    # must end at it
    "delete_that_closed_no_row": (
        [[(2, "y", 17, "D"), (2, "y", 20, "U")], [(2, None, 2, "U")], [(2, "z", 9, "D")]],
        [(2, None, 2, 9), (2, "y", 20, None)],
    ),
    # upserts equal to the open row open none; a late delete before them splits the row, and
    # the first of them starts it again
    "upserts_merged_into_the_open_row": (
        [
            [(0, "x", s, "U") for s in (4, 7, 8, 11, 27, 32, 37)],
            [(0, "x", 2, "U"), (0, "x", 10, "U"), (0, "x", 34, "U"), (0, "y", 14, "D")],
        ],
        [(0, "x", 2, 14), (0, "x", 27, None)],
    ),
    "merged_upsert_before_a_closing_delete": (
        [[(1, "x", 4, "U"), (1, "x", 7, "U"), (1, "x", 10, "D")], [(1, "x", 5, "D")]],
        [(1, "x", 4, 5), (1, "x", 7, 10)],
    ),
}


@pytest.mark.parametrize("case", sorted(_NO_TRACE))
def test_scd2_remembers_events_that_left_no_trace_in_the_target(session, case):
    """Found by the property test above: events that change no row of the target still decide
    where rows start and end once late events arrive; each case's batches are also checked
    against the model."""
    batches, want = _NO_TRACE[case]
    assert _scd2_model([e for batch in batches for e in batch]) == want
    table = _name("h")
    session.sql(f"CREATE TABLE {table} (id INT, v STRING, __START_AT BIGINT, __END_AT BIGINT)")
    for batch in batches:
        session.apply_changes(
            table,
            _events_df(session, batch),
            keys=["id"],
            sequence_by="seq",
            delete_when="op = 'D'",
            scd_type=2,
        )
    got = sorted(
        (tuple(r) for r in session.sql(f"SELECT * FROM {table}").collect()), key=lambda r: r[2]
    )
    assert got == want


def test_ordered_and_shuffled_applies_agree_and_equal_sequences_are_deterministic(session):
    events = [(1, "a", 1, "U"), (1, "b", 2, "U"), (3, "d", 5, "U"), (3, "e", 5, "U"),
              (4, "f", 2, "U"), (4, None, 2, "D")]  # fmt: skip
    for order in (events, list(reversed(events))):
        table = _name("t")
        session.sql(f"CREATE TABLE {table} (id INT, v STRING)")
        for event in order:  # one event per apply: the worst arrival order
            session.apply_changes(
                table, _events_df(session, [event]), keys=["id"], sequence_by="seq",
                delete_when="op = 'D'",
            )  # fmt: skip
        got = rows(session.sql(f"SELECT * FROM {table}"))
        # key 3: equal sequences, the greater value hash wins whatever the order; key 4: the
        # delete wins over the upsert of the same sequence
        assert [r[0] for r in got] == [1, 3] and got[0] == (1, "b")
        assert got[1][1] in ("d", "e")
        if order is events:
            first = got
    assert got == first


def test_a_late_update_after_a_delete_is_ignored_until_the_tombstone_expires(session, clock):
    session.sql("CREATE TABLE t (id INT, v STRING) APPLY_TOMBSTONE_RETENTION_DAYS = 2")

    def apply(*events):
        session.apply_changes(
            "t", _events_df(session, list(events)), keys=["id"], sequence_by="seq",
            delete_when="op = 'D'",
        )  # fmt: skip
        return rows(session.sql("SELECT * FROM t"))

    assert apply((1, "a", 1, "U"), (2, "b", 1, "U")) == [(1, "a"), (2, "b")]
    assert apply((1, None, 5, "D")) == [(2, "b")]
    assert apply((1, "late", 3, "U"), (2, "old", 0, "U")) == [(2, "b")]  # both too old
    clock.advance(days=1)
    assert apply((1, "late", 4, "U")) == [(2, "b")]  # the tombstone is still live
    clock.advance(days=1.5)
    # past the retention the tombstone is dropped and the key is new again
    assert apply((1, "again", 2, "U")) == [(1, "again"), (2, "b")]
    state = rows(session.sql(f"SELECT id, __seq, __deleted FROM `{_state_table(session, 't')}`"))
    assert state == [(1, 2, False), (2, 1, False)]


def _state_table(session, table):
    """The name of ``table``'s APPLY CHANGES state (an internal table), or None."""
    found = session.sql(f"SHOW INTERNAL TABLES IN TABLE {table}").collect()
    return found[0].name if found else None


def _versions(session, *tables):
    return [session.catalog.find_table(t).current_version if session.catalog.find_table(t)
            else None for t in tables]  # fmt: skip


def test_bad_input_names_the_row_and_changes_nothing(session):
    session.sql("CREATE TABLE a (id INT, v STRING)")
    session.sql("INSERT INTO a VALUES (1, 'x'), (2, 'y')")
    session.sql("CREATE TABLE b (id INT, v STRING)")
    session.sql("CREATE TABLE b2 (id INT, v STRING, __START_AT BIGINT, __END_AT BIGINT)")
    session.apply_changes("b", "a", keys=["id"], sequence_by="id")
    odf = "id INT, v STRING, seq BIGINT, op INT, offset BIGINT"
    cases = [
        ([(3, "z", 1, 7, 0)], InvalidStatementError, r"row with id=3, seq=1: unknown ODF op value 7"),
        ([(3, "z", 1, 2, 0), (4, "w", 1, 3, 1)], InvalidStatementError, r"id=3, seq=1: -C without its \+C"),
        ([(None, "z", 1, 0, 0)], InvalidStatementError, r"id=NULL, seq=1: KEYS column id is NULL"),
        ([(5, "z", None, 0, 0)], InvalidStatementError, r"id=5, seq=NULL: SEQUENCE BY column seq is NULL"),
    ]  # fmt: skip
    state = _state_table(session, "b")
    before = _versions(session, "b", state)
    for data, error, message in cases:
        df = session.spark.createDataFrame(data, odf)
        with pytest.raises(error, match=message):
            session.apply_changes(
                "b", df, keys=["id"], sequence_by="seq", op_column="op", op_format="odf"
            )
    good = session.spark.createDataFrame([(3, "z", 1, 0, 0)], odf)
    with pytest.raises(ColumnNotFoundError, match="Did you mean id"):
        session.apply_changes("b", good, keys=["idd"], sequence_by="seq")
    with pytest.raises(ColumnNotFoundError, match="Did you mean seq"):
        session.apply_changes("b", good, keys=["id"], sequence_by="sq")
    with pytest.raises(ColumnNotFoundError, match="does not exist in table b"):
        session.apply_changes("b", good, keys=["id"], sequence_by="seq", columns=["w"])
    with pytest.raises(InvalidStatementError, match="cannot be ordered"):
        session.sql("APPLY CHANGES INTO b FROM (SELECT id, v, named_struct('x', 1) AS s FROM a)"
                    " KEYS (id) SEQUENCE BY s")  # fmt: skip
    with pytest.raises(InvalidStatementError, match="ADD COLUMNS"):
        session.sql("APPLY CHANGES INTO b FROM a KEYS (id) SEQUENCE BY id STORED AS SCD TYPE 2")
    with pytest.raises(InvalidStatementError, match="__START_AT BIGINT"):
        session.sql("APPLY CHANGES INTO b2 FROM (SELECT id, v, 'x' AS s FROM a) KEYS (id)"
                    " SEQUENCE BY s STORED AS SCD TYPE 2")  # fmt: skip
    with pytest.raises(InvalidStatementError, match="KEYS"):
        session.sql("APPLY CHANGES INTO b FROM a KEYS (v) SEQUENCE BY id")  # other keys
    assert _versions(session, "b", state) == before
    assert _state_table(session, "b2") is None
    assert rows(session.sql("SELECT * FROM b")) == [(1, "x"), (2, "y")]


def test_a_stream_source_is_consumed_in_the_same_commit_or_not_at_all(session):
    session.sql("CREATE TABLE a (id INT, v STRING, seq BIGINT)")
    session.sql("CREATE TABLE b (id INT, v STRING)")
    session.sql("CREATE STREAM s ON TABLE a")
    session.sql("INSERT INTO a VALUES (1, 'x', 1), (2, 'y', NULL)")
    statement = "APPLY CHANGES INTO b FROM s KEYS (id) SEQUENCE BY seq"
    with pytest.raises(InvalidStatementError, match="id=2, seq=NULL"):
        session.sql(statement)
    assert session.stream_has_data("s")
    assert rows(session.sql("SELECT * FROM b")) == []
    session.sql("UPDATE a SET seq = 2 WHERE id = 2")
    session.sql(statement)
    assert not session.stream_has_data("s")
    assert rows(session.sql("SELECT * FROM b")) == [(1, "x"), (2, "y")]
    history = session.sql("DESCRIBE HISTORY b").collect()
    assert [r.operation for r in history] == ["CREATE TABLE", "APPLY CHANGES"]
    # In a transaction, the apply is staged with the stream's frontier.
    session.sql("INSERT INTO a VALUES (3, 'z', 3)")
    session.sql("BEGIN")
    session.sql(statement)
    session.sql("ROLLBACK")
    assert session.stream_has_data("s")
    session.sql("BEGIN")
    session.sql(statement)
    session.sql("COMMIT")
    assert not session.stream_has_data("s")
    assert rows(session.sql("SELECT * FROM b")) == [(1, "x"), (2, "y"), (3, "z")]


def test_changelog_files_apply_ignore_nulls_and_columns(session, tmp_path):
    session.sql("CREATE TABLE a (id INT, v STRING, n INT)")
    session.sql("INSERT INTO a VALUES (1, 'x', 10), (2, 'y', 20), (3, 'z', 30)")
    session.sql("UPDATE a SET v = 'Y' WHERE id = 2")
    session.sql("DELETE FROM a WHERE id = 3")
    clause = "CHANGES (INFORMATION => REDO, FORMAT => {}) AT (VERSION => 0)"
    session.sql(f"SELECT * FROM a {clause.format('ODF')}").write.parquet(str(tmp_path / "odf"))
    session.sql(f"SELECT * FROM a {clause.format('DEBEZIUM')}").write.json(
        str(tmp_path / "debezium")
    )
    for fmt, options in (
        ("odf", {"sequence_by": "offset", "op_column": "op", "op_format": "ODF"}),
        ("debezium", {"sequence_by": "source.version", "op_column": "op", "op_format": "debezium"}),
    ):
        session.sql(f"CREATE TABLE b_{fmt} (id INT, v STRING, n INT)")
        log = session.read_changelog(str(tmp_path / fmt), format=fmt, table=f"b_{fmt}")
        session.apply_changes(f"b_{fmt}", log, keys=["id"], **options)
        assert rows(session.sql(f"SELECT * FROM b_{fmt}")) == [(1, "x", 10), (2, "Y", 20)], fmt
    # IGNORE NULL UPDATES keeps current values; COLUMNS / EXCEPT choose what is written.
    session.sql("CREATE TABLE c (id INT, v STRING, n INT)")
    session.sql("CREATE TABLE e (id INT, v STRING, n INT)")
    for table, extra in (("c", "COLUMNS (v)"), ("e", "COLUMNS * EXCEPT (n)")):
        session.sql(f"APPLY CHANGES INTO {table} FROM a KEYS (id) SEQUENCE BY n {extra}")
        assert rows(session.sql(f"SELECT * FROM {table}")) == [(1, "x", None), (2, "Y", None)]
    updates = session.spark.createDataFrame(
        [(1, None, 50), (2, "Q", 60)], "id INT, v STRING, n INT"
    )
    session.sql("CREATE TABLE u (id INT, v STRING, n INT)")
    session.apply_changes("u", "a", keys=["id"], sequence_by="n")
    session.apply_changes("u", updates, keys=["id"], sequence_by="n", ignore_null_updates=True)
    assert rows(session.sql("SELECT * FROM u")) == [(1, "x", 50), (2, "Q", 60)]
