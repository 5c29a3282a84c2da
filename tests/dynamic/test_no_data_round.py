"""A round whose dynamic tables read nothing new (dynamic/nodata.py): decided from one read,
committed as one, with no Spark and no py4j call; a round that mixes NO_DATA with other refreshes,
and one that loses a race, keep the semantics of refreshing one table at a time."""

from __future__ import annotations

from collections import Counter

import pytest
from support.costs import counted
from tests.conftest import rows

import changelake
from changelake.catalog.requests import CommitRequest, LeaseHeld
from changelake.dynamic.dag import refresh_round
from changelake.dynamic.refresh import data_timestamp_now
from changelake.runtime.env import Env
from changelake.scheduling.scheduler import Scheduler, SchedulerSettings
from changelake.sql.execute import run_task_body

# A NO_DATA refresh of the 3-level DAG, warm (at most): catalog queries (SELECT, INSERT, UPDATE,
# DELETE, as tests/sql/test_statement_costs.py counts them) and catalog commits. No Spark job
# and no py4j call at all: the statement's result is made when it is first read.
CATALOG_QUERIES = 19
COMMITS = 1

DAG = {
    "d1": "TARGET_LAG = DOWNSTREAM AS SELECT * FROM base WHERE v > 1",
    "d2": "TARGET_LAG = DOWNSTREAM AS SELECT g, SUM(v) AS total, COUNT(*) AS n FROM d1 GROUP BY g",
    "d3": "TARGET_LAG = '1 day' AS SELECT * FROM d2 WHERE total > 3",
}


@pytest.fixture
def dag(spark, tmp_path, clock, catalog_url):
    s = changelake.connect(str(tmp_path / "wh"), catalog=catalog_url, spark=spark, clock=clock)
    s.sql("CREATE TABLE base (id INT, g INT, v INT)")
    s.sql(
        "INSERT INTO base SELECT CAST(id AS INT), CAST(id % 3 AS INT), CAST(id % 5 AS INT) FROM range(30)"
    )
    s.sql("CREATE TABLE other (x INT)")
    for name, text in DAG.items():
        s.sql(f"CREATE DYNAMIC TABLE {name} {text}")
    yield s
    s.close()


def _last(session, name: str):
    table_id = session.catalog.table(name).table_id
    return session.catalog.refresh_history(table_id, limit=1)[0]


def _commits(session, monkeypatch) -> list[CommitRequest]:
    """The requests the session's catalog commits from now on."""
    made: list[CommitRequest] = []
    commit = session.catalog.commit

    def recording(requests, **kwargs):
        made.extend(requests)
        return commit(requests, **kwargs)

    monkeypatch.setattr(session.catalog, "commit", recording)
    return made


def test_a_no_data_round_is_one_commit_without_spark(dag, clock, monkeypatch):
    for i in range(2):  # the second round is counted: the first keeps the bound definitions
        clock.advance(seconds=1)
        dag.sql(f"INSERT INTO other VALUES ({i})")
        clock.advance(seconds=1)
        versions = {n: dag.catalog.table(n).current_version for n in DAG}
        made = _commits(dag, monkeypatch)
        with counted(dag) as costs:
            result = dag.sql("ALTER DYNAMIC TABLE d3 REFRESH")
        monkeypatch.undo()
    print(costs, f"{len(made)} commit(s)")
    last = {n: _last(dag, n) for n in DAG}
    assert {(r.record.action, r.record.state, r.record.spark_jobs) for r in last.values()} == {
        ("NO_DATA", "SUCCEEDED", 0)
    }
    assert len({r.record.data_timestamp for r in last.values()}) == 1
    assert {n: r.version for n, r in last.items()} == versions  # NO_DATA writes no version
    assert (costs.py4j, costs.jobs) == (0, 0)
    assert len(made) <= COMMITS and costs.catalog <= CATALOG_QUERIES, costs
    assert [r.message for r in result.collect()] == ["NO_DATA refresh of d3 (and 2 upstream)."]


def test_a_round_of_no_data_and_incremental_refreshes(dag, clock):
    dag.sql("CREATE TABLE base2 (g INT, label STRING)")
    dag.sql("INSERT INTO base2 VALUES (0, 'zero'), (1, 'one'), (2, 'two')")
    dag.sql("CREATE DYNAMIC TABLE labels TARGET_LAG = DOWNSTREAM AS SELECT * FROM base2")
    top = "SELECT d2.g, label, total FROM d2 JOIN labels ON d2.g = labels.g"
    dag.sql(f"CREATE DYNAMIC TABLE top TARGET_LAG = '1 day' AS {top}")
    clock.advance(seconds=1)
    dag.sql("INSERT INTO base2 VALUES (1, 'uno')")  # labels and top change, the d chain not
    assert _refresh_top(dag, clock, top) == dict(
        d1="NO_DATA", d2="NO_DATA", labels="INCREMENTAL", top="INCREMENTAL"
    )
    # d1 was refreshed on its own: d2 is not NO_DATA although its base table did not change
    clock.advance(seconds=1)
    dag.sql("INSERT INTO base VALUES (100, 1, 4)")
    clock.advance(seconds=1)
    dag.sql("ALTER DYNAMIC TABLE d1 REFRESH")
    assert _refresh_top(dag, clock, top) == dict(
        d1="NO_DATA", d2="INCREMENTAL", labels="NO_DATA", top="INCREMENTAL"
    )


