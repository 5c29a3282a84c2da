"""The scheduler with a manual clock: lag kept, DOWNSTREAM, alignment, NO_DATA, backoff and
suspension, and the lease that lets one scheduler commit at a time."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import event
from tests.conftest import rows

import changelake
from changelake.catalog.requests import LeaseHeld
from changelake.dynamic.dag import refresh_round
from changelake.dynamic.refresh import data_timestamp_now
from changelake.runtime.env import Env
from changelake.scheduling.scheduler import LEASE, Scheduler, SchedulerSettings
from changelake.sql.execute import run_task_body


def session_env(session) -> Env:
    """What the service's scheduler runs with, from a test session."""
    return Env.of(session.catalog, session.clock, session.spark, session.warehouse)


def _scheduler(session, **settings) -> Scheduler:
    env = session_env(session)
    return Scheduler(
        session.catalog, session.clock, lambda: env, run_task_body, SchedulerSettings(**settings)
    )


def _history(session, name: str) -> list:
    table_id = session.catalog.table(name).table_id
    return [r.record for r in session.catalog.refresh_history(table_id)]


@pytest.fixture
def base(session, clock):
    return _with_src(session, clock)


def _with_src(session, clock):
    session.sql("CREATE TABLE src (k INT, v INT)")
    session.sql("INSERT INTO src VALUES (1, 10), (2, 20), (1, 5)")
    clock.advance(seconds=1)
    return session


def test_a_table_is_refreshed_when_half_its_lag_has_passed(base, clock):
    session = base
    session.sql(
        "CREATE DYNAMIC TABLE agg TARGET_LAG = '1 minute' AS SELECT k, SUM(v) AS s FROM src GROUP BY k"
    )
    scheduler = _scheduler(session)
    assert scheduler.step() is None  # just created: within its lag
    clock.advance(seconds=20)
    session.sql("INSERT INTO src VALUES (3, 1)")
    clock.advance(seconds=11)  # 31 s since the data timestamp
    done = scheduler.step()
    assert [o.record.action for o in done.refreshed] == ["INCREMENTAL"]
    assert done.refreshed[0].record.trigger == "SCHEDULED"
    assert Counter(rows(session.sql("SELECT * FROM agg"))) == Counter([(1, 15), (2, 20), (3, 1)])
    clock.advance(seconds=31)
    done = scheduler.step()
    no_data = done.refreshed[0].record
    assert (no_data.action, no_data.spark_jobs) == ("NO_DATA", 0)


def test_a_table_whose_rounds_take_long_is_refreshed_early_enough_to_stay_within_its_lag(
    base, clock
):
    """Half of a 10 s lag is not early enough when a round takes 6 s: the table is due once
    its lag, a tick and its last round's time (with a margin) would reach the target."""
    session = base
    session.sql("CREATE DYNAMIC TABLE f TARGET_LAG = '10 seconds' AS SELECT k, v FROM src")
    scheduler = _scheduler(session)
    table_id = session.catalog.table("f").table_id
    clock.advance(seconds=2)
    assert scheduler.due() == []  # 2 s of 10: not yet
    scheduler._took[table_id] = 6.0  # as if its last round had taken 6 s
    assert [d.name for d in scheduler.due()] == ["f"]  # 2 + 1 + 1.25 * 6 > 10
    clock.advance(seconds=-1.5)
    assert scheduler.due() == []  # at 0.5 s even such a round keeps it within the lag
    scheduler._took[table_id] = 100.0
    assert [d.name for d in scheduler.due()] == ["f"]  # rounds back to back


