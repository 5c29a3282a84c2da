"""Change queries against snapshot diffs, over random DML histories and every interval of each.

For each history (inserts, re-inserts of deleted keys, updates including to the same value,
deletes, merges, OPTIMIZE, VACUUM) and each interval ``(a, b]`` of its versions:

* DEFAULT equals the diff of the snapshots at ``a`` and ``b`` by row identity;
* APPEND_ONLY equals the rows the statements in the interval inserted, as inserted;
* replaying REDO in commit order on the snapshot at ``a`` gives the snapshot at ``b``.

One history is cheap to check against many intervals, so each example checks all of them, and
all intervals of one information kind run as one Spark job.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import reduce

import pytest
from conftest import read_path, row_level_plan, state_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import changelake
from changelake.changes.scan import row_id
from changelake.clock import ManualClock
from changelake.spark import native
from changelake.storage.deletion import has_images
from changelake.storage.snapshot import RID, state_relation

KEYS = range(6)
VALUES = st.integers(0, 2)  # few values, so updates to the same value are common
MIN_CASES_PER_HISTORY = 75  # but the first: Hypothesis tries the simplest history first
ACTION, ISUPDATE, ROW_ID = "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"
COMMIT_VERSION = "METADATA$COMMIT_VERSION"

Values = tuple[int, int]  # (id, v)


@dataclass
class History:
    """What the model knows per version: the live rows and the rows that version inserted."""

    live: dict[int, dict[int, int]] = field(default_factory=lambda: {0: {}})
    inserted: dict[int, list[Values]] = field(default_factory=lambda: {0: []})
    statements: list[str] = field(default_factory=list)

    @property
    def last(self) -> int:
        return max(self.live)


def _select_values(rows: list[tuple]) -> str:
    body = ", ".join("(" + ", ".join(repr(x) for x in r) + ")" for r in rows)
    return (
        "SELECT CAST(id AS INT) AS id, CAST(v AS INT) AS v, CAST(op AS STRING) AS op"
        f" FROM VALUES {body} AS s(id, v, op)"
    )


def _statement(
    data: st.DataObject, live: dict[int, int]
) -> tuple[str, dict[int, int], list[Values]]:
    """A random statement: its SQL, the live rows after it, the rows it inserts."""
    absent = [k for k in KEYS if k not in live]
    kinds = ["update", "delete", "merge", "optimize", "vacuum"] + ["insert"] * 2 * bool(absent)
    kind = data.draw(st.sampled_from(kinds))
    after = dict(live)
    if kind == "insert":
        keys = data.draw(st.lists(st.sampled_from(absent), min_size=1, max_size=3, unique=True))
        rows = [(k, data.draw(VALUES)) for k in keys]
        after.update(rows)
        return "INSERT INTO t VALUES " + ", ".join(map(str, rows)), after, rows
    if kind in ("update", "delete"):
        keys = data.draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
        where = f"id IN ({', '.join(map(str, keys))})"
        if kind == "delete":
            for k in keys:
                after.pop(k, None)
            return f"DELETE FROM t WHERE {where}", after, []
        value = data.draw(st.one_of(VALUES, st.just("v")))  # "v": every row to its own value
        for k in keys:
            if k in after and value != "v":
                after[k] = value  # type: ignore[assignment]
        return f"UPDATE t SET v = {value} WHERE {where}", after, []
    if kind == "merge":
        keys = data.draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
        source, inserted = [], []
        for k in keys:
            value = data.draw(VALUES)
            if k in live and data.draw(st.booleans()):
                source.append((k, value, "D"))
                del after[k]
            elif k in live:
                source.append((k, value, "U"))
                after[k] = value
            else:
                source.append((k, value, "I"))
                after[k] = value
                inserted.append((k, value))
        sql = (
            f"MERGE INTO t USING ({_select_values(source)}) s ON t.id = s.id"
            " WHEN MATCHED AND s.op = 'D' THEN DELETE"
            " WHEN MATCHED THEN UPDATE SET v = s.v"
            " WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)"
        )
        return sql, after, inserted
    return ("OPTIMIZE t" if kind == "optimize" else "VACUUM t"), after, []


def _dv_files(session) -> set[str]:
    info = session.catalog.table("t")
    tracked = session.catalog.files_changed_between(
        info.table_id, start_exclusive=-1, end_inclusive=info.current_version
    )
    return {p for f in tracked for _, p, _ in f.dvs}


def _run_history(
    session, clock: ManualClock, data: st.DataObject, *, before_images: bool
) -> History:
    # Retention longer than the longest history (32 statements, 3 h apart at most), so every
    # version stays readable; retention itself is tested in tests/streams/test_staleness.py.
    session.sql(
        "CREATE TABLE t (id INT, v INT) DATA_RETENTION_TIME_IN_DAYS = 7"
        f" BEFORE_IMAGES = {before_images}"
    )
    history = History()
    # Draw until the history has enough versions (statements that change nothing add none), so
    # every example yields many intervals: MIN_CASES_PER_HISTORY cases and more.
    wanted = data.draw(st.integers(6, 8))
    for _ in range(4 * wanted):
        if history.last >= wanted:
            break
        sql, after, inserted = _statement(data, history.live[history.last])
        clock.advance(seconds=data.draw(st.sampled_from([1, 600, 3 * 3600])))
        history.statements.append(sql)
        session.sql(sql)
        version = session.catalog.table("t").current_version
        if version == history.last:
            assert after == history.live[version] and not inserted, sql
            continue
        assert version == history.last + 1, sql
        history.live[version] = after
        history.inserted[version] = inserted
    return history


CHUNK = 8  # change scans per Spark job: more saves job overhead, but every branch broadcasts


def _union(frames: list[DataFrame]) -> list:
    out = []
    for i in range(0, len(frames), CHUNK):
        out += reduce(DataFrame.unionByName, frames[i : i + CHUNK]).collect()
    return out


def _snapshots(session, history: History) -> dict[int, dict[str, Values]]:
    """ROW_ID -> (id, v) at every version, by time travel with row identity."""
    info = session.catalog.table("t")
    frames = [
        state_relation(session.spark, session.warehouse, state_of(session, info, v), identity=True)
        .frame(session.spark)
        .select(F.lit(v).alias("_at"), F.expr(row_id(info.table_id, RID)).alias("rid"), "id", "v")
        for v in history.live
    ]
    out: dict[int, dict[str, Values]] = {v: {} for v in history.live}
    for r in _union(frames):
        assert r["rid"] not in out[r["_at"]], "row identities are unique in a snapshot"
        out[r["_at"]][r["rid"]] = (r["id"], r["v"])
    for v, snapshot in out.items():
        assert sorted(snapshot.values()) == sorted(history.live[v].items()), (v, history.statements)
    return out


def _changes(session, intervals: list[tuple[int, int]], information: str) -> dict[int, list]:
    frames = [
        session.sql(
            f"SELECT *, {i} AS _case FROM t CHANGES (INFORMATION => {information})"
            f" AT (VERSION => {a}) END (VERSION => {b})"
        )
        for i, (a, b) in enumerate(intervals)
    ]
    out: dict[int, list] = {i: [] for i in range(len(intervals))}
    for r in _union(frames):
        out[r["_case"]].append(r)
    return out


def _diff(start: dict[str, Values], end: dict[str, Values]) -> list[tuple]:
    """The minimum delta by identity: (ROW_ID, id, v, action, isupdate), sorted."""
    out = []
    for rid in start.keys() | end.keys():
        old, new = start.get(rid), end.get(rid)
        if old == new:
            continue
        if old is not None:
            out.append((rid, *old, "DELETE", new is not None))
        if new is not None:
            out.append((rid, *new, "INSERT", old is not None))
    return sorted(out)


def _check(session, history: History) -> int:
    snapshots = _snapshots(session, history)
    versions = sorted(history.live)
    intervals = [(a, b) for a in versions for b in versions if a <= b]
    ctx = history.statements

    default = _changes(session, intervals, "DEFAULT")
    for i, (a, b) in enumerate(intervals):
        got = sorted((r[ROW_ID], r["id"], r["v"], r[ACTION], r[ISUPDATE]) for r in default[i])
        assert got == _diff(snapshots[a], snapshots[b]), ("DEFAULT", a, b, ctx)

    append_only = _changes(session, intervals, "APPEND_ONLY")
    for i, (a, b) in enumerate(intervals):
        got = append_only[i]
        expected = Counter(row for v in range(a + 1, b + 1) for row in history.inserted[v])
        assert Counter((r["id"], r["v"]) for r in got) == expected, ("APPEND_ONLY", a, b, ctx)
        assert {(r[ACTION], r[ISUPDATE]) for r in got} <= {("INSERT", False)}
        assert len({r[ROW_ID] for r in got}) == len(got), "inserted rows have distinct ROW_IDs"

    redo = _changes(session, intervals, "REDO")
    for i, (a, b) in enumerate(intervals):
        state = dict(snapshots[a])
        for r in sorted(redo[i], key=lambda r: (r[COMMIT_VERSION], r[ROW_ID], r[ACTION])):
            assert a < r[COMMIT_VERSION] <= b, ("REDO", a, b, ctx)
            if r[ACTION] == "DELETE":
                assert state.pop(r[ROW_ID], None) == (r["id"], r["v"]), ("REDO", a, b, ctx)
            else:
                assert r[ROW_ID] not in state, ("REDO", a, b, ctx)
                state[r[ROW_ID]] = (r["id"], r["v"])
        assert state == snapshots[b], ("REDO", a, b, ctx)
    return 3 * len(intervals)


# Each history costs a minute of Spark jobs: the default run draws a few for each way of reading,
# the nightly run (README) many more.
@pytest.mark.parametrize(
    "histories", [2, pytest.param(12, marks=pytest.mark.nightly)], ids=["default", "nightly"]
)
@pytest.mark.parametrize(
    ("before_images", "read", "plan"),
    [
        (True, "changelake-reader", "one-pass"),
        (False, "changelake-reader", "auto"),
        (True, "spark-reader", "two-phase"),
        (True, "joins", "auto"),
    ],
    ids=[
        "dv-images-one-pass",
        "dv-positions-only",
        "spark-reader-two-phases",
        "joins-instead-of-jvm-code",
    ],
)
def test_changes_equal_snapshot_diffs(
    spark, tmp_path_factory, before_images, read, plan, histories
):
    """Deleted rows come from the before-images beside the DVs, or (tables that keep none, and
    DVs written before images existed) from the data files: both must equal the diff. Scans
    apply DVs and per-file constants inside changelake's Parquet reader, with changelake's
    expressions over Spark's reader, or (a SparkSession started without changelake's jar) with
    joins: each must equal the diff too. UPDATE and DELETE take their before-images from one
    pass or from phase 2: both must too."""
    checked: list[int] = []

    @settings(
        max_examples=histories,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        clock = ManualClock()
        session = changelake.connect(str(tmp_path_factory.mktemp("wh")), spark=spark, clock=clock)
        try:
            history = _run_history(session, clock, data, before_images=before_images)
            dvs = _dv_files(session)
            assert all(has_images(session.warehouse, p) == before_images for p in dvs), dvs
            checked.append(_check(session, history))
        finally:
            session.close()

    if read == "joins":
        spark.conf.set(native.ENABLED, "false")
    try:
        with (
            read_path(spark, "spark-reader" if read == "joins" else read),
            row_level_plan(spark, plan),
        ):
            run()
    finally:
        spark.conf.unset(native.ENABLED)
    print(f"checked {sum(checked)} (interval, information) cases over {len(checked)} histories")
    assert sum(checked) >= MIN_CASES_PER_HISTORY * (histories - 1), checked
