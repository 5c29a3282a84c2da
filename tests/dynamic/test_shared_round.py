"""A scheduler round shares its work (issue 40 item 3): the dynamic tables that read a base table
over the same interval read its changes from one scan, kept for the round; refreshes that do not
read each other run at once on the scheduler's threads. Oracle: every table holds its query's
rows, as refreshing the tables one at a time leaves them."""

from __future__ import annotations

import doctest
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from tests.conftest import rows

import changelake.dynamic.waves
from changelake.dynamic import dag as dag_module
from changelake.dynamic.dag import refresh_round
from changelake.dynamic.refresh import data_timestamp_now
from changelake.plan import views
from changelake.runtime.env import Env
from changelake.scheduling.scheduler import Scheduler, SchedulerSettings
from changelake.sql.execute import run_task_body

# three tables read `base` (two from the same frontier), two read those, one reads two of them
DAG = {
    "f1": "SELECT id, g, v FROM base WHERE v > 1",
    "f2": "SELECT id, v FROM base WHERE g = 1",
    "f3": "SELECT g, v FROM base",
    "a1": "SELECT g, SUM(v) AS total, COUNT(*) AS n FROM f1 GROUP BY g",
    "a2": "SELECT v, COUNT(*) AS n FROM f2 GROUP BY v",
    "top": "SELECT a1.g, a1.total, a2.n FROM a1 JOIN a2 ON a1.g = a2.v",
}


@pytest.fixture
def dag(session, clock):
    session.sql("CREATE TABLE base (id INT, g INT, v INT)")
    session.sql(
        "INSERT INTO base SELECT CAST(id AS INT), CAST(id % 3 AS INT), CAST(id % 5 AS INT)"
        " FROM range(30)"
    )
    for name, query in DAG.items():
        session.sql(f"CREATE DYNAMIC TABLE {name} TARGET_LAG = '1 minute' AS {query}")
    clock.advance(seconds=1)
    return session


def test_the_waves_doctests_hold():
    assert doctest.testmod(changelake.dynamic.waves).failed == 0


def _change(session, clock, i: int) -> None:
    session.sql(f"INSERT INTO base VALUES ({100 + i}, {i % 3}, {i % 5}), ({200 + i}, 1, 2)")
    session.sql(f"UPDATE base SET v = v + 1 WHERE id = {i}")
    session.sql(f"DELETE FROM base WHERE id = {29 - i}")
    clock.advance(seconds=1)


def _env(session) -> Env:
    return Env.of(session.catalog, session.clock, session.spark, session.warehouse)


def _scans(monkeypatch) -> Counter:
    """How many change scans of each table (by id, interval) the view plans build from now on."""
    made: Counter = Counter()
    scan = views.changes_between

    def counting(ctx, info, *, start, end, information, **kwargs):
        made[(info.name, start, end)] += 1
        return scan(ctx, info, start=start, end=end, information=information, **kwargs)

    monkeypatch.setattr(views, "changes_between", counting)
    return made


def _round(session, workers=None):
    ctx = _env(session).context()
    roots = session.catalog.list_dynamic_tables()
    return refresh_round(
        ctx,
        roots,
        data_timestamp_now(ctx),
        trigger=lambda _: "SCHEDULED",
        workers=workers,
    )


def _check_queries(session) -> None:
    for name, query in DAG.items():
        assert Counter(rows(session.sql(f"SELECT * FROM {name}"))) == Counter(
            rows(session.sql(query))
        ), name


def _inserted(session, clock, i: int) -> None:
    """Inserts only: the filters' refreshes read their APPEND_ONLY changes (inserts_only)."""
    session.sql(f"INSERT INTO base VALUES ({300 + i}, {i % 3}, {i % 5 + 2}), ({400 + i}, 1, 3)")
    clock.advance(seconds=1)


