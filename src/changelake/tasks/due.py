"""Which task graphs are due, for the scheduler (``changelake.scheduling.scheduler``) to run in its round.

A started root with a SCHEDULE is due once its ``next_at`` has come; taking the slot moves
``next_at`` to the next one in the same catalog transaction as the root's first run row, so a
slot runs once however many schedulers race for it (only the lease holder runs any). Slots missed
while no scheduler ran are not made up (as in Snowflake): the next one is after now. Slots that
pass while the graph still runs are SKIPPED unless ALLOW_OVERLAPPING_EXECUTION = TRUE, with which
the next one runs right after (one scheduler thread runs one graph at a time). A started root
with a WHEN condition and no schedule is *triggered*: due when its condition holds (a catalog
query) and its last run started at least USER_TASK_MINIMUM_TRIGGER_INTERVAL_IN_SECONDS ago.
"""

from __future__ import annotations

from dataclasses import dataclass

from changelake.catalog import Catalog
from changelake.catalog.alters import FinishTaskRun
from changelake.catalog.model import TaskInfo, TaskRun, TaskRunState, TaskState
from changelake.errors import ChangelakeError
from changelake.tasks import spec as task_spec
from changelake.tasks.define import is_root, schedule_of
from changelake.tasks.run import GraphRun, Runner, claim_of, run_graph
from changelake.txn.context import StatementContext

_MAX_SKIPPED = 10  # slots recorded as SKIPPED after one long graph run


@dataclass(frozen=True)
class Due:
    root: TaskInfo
    trigger: str  # SCHEDULED | TRIGGERED
    scheduled_at: float
    next_at: float | None  # where the root's schedule moves when this slot is taken


def due_graphs(ctx: StatementContext) -> list[Due]:
    """The task graphs to run now."""
    now = ctx.now()
    found = []
    for t in ctx.catalog.list_tasks():
        if t.state != TaskState.STARTED or not is_root(t):
            continue
        schedule = schedule_of(t)
        if schedule is not None:
            if t.next_at is None or t.next_at > now:
                continue
            following = schedule.next_after(t.next_at)
            if following <= now:
                following = schedule.next_after(now)
            found.append(Due(t, "SCHEDULED", t.next_at, following))
        elif t.definition.condition is not None and _may_trigger(ctx, t, now):
            found.append(Due(t, "TRIGGERED", now, None))
    return found


def _may_trigger(ctx: StatementContext, t: TaskInfo, now: float) -> bool:
    last = ctx.catalog.task_runs(task_id=t.task_id, limit=1)
    if last and now - (last[0].started_at or 0.0) < t.definition.options.min_trigger_interval:
        return False
    assert t.definition.condition is not None
    try:
        return task_spec.holds(ctx, task_spec.condition(t.definition.condition, about=t.name))
    except ChangelakeError:
        return True  # its run records the error (a FAILED row), once per trigger interval


def run_due(runner: Runner, due: Due) -> GraphRun:
    """Run one due graph; then skip the slots that passed while it ran (no overlap)."""
    slot = None if due.next_at is None else (due.scheduled_at, due.next_at)
    done = run_graph(runner, due.root, scheduled_at=due.scheduled_at, slot=slot)
    if due.trigger == "SCHEDULED" and not due.root.definition.options.allow_overlapping:
        _skip_passed(runner, due.root.task_id, runner.ctx.catalog)
    return done


def _skip_passed(runner: Runner, task_id: int, catalog: Catalog) -> None:
    t = catalog.task_by_id(task_id)
    schedule = None if t is None else schedule_of(t)
    if t is None or schedule is None or t.next_at is None:
        return
    now = runner.ctx.now()
    slot = t.next_at
    for i in range(_MAX_SKIPPED):
        if slot > now:
            break
        following = schedule.next_after(slot)
        if i == _MAX_SKIPPED - 1 and following <= now:
            following = schedule.next_after(now)  # enough rows: the rest is passed over
        claim = claim_of(runner, seen_next_at=slot, next_at=following)
        taken = catalog.add_task_run(
            TaskRun(
                run_id=0,
                task_id=task_id,
                graph_run_id=None,
                attempt=1,
                state=TaskRunState.SKIPPED,
                trigger="SCHEDULED",
                reason="the previous graph run was still executing"
                " (ALLOW_OVERLAPPING_EXECUTION = FALSE)",
                scheduled_at=slot,
                started_at=None,
                completed_at=now,
                statement_id=None,
                error="",
                spark_jobs=0,
                holder=runner.holder,
            ),
            claim,
        )
        if taken is None:
            return
        slot = claim.next_at


def end_orphaned_runs(catalog: Catalog, holder: str, now: float) -> int:
    """End the EXECUTING runs nobody will finish: FAILED, nothing they did was committed. A
    scheduled or triggered run of a scheduler other than ``holder`` (the lease holder: that one
    died or lost its lease); a manual run (EXECUTE TASK) past its task's timeout (its process
    would have cancelled it). How many."""
    ended = 0
    timeouts = {t.task_id: t.definition.options.timeout_ms / 1000 for t in catalog.list_tasks()}
    for run in catalog.task_runs(state=TaskRunState.EXECUTING):
        if run.trigger == "MANUAL":
            limit = timeouts.get(run.task_id, 0.0)
            if (run.started_at or 0.0) + limit + 60 > now:
                continue
            reason = "the process running it stopped before it finished"
        elif run.holder != holder:
            reason = "the scheduler running it stopped before it finished"
        else:
            continue
        ending = FinishTaskRun(
            run.run_id,
            TaskRunState.FAILED,
            reason=reason,
            error=f"{run.holder} stopped (or lost its lease) during the run; nothing it did was"
            " committed",
        )
        ended += catalog.end_task_run(ending, completed_at=now)
    return ended