def test_downstream_lag_is_refreshed_only_for_a_reader_and_shared_upstreams_once(base, clock):
    session = base
    session.sql(
        "CREATE DYNAMIC TABLE up TARGET_LAG = DOWNSTREAM AS SELECT k, v FROM src WHERE v > 1"
    )
    session.sql(
        "CREATE DYNAMIC TABLE a TARGET_LAG = '1 minute' AS SELECT k, COUNT(*) AS n FROM up GROUP BY k"
    )
    session.sql("CREATE DYNAMIC TABLE b TARGET_LAG = '2 minutes' AS SELECT v FROM up WHERE k = 1")
    scheduler = _scheduler(session)
    clock.advance(seconds=40)
    session.sql("INSERT INTO src VALUES (1, 7)")
    clock.advance(seconds=21)  # a is due (61 s > 30 s), b too (61 s > 60 s); up never by itself
    done = scheduler.step()
    refreshed = Counter(o.name for o in done.refreshed)
    assert refreshed == Counter({"up": 1, "a": 1, "b": 1})
    stamps = {o.record.data_timestamp for o in done.refreshed}
    assert len(stamps) == 1  # one data timestamp for the round
    assert {o.name: o.record.trigger for o in done.refreshed}["up"] == "DOWNSTREAM"
    assert sorted(rows(session.sql("SELECT * FROM b"))) == [(5,), (7,), (10,)]
    # a DOWNSTREAM table with no reader due is left alone
    session.sql("ALTER DYNAMIC TABLE a SUSPEND")
    session.sql("ALTER DYNAMIC TABLE b SUSPEND")
    clock.advance(seconds=600)
    assert scheduler.step() is None


def test_failures_back_off_then_suspend_the_table_with_the_error(base, clock):
    session = base
    session.sql(
        "CREATE DYNAMIC TABLE q TARGET_LAG = '10 seconds' AS SELECT k, 100 DIV v AS r FROM src"
    )
    session.sql("INSERT INTO src VALUES (9, 0)")
    scheduler = _scheduler(session, backoff=30.0)
    clock.advance(seconds=6)
    done = scheduler.step()
    assert list(done.failed) == [session.catalog.table("q").table_id]
    clock.advance(seconds=6)
    assert scheduler.step() is None  # backing off (30 s)
    for _ in range(2):
        clock.advance(seconds=300)
        scheduler.step()
    dyn = session.catalog.find_dynamic_table("q")
    assert dyn.scheduling_state == "SUSPENDED"
    assert "3 failed refreshes" in dyn.suspended_reason and "divi" in dyn.suspended_reason.lower()
    assert [r.state for r in _history(session, "q")][:3] == ["FAILED"] * 3
    clock.advance(seconds=300)
    assert scheduler.step() is None  # suspended: not refreshed
    session.sql("DELETE FROM src WHERE v = 0")
    session.sql("ALTER DYNAMIC TABLE q RESUME")
    clock.advance(seconds=1)
    done = scheduler.step()
    assert [o.record.state for o in done.refreshed] == ["SUCCEEDED"]


@pytest.fixture
def base_on_catalog(catalog_url, spark, tmp_path, clock):
    """``base`` on each catalog kind (the lease reads and fences with row locks on PostgreSQL)."""
    session = changelake.connect(
        str(tmp_path / "wh"), catalog=catalog_url, spark=spark, clock=clock
    )
    yield _with_src(session, clock)
    session.close()


def test_one_scheduler_holds_the_lease_and_a_zombie_cannot_commit(base_on_catalog, clock):
    session = base_on_catalog
    session.sql("CREATE DYNAMIC TABLE d TARGET_LAG = '10 seconds' AS SELECT k, v FROM src")
    first = _scheduler(session, lease=15.0)
    second = _scheduler(session, lease=15.0)
    clock.advance(seconds=6)
    assert first.step() is not None and first.epoch == 1
    session.sql("INSERT INTO src VALUES (4, 4)")
    clock.advance(seconds=6)
    assert second.step() is None and second.epoch is None  # first's lease has not expired
    clock.advance(seconds=16)  # first is gone (no renewal): second takes over
    assert second.step() is not None and second.epoch == 2
    version = session.catalog.table("d").current_version
    session.sql("INSERT INTO src VALUES (5, 5)")
    clock.advance(seconds=1)
    # first wakes up mid-refresh, still under epoch 1: its commit is refused, nothing written
    ctx = session_env(session).context()
    done = refresh_round(
        ctx,
        [session.catalog.find_dynamic_table("d")],
        data_timestamp_now(ctx),
        trigger=lambda _: "SCHEDULED",
        requirements=(LeaseHeld(LEASE, 1),),
    )
    assert done.refreshed == [] and done.lost == [session.catalog.table("d").table_id]
    assert session.catalog.table("d").current_version == version
    assert first.step() is None  # and it does not get the lease back while second renews it


