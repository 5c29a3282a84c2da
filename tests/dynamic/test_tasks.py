"""Tasks: statements, EXECUTE TASK, graphs, and the scheduler running them on a manual clock.

Oracles: the tables a task writes hold exactly the rows its stream delivered (each once), a
graph run's rows say which task ran, was skipped and why, and a failed body wrote nothing."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from tests.conftest import rows
from tests.dynamic.test_scheduler import session_env

from changelake.catalog.alters import FinishTaskRun
from changelake.catalog.model import RunClaim, TaskRun
from changelake.catalog.requests import (
    CommitRequest,
    TaskRunExecuting,
)
from changelake.dialect import parse_one, split_statements
from changelake.errors import (
    ChangelakeError,
    ConflictError,
    InvalidStatementError,
    ObjectNotFoundError,
    SqlSyntaxError,
    TransactionError,
)
from changelake.scheduling.scheduler import Scheduler, SchedulerSettings
from changelake.sql.execute import run_task_body
from changelake.tasks.run import RunStatements


@pytest.fixture
def base(session, clock):
    session.sql("CREATE TABLE src (k INT, v INT)")
    session.sql("CREATE TABLE arch (k INT, v INT)")
    session.sql("CREATE STREAM st ON TABLE src")
    clock.advance(seconds=1)
    return session


ARCHIVE = "INSERT INTO arch SELECT k, v FROM st WHERE METADATA$ACTION = 'INSERT'"


def _runs(session, name: str | None = None, *, scheduled: bool = False) -> list[dict]:
    """TASK_HISTORY oldest first, as dicts; with ``scheduled``, the next scheduled runs too."""
    df = session.tasks(name, history=True)
    found = [r.asDict() for r in reversed(df.collect())]
    return [r for r in found if scheduled or r["state"] != "SCHEDULED"]


def _scheduler(session, run_statements: RunStatements = run_task_body) -> Scheduler:
    env = session_env(session)
    return Scheduler(
        session.catalog, session.clock, lambda: env, run_statements, SchedulerSettings()
    )


def test_a_task_is_created_suspended_and_shown(base):
    base.sql(
        "CREATE TASK t1 SCHEDULE = '5 MINUTE' TASK_AUTO_RETRY_ATTEMPTS = 2 COMMENT = 'archive'"
        f" WHEN SYSTEM$STREAM_HAS_DATA('st') AS {ARCHIVE}"
    )
    base.sql("CREATE TASK t2 AFTER t1 AS DELETE FROM arch WHERE v < 0")
    shown = {r.name: r for r in base.sql("SHOW TASKS").collect()}
    assert shown["t1"].state == "suspended" and shown["t1"].next_scheduled_time is None
    assert shown["t1"].schedule == "5 MINUTE" and shown["t1"].task_auto_retry_attempts == 2
    assert shown["t1"].comment == "archive" and shown["t1"].definition == ARCHIVE
    assert shown["t2"].predecessors == "t1" and shown["t2"].schedule is None
    described = dict(rows(base.sql("DESCRIBE TASK t2")))
    assert described["definition"] == "DELETE FROM arch WHERE v < 0"


def test_execute_task_consumes_the_stream_with_its_writes_once(base, clock):
    base.sql("INSERT INTO src VALUES (1, 10), (2, 20)")
    clock.advance(seconds=1)
    base.sql(f"CREATE TASK t1 WHEN SYSTEM$STREAM_HAS_DATA('st') AS {ARCHIVE}")
    clock.advance(seconds=1)
    ran = base.sql("EXECUTE TASK t1").collect()
    assert [(r.name, r.state, r.run_trigger) for r in ran] == [("t1", "SUCCEEDED", "MANUAL")]
    assert ran[0].spark_jobs > 0 and ran[0].query_id is not None
    assert Counter(rows(base.sql("SELECT * FROM arch"))) == Counter([(1, 10), (2, 20)])
    assert rows(base.sql("SELECT SYSTEM$STREAM_HAS_DATA('st')")) == [(False,)]
    # the run's row and the stream's consumption committed with the insert: one commit
    history = rows(base.sql("DESCRIBE HISTORY arch"))
    assert len(history) == 2  # CREATE, and the task's INSERT
    clock.advance(seconds=1)
    skipped = base.sql("EXECUTE TASK t1").collect()
    assert [(r.state, r.spark_jobs) for r in skipped] == [("SKIPPED", 0)]
    assert skipped[0].reason == "WHEN SYSTEM$STREAM_HAS_DATA('st') was false"
    assert Counter(rows(base.sql("SELECT * FROM arch"))) == Counter([(1, 10), (2, 20)])


def test_a_failing_statement_of_a_block_writes_nothing_and_consumes_nothing(base, clock):
    base.sql("INSERT INTO src VALUES (1, 10), (0, 0)")
    clock.advance(seconds=1)
    base.sql(f"CREATE TASK t1 AS BEGIN {ARCHIVE}; UPDATE arch SET v = 100 / k; COMMIT")
    ran = base.sql("EXECUTE TASK t1").collect()
    assert [r.state for r in ran] == ["FAILED"]
    assert "division by zero" in ran[0].error_message.lower()
    assert "Traceback" not in ran[0].error_message and "at org.apache" not in ran[0].error_message
    assert rows(base.sql("SELECT * FROM arch")) == []
    assert rows(base.sql("SELECT SYSTEM$STREAM_HAS_DATA('st')")) == [(True,)]
    clock.advance(seconds=1)
    base.sql("DELETE FROM src WHERE k = 0")
    clock.advance(seconds=1)
    ran = base.sql("EXECUTE TASK t1").collect()
    assert [r.state for r in ran] == ["SUCCEEDED"]
    # (0, 0) was inserted and deleted within the stream's interval: the net change omits it
    assert rows(base.sql("SELECT * FROM arch")) == [(1, 100)]


def test_a_graph_runs_children_after_their_predecessors_and_skips_after_a_failure(base, clock):
    for name, after, body in (
        ("root", "", "INSERT INTO arch VALUES (1, 1)"),
        ("left", "AFTER root", "INSERT INTO arch VALUES (2, 2)"),
        ("right", "AFTER root", "INSERT INTO arch SELECT 3, 3 / (SELECT COUNT(*) FROM src)"),
        ("last", "AFTER left, right", "INSERT INTO arch VALUES (4, 4)"),
    ):
        base.sql(f"CREATE TASK {name} {after} AS {body}")
    for name in ("left", "right", "last"):
        base.sql(f"ALTER TASK {name} RESUME")
    ran = base.sql("EXECUTE TASK root").collect()
    states = {r.name: (r.state, r.reason) for r in ran}
    assert states["root"][0] == states["left"][0] == "SUCCEEDED"
    assert states["right"][0] == "FAILED"
    assert states["last"] == ("SKIPPED", "predecessor right did not succeed (FAILED)")
    assert len({r.graph_run_group_id for r in ran}) == 1
    assert [r.name for r in ran][0] == "root"
    assert sorted(rows(base.sql("SELECT k FROM arch"))) == [(1,), (2,)]
    base.sql("INSERT INTO src VALUES (1, 1)")
    base.sql("ALTER TASK left SUSPEND")
    clock.advance(seconds=1)
    states = {r.name: (r.state, r.reason) for r in base.sql("EXECUTE TASK root").collect()}
    assert states["left"] == ("SKIPPED", "the task is suspended")
    assert states["right"][0] == "SUCCEEDED"
    assert states["last"] == ("SKIPPED", "predecessor left did not succeed (SKIPPED)")


def test_refusals_name_the_problem_and_change_nothing(base):
    base.sql("CREATE TASK a SCHEDULE = '1 MINUTE' AS INSERT INTO arch VALUES (1, 1)")
    base.sql("CREATE TASK b AFTER a AS INSERT INTO arch VALUES (2, 2)")
    cases = [
        ("ALTER TASK a ADD AFTER b", InvalidStatementError, "SCHEDULE"),
        ("CREATE TASK c AFTER b AS SELECT 1", None, None),
        ("ALTER TASK b ADD AFTER c", InvalidStatementError, "cycle"),
        ("CREATE TASK d AFTER a SCHEDULE = '1 MINUTE' AS SELECT 1", InvalidStatementError, "root"),
        ("CREATE TASK e AFTER nope AS SELECT 1", ObjectNotFoundError, "nope"),
        ("CREATE TASK f SCHEDULE = 'often' AS SELECT 1", InvalidStatementError, "5 MINUTE"),
        (
            "CREATE TASK f SCHEDULE = 'USING CRON 61 * * * * UTC' AS SELECT 1",
            InvalidStatementError,
            "cron",
        ),
        (
            "CREATE TASK f SCHEDULE = 'USING CRON 0 * * * * Mars/Base' AS SELECT 1",
            InvalidStatementError,
            "time zone",
        ),
        ("CREATE TASK f WHEN SYSTEM$STREAM_HAS_DATA('nope') AS SELECT 1", ChangelakeError, "nope"),
        ("CREATE TASK f WHEN 1 = 1 AS SELECT 1", InvalidStatementError, "SYSTEM$STREAM_HAS_DATA"),
        (
            "CREATE TASK f AS BEGIN INSERT INTO arch VALUES (1, 1); CREATE TABLE x (a INT); COMMIT",
            InvalidStatementError,
            "inside BEGIN",
        ),
        ("CREATE TASK f AS INSERT INTO arch VALUS (1)", SqlSyntaxError, "body"),
        (
            "CREATE TASK f TASK_AUTO_RETRY_ATTEMPTS = many AS SELECT 1",
            InvalidStatementError,
            "whole number",
        ),
        ("CREATE TASK a AS SELECT 1", ChangelakeError, "already exists"),
        ("ALTER TASK nope RESUME", ObjectNotFoundError, "nope"),
        ("DROP TASK nope", ObjectNotFoundError, "nope"),
        ("CREATE TASK f AS SELECT 1", None, None),
        ("ALTER TASK f RESUME", InvalidStatementError, "never run"),
    ]
    for text, error, words in cases:
        if error is None:
            base.sql(text)
            continue
        before = rows(base.sql("SHOW TASKS"))
        with pytest.raises(error, match=None) as raised:
            base.sql(text)
        assert words in str(raised.value), (text, str(raised.value))
        assert rows(base.sql("SHOW TASKS")) == before, text
    base.sql("BEGIN")
    with pytest.raises(TransactionError):
        base.sql("EXECUTE TASK a")
    base.sql("ROLLBACK")
    assert base.sql("DROP TASK IF EXISTS nope").collect()
    base.sql("DROP TASK a")
    shown = {r.name: r.predecessors for r in base.sql("SHOW TASKS").collect()}
    assert shown["b"] is None  # it no longer waits for a dropped task


def test_alter_task_changes_what_and_when_it_runs(base, clock):
    base.sql("CREATE TASK t1 SCHEDULE = '10 SECONDS' AS INSERT INTO arch VALUES (1, 1)")
    base.sql("ALTER TASK t1 RESUME")
    first = base.catalog.find_task("t1").next_at
    assert first == pytest.approx(clock.now() + 10)
    base.sql("ALTER TASK t1 SET SCHEDULE = '1 HOUR', SUSPEND_TASK_AFTER_NUM_FAILURES = 2")
    t = base.catalog.find_task("t1")
    assert t.next_at == pytest.approx(clock.now() + 3600)
    assert t.definition.options.suspend_after_failures == 2
    base.sql("ALTER TASK t1 UNSET SUSPEND_TASK_AFTER_NUM_FAILURES")
    assert base.catalog.find_task("t1").definition.options.suspend_after_failures == 10
    base.sql("ALTER TASK t1 MODIFY AS INSERT INTO arch VALUES (2, 2)")
    base.sql("ALTER TASK t1 MODIFY WHEN SYSTEM$STREAM_HAS_DATA('st')")
    t = base.catalog.find_task("t1")
    assert t.definition.statements == ("INSERT INTO arch VALUES (2, 2)",)
    assert t.definition.condition == "SYSTEM$STREAM_HAS_DATA('st')"
    base.sql("ALTER TASK t1 REMOVE WHEN")
    base.sql("ALTER TASK t1 SET SCHEDULE = 'USING CRON 30 9 * * * Europe/Berlin'")
    t = base.catalog.find_task("t1")
    at = dt.datetime.fromtimestamp(t.next_at, dt.timezone.utc).astimezone(
        __import__("zoneinfo").ZoneInfo("Europe/Berlin")
    )
    assert (at.hour, at.minute, at.second) == (9, 30, 0) and t.next_at > clock.now()
    base.sql("ALTER TASK t1 SUSPEND")
    assert base.catalog.find_task("t1").next_at is None
    assert base.sql("ALTER TASK IF EXISTS nope RESUME").collect()


def test_the_scheduler_runs_a_scheduled_graph_on_time_once_per_slot(base, clock):
    base.sql("CREATE TASK root SCHEDULE = '60 SECONDS' AS INSERT INTO arch VALUES (1, 1)")
    base.sql("CREATE TASK child AFTER root AS INSERT INTO arch VALUES (2, 2)")
    base.sql("ALTER TASK child RESUME")
    base.sql("ALTER TASK root RESUME")
    scheduler = _scheduler(base)
    scheduler.step()
    assert scheduler.graph_runs == []  # not yet time
    (next_run,) = _runs(base, scheduled=True)
    assert (next_run["name"], next_run["state"], next_run["run_id"]) == ("root", "SCHEDULED", None)
    clock.advance(seconds=60)
    scheduler.step()
    assert [g.states for g in scheduler.graph_runs] == [{"root": "SUCCEEDED", "child": "SUCCEEDED"}]
    scheduler.step()
    assert scheduler.graph_runs == []  # the slot was taken
    clock.advance(seconds=60 * 5 + 1)  # five slots missed (the service was down)
    scheduler.step()
    assert len(scheduler.graph_runs) == 1  # not made up: one run, the next slot after now
    assert base.catalog.find_task("root").next_at > clock.now()
    assert Counter(rows(base.sql("SELECT k FROM arch"))) == Counter({(1,): 2, (2,): 2})
    runs = _runs(base)
    assert [(r["name"], r["run_trigger"]) for r in runs] == [
        ("root", "SCHEDULED"),
        ("child", "SCHEDULED"),
    ] * 2


def test_slots_that_pass_during_a_long_run_are_skipped_without_overlap(base, clock):
    base.sql("CREATE TASK slow SCHEDULE = '10 SECONDS' AS INSERT INTO arch VALUES (1, 1)")
    base.sql("ALTER TASK slow RESUME")

    def slow_body(env, task, finish):  # the run takes 25 s of the manual clock
        clock.advance(seconds=25)
        run_task_body(env, task, finish)

    scheduler = _scheduler(base, slow_body)
    clock.advance(seconds=10)
    scheduler.step()
    runs = _runs(base, "slow")
    assert [r["state"] for r in runs] == ["SUCCEEDED", "SKIPPED", "SKIPPED"]
    assert "ALLOW_OVERLAPPING_EXECUTION = FALSE" in runs[1]["reason"]
    assert base.catalog.find_task("slow").next_at > clock.now()


def test_failed_runs_are_retried_then_the_root_is_suspended(base, clock):
    base.sql("INSERT INTO src VALUES (0, 0)")
    base.sql(
        "CREATE TASK bad SCHEDULE = '10 SECONDS' TASK_AUTO_RETRY_ATTEMPTS = 1"
        " SUSPEND_TASK_AFTER_NUM_FAILURES = 2"
        " AS INSERT INTO arch SELECT k, 1 / k FROM src"
    )
    base.sql("ALTER TASK bad RESUME")
    scheduler = _scheduler(base)
    for _ in range(2):
        clock.advance(seconds=10)
        scheduler.step()
        assert scheduler.graph_runs[0].failed
    runs = _runs(base, "bad")
    assert [(r["state"], r["attempt_number"]) for r in runs] == [("FAILED", 1), ("FAILED", 2)] * 2
    t = base.catalog.find_task("bad")
    assert t.state == "suspended" and "SUSPEND_TASK_AFTER_NUM_FAILURES = 2" in t.suspended_reason
    clock.advance(seconds=10)
    scheduler.step()
    assert scheduler.graph_runs == []
    assert rows(base.sql("SELECT * FROM arch")) == []


def test_a_triggered_task_runs_when_its_stream_has_data(base, clock):
    base.sql(
        "CREATE TASK trig USER_TASK_MINIMUM_TRIGGER_INTERVAL_IN_SECONDS = 5"
        f" WHEN SYSTEM$STREAM_HAS_DATA('st') AS {ARCHIVE}"
    )
    base.sql("ALTER TASK trig RESUME")
    scheduler = _scheduler(base)
    scheduler.step()
    assert scheduler.graph_runs == []  # no data: no run, no history row, no Spark
    assert _runs(base) == []
    base.sql("INSERT INTO src VALUES (1, 1)")
    clock.advance(seconds=1)
    scheduler.step()
    assert [g.states for g in scheduler.graph_runs] == [{"trig": "SUCCEEDED"}]
    base.sql("INSERT INTO src VALUES (2, 2)")
    clock.advance(seconds=1)
    scheduler.step()
    assert scheduler.graph_runs == []  # within the minimum interval
    clock.advance(seconds=5)
    scheduler.step()
    assert [g.states for g in scheduler.graph_runs] == [{"trig": "SUCCEEDED"}]
    assert sorted(rows(base.sql("SELECT * FROM arch"))) == [(1, 1), (2, 2)]
    assert {r["run_trigger"] for r in _runs(base)} == {"TRIGGERED"}


def test_a_run_left_executing_by_a_dead_scheduler_is_ended_and_cannot_commit(base, clock):
    base.sql("INSERT INTO src VALUES (1, 1)")
    base.sql(f"CREATE TASK t1 WHEN SYSTEM$STREAM_HAS_DATA('st') AS {ARCHIVE}")
    now = clock.now()
    dead = TaskRun(
        0,
        base.catalog.find_task("t1").task_id,
        None,
        1,
        "EXECUTING",
        "TRIGGERED",
        "",
        now,
        now,
        None,
        None,
        "",
        0,
        "host:1:dead",
    )
    run_id = base.catalog.add_task_run(dead).run_id
    _scheduler(base).step()  # takes the lease: ends the dead holder's run
    (ended,) = [r for r in _runs(base) if r["run_id"] == run_id]
    assert ended["state"] == "FAILED" and "stopped" in ended["reason"]
    zombie = CommitRequest(
        "z",
        "TASK RUN",
        updates=(FinishTaskRun(run_id, "SUCCEEDED"),),
        requirements=(TaskRunExecuting(run_id, "t1"),),
    )
    with pytest.raises(ConflictError, match="nothing it did was written"):
        base.catalog.commit([zombie], clock=clock)
    assert [r["state"] for r in _runs(base) if r["run_id"] == run_id] == ["FAILED"]


def test_a_run_over_its_timeout_is_cancelled_and_writes_nothing(base, clock):
    base.sql("INSERT INTO src VALUES (1, 1), (2, 2), (3, 3), (4, 4)")
    # 4^11 rows per job: seconds, far past the timeout (3^9 once finished within it)
    cross = ", ".join(f"src s{i}" for i in range(11))
    base.sql(
        "CREATE TASK slow USER_TASK_TIMEOUT_MS = 200"
        f" AS INSERT INTO arch SELECT s0.k, SUM(s1.v + s2.v) FROM {cross} GROUP BY s0.k"
    )
    ran = base.sql("EXECUTE TASK slow").collect()
    assert [(r.state, r.reason) for r in ran] == [
        ("CANCELLED", "ran longer than USER_TASK_TIMEOUT_MS = 200")
    ]
    assert rows(base.sql("SELECT * FROM arch")) == []


def test_task_history_is_a_table_function(base, clock):
    base.sql("CREATE TASK t1 AS INSERT INTO arch VALUES (1, 1)")
    base.sql("CREATE TASK t2 AS INSERT INTO arch VALUES (2, 2)")
    base.sql("EXECUTE TASK t1")
    clock.advance(seconds=1)
    base.sql("EXECUTE TASK t2")
    clock.advance(seconds=1)
    base.sql("EXECUTE TASK t1")
    found = rows(
        base.sql("SELECT name, state FROM TABLE(TASK_HISTORY(TASK_NAME => 't1')) ORDER BY run_id")
    )
    assert found == [("t1", "SUCCEEDED")] * 2
    assert len(rows(base.sql("SELECT * FROM TABLE(TASK_HISTORY(RESULT_LIMIT => 2))"))) == 2


def test_a_graph_runs_once_at_a_time_and_a_stale_manual_run_is_ended(base, clock):
    base.sql("CREATE TASK t1 USER_TASK_TIMEOUT_MS = 1000 AS INSERT INTO arch VALUES (1, 1)")
    task_id = base.catalog.find_task("t1").task_id
    now = clock.now()
    other = TaskRun(
        0, task_id, None, 1, "EXECUTING", "MANUAL", "", now, now, None, None, "", 0, "session:other"
    )
    run_id = base.catalog.add_task_run(other).run_id
    ran = base.sql("EXECUTE TASK t1").collect()
    assert [(r.state, r.reason) for r in ran] == [
        (
            "SKIPPED",
            f"run {run_id} of the graph was still executing (ALLOW_OVERLAPPING_EXECUTION = FALSE)",
        )
    ]
    assert rows(base.sql("SELECT * FROM arch")) == []
    clock.advance(seconds=30)
    _scheduler(base).step()  # a manual run is not ended while its process may still run it
    assert [r["state"] for r in _runs(base) if r["run_id"] == run_id] == ["EXECUTING"]
    clock.advance(seconds=60)
    _scheduler(base).step()  # past its timeout (and a minute): its process is gone
    assert [r["state"] for r in _runs(base) if r["run_id"] == run_id] == ["FAILED"]
    assert [r.state for r in base.sql("EXECUTE TASK t1").collect()] == ["SUCCEEDED"]


def test_a_slot_is_taken_once(base, clock):
    base.sql("CREATE TASK t1 SCHEDULE = '10 SECONDS' AS INSERT INTO arch VALUES (1, 1)")
    base.sql("ALTER TASK t1 RESUME")
    t = base.catalog.find_task("t1")
    slot = t.next_at
    run = TaskRun(
        0, t.task_id, None, 1, "SKIPPED", "SCHEDULED", "", slot, slot, slot, None, "", 0, "a"
    )
    claim = RunClaim(seen_next_at=slot, next_at=slot + 10)
    assert base.catalog.add_task_run(run, claim) is not None
    assert base.catalog.add_task_run(run, claim) is None  # the slot has moved: taken
    assert base.catalog.find_task("t1").next_at == slot + 10


def test_a_task_whose_stream_was_dropped_fails_saying_so(base, clock):
    base.sql("CREATE STREAM st2 ON TABLE src")
    base.sql("CREATE TASK t1 WHEN SYSTEM$STREAM_HAS_DATA('st2') AS SELECT 1")
    base.sql("CREATE TASK t2 SCHEDULE = '10 SECONDS' AS INSERT INTO arch VALUES (2, 2)")
    base.sql("ALTER TASK t1 RESUME;")  # a statement's own ';' is fine
    base.sql("ALTER TASK t2 RESUME")
    base.sql("DROP STREAM st2")
    ran = base.sql("EXECUTE TASK t1").collect()
    assert [r.state for r in ran] == ["FAILED"] and "st2" in ran[0].error_message
    clock.advance(seconds=40)
    scheduler = _scheduler(base)
    scheduler.step()  # the broken task fails again; the other one runs all the same
    assert {n: s for g in scheduler.graph_runs for n, s in g.states.items()} == {
        "t1": "FAILED",
        "t2": "SUCCEEDED",
    }


def test_children_retry_as_their_root_says(base, clock):
    base.sql("INSERT INTO src VALUES (0, 0)")
    base.sql("CREATE TASK root TASK_AUTO_RETRY_ATTEMPTS = 2 AS INSERT INTO arch VALUES (1, 1)")
    base.sql("CREATE TASK child AFTER root AS INSERT INTO arch SELECT k, 1 / k FROM src")
    base.sql("ALTER TASK child RESUME")
    ran = base.sql("EXECUTE TASK root").collect()
    assert [(r.name, r.state, r.attempt_number) for r in ran] == [
        ("root", "SUCCEEDED", 1),
        ("child", "FAILED", 1),
        ("child", "FAILED", 2),
        ("child", "FAILED", 3),
    ]


def test_a_script_keeps_a_task_body_together():
    text = (
        "CREATE TASK t AS BEGIN INSERT INTO x VALUES ('a; COMMIT'); -- ; COMMIT\n"
        ' DELETE FROM x; COMMIT; SELECT 2; CREATE TASK "select" AS SELECT 1;'
    )
    assert split_statements(text) == [
        "CREATE TASK t AS BEGIN INSERT INTO x VALUES ('a; COMMIT'); -- ; COMMIT\n"
        " DELETE FROM x; COMMIT",
        "SELECT 2",
        'CREATE TASK "select" AS SELECT 1',
    ]
    tree = parse_one(split_statements(text)[0])
    assert tree.args["body"] == ["INSERT INTO x VALUES ('a; COMMIT')", "DELETE FROM x"]