def _refresh_top(session, clock, query: str) -> dict[str, str]:
    """ALTER DYNAMIC TABLE top REFRESH: each table's action; all are at one data timestamp and
    top holds its ``query``'s rows."""
    clock.advance(seconds=1)
    session.sql("ALTER DYNAMIC TABLE top REFRESH")
    last = {n: _last(session, n).record for n in ("d1", "d2", "labels", "top")}
    assert len({r.data_timestamp for r in last.values()}) == 1
    assert Counter(rows(session.sql("SELECT * FROM top"))) == Counter(rows(session.sql(query)))
    return {n: r.action for n, r in last.items()}


def test_a_no_data_round_that_loses_a_race_writes_nothing_and_retries(
    dag, clock, spark, tmp_path, catalog_url, monkeypatch
):
    other = changelake.connect(str(tmp_path / "wh"), catalog=catalog_url, spark=spark, clock=clock)
    clock.advance(seconds=1)
    dag.sql("INSERT INTO other VALUES (1)")
    commit = dag.catalog.commit
    raced: list[float] = []

    def racing(requests, **kwargs):
        if not raced and requests[0].operation == "REFRESH NO_DATA":
            clock.advance(seconds=1)  # another session refreshes d1 while this round plans
            other.sql("ALTER DYNAMIC TABLE d1 REFRESH")
            raced.append(other.catalog.find_dynamic_table("d1").data_timestamp)
        return commit(requests, **kwargs)

    monkeypatch.setattr(dag.catalog, "commit", racing)
    before = {n: len(dag.catalog.refresh_history(dag.catalog.table(n).table_id)) for n in DAG}
    dag.sql("ALTER DYNAMIC TABLE d3 REFRESH")
    other.close()
    history = {n: dag.catalog.refresh_history(dag.catalog.table(n).table_id) for n in DAG}
    new = {n: [r.record for r in h[: len(h) - before[n]]] for n, h in history.items()}
    # The round that lost wrote nothing; the retry refreshed d2 and d3 at the other refresh's
    # point (the clock has not moved since), reading d1 as that refresh left it.
    assert {n: [(r.action, r.data_timestamp) for r in h] for n, h in new.items()} == {
        n: [("NO_DATA", raced[0])] for n in DAG
    }
    assert [r.trigger for r in new["d1"]] == ["MANUAL"]  # the other session's


def test_a_zombie_scheduler_writes_no_no_data_round(dag, clock):
    assert dag.catalog.acquire_lease("scheduler", "a", ttl=10.0, clock=clock) == 1
    clock.advance(seconds=11)
    assert dag.catalog.acquire_lease("scheduler", "b", ttl=10.0, clock=clock) == 2
    clock.advance(seconds=1)
    before = {n: _last(dag, n).refresh_id for n in DAG}
    ctx = Env.of(dag.catalog, clock, dag.spark, dag.warehouse).context()
    done = refresh_round(
        ctx,
        [dag.catalog.find_dynamic_table("d3")],
        data_timestamp_now(ctx),
        trigger=lambda _: "SCHEDULED",
        requirements=(LeaseHeld("scheduler", 1),),
    )
    ids = sorted(dag.catalog.table(n).table_id for n in DAG)
    assert done.refreshed == [] and sorted(done.lost) == ids
    assert {n: _last(dag, n).refresh_id for n in DAG} == before


def test_a_scheduled_no_data_round_makes_no_call_into_the_jvm(dag, clock):
    env = Env.of(dag.catalog, clock, dag.spark, dag.warehouse)
    scheduler = Scheduler(dag.catalog, clock, lambda: env, run_task_body, SchedulerSettings())
    for _ in range(2):  # the first round sets the thread's scheduler pool
        clock.advance(seconds=13 * 3600)  # d3 is due: past half its lag of a day
        with counted(dag) as costs:
            done = scheduler.step()
        assert done is not None and [o.name for o in done.refreshed] == list(DAG)
    assert {_last(dag, n).record.action for n in DAG} == {"NO_DATA"}
    assert (costs.py4j, costs.jobs) == (0, 0)