def test_nothing_to_schedule_writes_nothing_until_the_first_dynamic_table(base, clock):
    session = base
    writes: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            writes.append(statement)

    first, second = _scheduler(session), _scheduler(session)
    event.listen(session.catalog.engine, "before_cursor_execute", count)
    try:
        for _ in range(5):
            clock.advance(seconds=1)
            assert first.step() is None and second.step() is None
        assert writes == []  # no lease renewed for a warehouse with nothing to schedule
        session.sql("CREATE DYNAMIC TABLE d TARGET_LAG = '2 seconds' AS SELECT k, v FROM src")
        session.sql("INSERT INTO src VALUES (4, 4)")
        # past half the lag, not at it: commit times are rounded, so "at" may fall just short
        clock.advance(seconds=1.5)
        done = first.step()  # the next round takes the lease and refreshes it
        assert first.epoch == 1 and [o.name for o in done.refreshed] == ["d"]
        assert second.step() is None and second.epoch is None  # one scheduler at a time
    finally:
        event.remove(session.catalog.engine, "before_cursor_execute", count)
    assert rows(session.sql("SELECT * FROM d")) == rows(session.sql("SELECT * FROM src"))


def test_the_scheduler_compacts_a_dynamic_tables_small_files_and_readers_see_no_change(base, clock):
    """Each refresh adds a small file; after ``compact_after_writes`` refreshes a round merges
    them (rows keep their identity). The table stays its query, its changes over the whole run
    are the snapshot diff, and a dynamic table over it sees the compaction as no change."""
    session = base
    session.sql(
        "CREATE DYNAMIC TABLE f TARGET_LAG = '10 seconds' AS SELECT k, v FROM src WHERE v > 0"
    )
    session.sql(
        "CREATE DYNAMIC TABLE g TARGET_LAG = '10 seconds' AS SELECT k, COUNT(*) AS n FROM f GROUP BY k"
    )
    scheduler = _scheduler(session, compact_after_writes=4, compact_files=3)
    f = session.catalog.table("f")
    start = f.current_version
    compactions = []
    for i in range(10):
        session.sql(f"INSERT INTO src VALUES ({10 + i}, {i})")
        session.sql(f"UPDATE src SET v = v + 1 WHERE k = {i % 3}")
        clock.advance(seconds=6)
        scheduler.step()
        f = session.catalog.table("f")
        versions = session.catalog.versions(f.table_id, after_exclusive=start)
        compactions = [v.version for v in versions if v.operation == "COMPACT"]
        for name, query in (
            ("f", "SELECT k, v FROM src WHERE v > 0"),
            ("g", "SELECT k, COUNT(*) FROM (SELECT k, v FROM src WHERE v > 0) GROUP BY k"),
        ):
            assert Counter(rows(session.sql(f"SELECT * FROM {name}"))) == Counter(
                rows(session.sql(query))
            ), (i, name)
    assert len(compactions) >= 2, compactions
    live = session.catalog.snapshot_files(f.table_id, f.current_version)
    assert len(live) <= 6, [x.file.path for x in live]
    # f's changes over the whole run: the diff of its rows then and now, updates paired
    end = f.current_version
    changes = rows(
        session.sql(
            "SELECT k, v, METADATA$ACTION, METADATA$ISUPDATE FROM f CHANGES (INFORMATION =>"
            f" DEFAULT) AT (VERSION => {start}) END (VERSION => {end})"
        )
    )
    before = Counter(rows(session.sql(f"SELECT * FROM f AT (VERSION => {start})")))
    after = Counter(rows(session.sql("SELECT * FROM f")))
    assert Counter((k, v) for k, v, a, _ in changes if a == "DELETE") == before - after
    assert Counter((k, v) for k, v, a, _ in changes if a == "INSERT") == after - before
    # a compaction's version alone: no change, nothing read
    for version in compactions:
        plan = session.change_plan("f", start=version - 1, end=version)
        assert plan.shape.value == "EMPTY", plan.describe()
    # g refreshed across f's compactions: never a FULL or REINITIALIZE
    assert {r.action for r in _history(session, "g")[:-1]} <= {"INCREMENTAL", "NO_DATA"}