@pytest.mark.parametrize("changed", [_change, _inserted], ids=["any change", "inserts only"])
def test_a_round_scans_a_base_tables_changes_once_and_hands_each_delta_to_its_readers(
    dag, clock, monkeypatch, changed
):
    for i in range(2):
        changed(dag, clock, i)
        made = _scans(monkeypatch)
        done = _round(dag)
        monkeypatch.undo()
        assert not done.failed and not done.lost
        assert {o.name: o.record.action for o in done.refreshed} == dict.fromkeys(
            DAG, "INCREMENTAL"
        )
        assert list(made.values()) == [1], made  # f1, f2, f3 read it over one interval
        assert {k[0] for k in made} == {"base"}  # a1, a2, top read what f1, f2, a1, a2 wrote
        _check_queries(dag)


def test_tables_that_read_a_base_table_from_different_frontiers_scan_each_interval(
    dag, clock, monkeypatch
):
    _change(dag, clock, 0)
    dag.sql("ALTER DYNAMIC TABLE f3 REFRESH")  # f3's frontier on base moves ahead of the others'
    _change(dag, clock, 1)
    made = _scans(monkeypatch)
    done = _round(dag)
    monkeypatch.undo()
    assert not done.failed and not done.lost
    on_base = sorted((k[1:], n) for k, n in made.items() if k[0] == "base")
    assert len(on_base) == 2 and on_base[0][0][1] == on_base[1][0][1], on_base  # same end
    assert [n for _, n in on_base] == [1, 1]  # f1 and f2 share theirs; f3 reads its own
    _check_queries(dag)


def test_a_shared_scan_is_released_at_the_end_of_the_round(dag, clock):
    _change(dag, clock, 0)
    cached = []
    made = dag_module.SharedReads

    class Recording(made):
        def release(self):
            cached.extend(self._frames)
            super().release()

    dag_module.SharedReads = Recording
    try:
        _round(dag)
    finally:
        dag_module.SharedReads = made
    # the changes of base, read by f1, f2 and f3; the deltas of f1, f2, a1, a2, which others read
    assert len(cached) == 5
    assert all(not f.is_cached for f in cached)


def test_concurrent_refreshes_leave_what_one_at_a_time_leaves(dag, clock):
    threads: dict[str, str] = {}
    refresh_one = dag_module.refresh_one

    def recording(ctx, dyn, *args, **kwargs):
        threads[dyn.name] = threading.current_thread().name
        return refresh_one(ctx, dyn, *args, **kwargs)

    dag_module.refresh_one = recording
    try:
        with ThreadPoolExecutor(2, thread_name_prefix="worker") as pool:
            for i in range(3):
                _change(dag, clock, i)
                done = _round(dag, workers=pool)
                assert not done.failed and not done.lost
                assert sorted(o.name for o in done.refreshed) == sorted(DAG)
                assert len({o.record.data_timestamp for o in done.refreshed}) == 1
                _check_queries(dag)
    finally:
        dag_module.refresh_one = refresh_one
    assert all(t.startswith("worker") for t in threads.values())


def test_a_downstream_waits_for_its_upstreams_and_a_failure_skips_its_readers(dag, clock):
    order: list[str] = []
    refresh_one = dag_module.refresh_one

    def recording(ctx, dyn, *args, **kwargs):
        if dyn.name == "f2":
            raise dag_module.DynamicTableError("f2 broke")
        done = refresh_one(ctx, dyn, *args, **kwargs)
        order.append(dyn.name)
        return done

    dag_module.refresh_one = recording
    try:
        _change(dag, clock, 0)
        with ThreadPoolExecutor(2) as pool:
            done = _round(dag, workers=pool)
    finally:
        dag_module.refresh_one = refresh_one
    assert set(done.failed) == {dag.catalog.table(n).table_id for n in ("f2", "a2", "top")}
    assert sorted(order) == ["a1", "f1", "f3"]
    assert order.index("a1") > order.index("f1")


def test_the_scheduler_runs_a_round_on_its_workers(dag, clock):
    env = _env(dag)
    settings = SchedulerSettings(workers=2)
    scheduler = Scheduler(dag.catalog, dag.clock, lambda: env, run_task_body, settings)
    try:
        clock.advance(seconds=31)
        _change(dag, clock, 0)
        done = scheduler.step()
        assert done is not None and not done.failed
        assert {o.name: o.record.action for o in done.refreshed} == dict.fromkeys(
            DAG, "INCREMENTAL"
        )
        _check_queries(dag)
    finally:
        scheduler.close()
