"""Running a task graph once: the root, then each task after its predecessors succeeded.

Each task run is a history row, written EXECUTING when it starts; the run's statements commit
together with the row's SUCCEEDED (``FinishTaskRun``, required still EXECUTING), so a run
commits once: a process that died mid-run committed nothing, and the scheduler that takes over
ends its row FAILED. A task whose WHEN condition is false, whose predecessor did not succeed, or
that is suspended gets a SKIPPED row with the reason, and no Spark job. A failed run is retried
TASK_AUTO_RETRY_ATTEMPTS (the root's) times; one that runs longer than USER_TASK_TIMEOUT_MS is CANCELLED
(its Spark jobs are cancelled and it commits nothing). A graph run with a failed task counts as a
failure of its root, which SUSPEND_TASK_AFTER_NUM_FAILURES failures in a row suspend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from changelake.catalog.alters import AlterTask, FinishTaskRun
from changelake.catalog.model import RunClaim, TaskInfo, TaskRun, TaskRunState, TaskState
from changelake.catalog.requests import (
    CommitRequest,
    LeaseHeld,
    Requirement,
    TaskRunExecuting,
)
from changelake.errors import ChangelakeError, ConflictError
from changelake.runtime.env import Env
from changelake.spark.jobs import cancelled_after, counted_jobs
from changelake.tasks import spec as task_spec
from changelake.tasks.define import graph_of
from changelake.txn.context import StatementContext, new_statement_id

Finish = Callable[[str], CommitRequest]
# Runs a task's statements (the SQL layer's body runner): statements that can run in one
# transaction commit together with ``finish(statement id)``; a single statement that cannot
# (DDL, OPTIMIZE, ALTER DYNAMIC TABLE ... REFRESH) commits on its own, then ``finish`` does.
RunStatements = Callable[[Env, TaskInfo, Finish], None]


@dataclass
class GraphRun:
    """What one graph run did: per task name, its final state."""

    graph_run_id: int | None = None
    states: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(s in (TaskRunState.FAILED, TaskRunState.CANCELLED) for s in self.states.values())


@dataclass(frozen=True)
class Runner:
    """How runs are made: by whom (``holder``), why (``trigger``), under which requirements (the
    scheduler's lease), with which body runner."""

    ctx: StatementContext
    env: Env
    run_statements: RunStatements
    holder: str
    trigger: str  # SCHEDULED | TRIGGERED | MANUAL
    requirements: tuple[Requirement, ...] = ()


def run_graph(
    runner: Runner,
    root: TaskInfo,
    *,
    scheduled_at: float,
    slot: tuple[float, float] | None = None,
) -> GraphRun:
    """Run ``root``'s graph once. ``slot`` (the root's next scheduled run as seen, and where it
    moves) is taken in the same catalog transaction as the root's first row, so a slot runs
    once; a graph whose run is still executing is not started again (a SKIPPED row), unless
    the root allows overlapping runs."""
    ctx = runner.ctx
    done = GraphRun()
    graph = graph_of(ctx.catalog.list_tasks(), root)
    claim: RunClaim | None = claim_of(
        runner,
        seen_next_at=slot[0] if slot else None,
        next_at=slot[1] if slot else None,
        graph=tuple(t.task_id for t in graph),
        overlap=root.definition.options.allow_overlapping,
    )
    by_id: dict[int, TaskInfo] = {}
    retries = root.definition.options.auto_retry_attempts  # a graph's, as in Snowflake
    for t in graph:
        by_id[t.task_id] = t
        try:
            reason = _skip_reason(ctx, t, root, done, by_id)
        except ChangelakeError as e:  # e.g. its WHEN names a dropped stream
            if (
                _add(runner, t, done, scheduled_at, claim, state=TaskRunState.FAILED, error=str(e))
                is None
            ):
                return done
        else:
            state = TaskRunState.SKIPPED if reason else TaskRunState.EXECUTING
            run_id = _add(runner, t, done, scheduled_at, claim, state=state, reason=reason)
            if run_id is None or (claim is not None and done.states[t.name] != state):
                return done  # the slot or the lease was lost, or the graph is running
            if state == TaskRunState.EXECUTING:
                _execute(runner, t, done, scheduled_at, run_id, retries)
        claim = None
    if runner.trigger != "MANUAL":
        _count_failure(runner, root, done)
    return done


def claim_of(runner: Runner, **fields: object) -> RunClaim:
    """What starting a run of ``runner`` requires: its lease (if any) and ``fields``."""
    lease = next((r for r in runner.requirements if isinstance(r, LeaseHeld)), None)
    return RunClaim(
        lease=lease.name if lease else None,
        epoch=lease.epoch if lease else None,
        **fields,  # type: ignore[arg-type]
    )


def _skip_reason(
    ctx: StatementContext, t: TaskInfo, root: TaskInfo, done: GraphRun, by_id: dict[int, TaskInfo]
) -> str:
    if t.task_id != root.task_id:
        for before in t.definition.after:
            if before in by_id and done.states[by_id[before].name] != TaskRunState.SUCCEEDED:
                name = by_id[before].name
                return f"predecessor {name} did not succeed ({done.states[name]})"
        if t.state != TaskState.STARTED:
            return "the task is suspended"
    if t.definition.condition is not None:
        tree = task_spec.condition(t.definition.condition, about=f"task {t.name}")
        if not task_spec.holds(ctx, tree):
            return f"WHEN {t.definition.condition} was false"
    return ""


def _add(
    runner: Runner,
    t: TaskInfo,
    done: GraphRun,
    scheduled_at: float,
    claim: RunClaim | None,
    *,
    state: str,
    reason: str = "",
    error: str = "",
    attempt: int = 1,
) -> int | None:
    now = runner.ctx.now()
    run = TaskRun(
        run_id=0,
        task_id=t.task_id,
        graph_run_id=done.graph_run_id,
        attempt=attempt,
        state=state,
        trigger=runner.trigger,
        reason=reason,
        scheduled_at=scheduled_at,
        started_at=now,
        completed_at=None if state == TaskRunState.EXECUTING else now,
        statement_id=None,
        error=error,
        spark_jobs=0,
        holder=runner.holder,
    )
    stored = runner.ctx.catalog.add_task_run(run, claim)
    if stored is None:
        return None
    if done.graph_run_id is None:
        done.graph_run_id = stored.run_id
    done.states[t.name] = stored.state  # the catalog may have made it SKIPPED (overlap)
    return stored.run_id


def _execute(
    runner: Runner, t: TaskInfo, done: GraphRun, scheduled_at: float, run_id: int, retries: int
) -> None:
    for attempt in range(1, retries + 2):
        if attempt > 1:
            found = _add(
                runner, t, done, scheduled_at, None, state=TaskRunState.EXECUTING, attempt=attempt
            )
            if found is None:
                return
            run_id = found
        state, retry = _attempt(runner, t, run_id)
        done.states[t.name] = state
        if state == TaskRunState.SUCCEEDED or not retry:
            return


def _attempt(runner: Runner, t: TaskInfo, run_id: int) -> tuple[str, bool]:
    """Run ``t``'s statements as run ``run_id``: its final state, and whether a retry may help
    (not after a lost lease or a run ended by another process)."""
    timeout = t.definition.options.timeout_ms / 1000

    with counted_jobs(runner.env.spark, f"task {t.name}") as jobs:

        def finish(statement_id: str) -> CommitRequest:
            finished = FinishTaskRun(
                run_id, TaskRunState.SUCCEEDED, statement_id=statement_id, spark_jobs=jobs()
            )
            return CommitRequest(
                new_statement_id(),
                "TASK RUN",
                updates=(finished,),
                requirements=(TaskRunExecuting(run_id, t.name), *runner.requirements),
            )

        with cancelled_after(runner.env.spark, timeout) as timed_out:
            try:
                runner.run_statements(runner.env, t, finish)
                return TaskRunState.SUCCEEDED, False
            except Exception as e:  # noqa: BLE001 - any failure ends the run; the scheduler goes on
                cancelled = timed_out()
                error = str(e) if isinstance(e, ChangelakeError) else f"{type(e).__name__}: {e}"
                state = TaskRunState.CANCELLED if cancelled else TaskRunState.FAILED
                reason = (
                    f"ran longer than USER_TASK_TIMEOUT_MS = {t.definition.options.timeout_ms}"
                    if cancelled
                    else ""
                )
                ending = FinishTaskRun(
                    run_id,
                    state,
                    reason=reason,
                    error=error.splitlines()[0] if error else "",
                    spark_jobs=jobs(),
                )
                ended = runner.ctx.catalog.end_task_run(ending, completed_at=runner.ctx.now())
                return state, ended and not cancelled and not isinstance(e, ConflictError)


def _count_failure(runner: Runner, root: TaskInfo, done: GraphRun) -> None:
    """A failed graph run counts against its root; enough in a row suspend it."""
    current = runner.ctx.catalog.task_by_id(root.task_id)
    if current is None:
        return
    failures = current.failures + 1 if done.failed else 0
    if failures == current.failures:
        return
    update = AlterTask(root.task_id, failures=failures)
    limit = current.definition.options.suspend_after_failures
    if done.failed and limit and failures >= limit:
        update = replace(
            update,
            state=TaskState.SUSPENDED,
            next_at=None,
            suspended_reason=f"suspended after {failures} failed runs in a row"
            f" (SUSPEND_TASK_AFTER_NUM_FAILURES = {limit})",
        )
    runner.ctx.catalog.commit(
        [
            CommitRequest(
                new_statement_id(),
                "TASK RUN",
                updates=(update,),
                requirements=runner.requirements,
            )
        ],
        clock=runner.ctx.clock,
    )
