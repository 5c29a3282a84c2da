"""Tasks (``cl_tasks``) and their runs (``cl_task_runs``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Column, Connection, select

from changelake.catalog import lease_repo
from changelake.catalog import tables as t
from changelake.catalog.alters import AlterTask, FinishTaskRun, values_set
from changelake.catalog.model import (
    RunClaim,
    TaskDefinition,
    TaskInfo,
    TaskOptions,
    TaskRun,
    TaskRunState,
    TaskState,
)
from changelake.errors import ConflictError

_T, _R = t.tasks.c, t.task_runs.c


def _info(row: Any) -> TaskInfo:
    return TaskInfo(
        task_id=row.task_id,
        name=row.name,
        definition=TaskDefinition(
            sql=row.sql,
            statements=tuple(json.loads(row.body)),
            schedule=row.schedule,
            after=tuple(json.loads(row.after)),
            condition=row.condition,
            options=TaskOptions(**json.loads(row.options)),
        ),
        state=row.state,
        suspended_reason=row.suspended_reason,
        failures=row.failures,
        next_at=row.next_at,
        created_at=row.created_at,
    )


def _live() -> Any:
    return select(t.tasks).where(_T.dropped_at.is_(None))


def find(conn: Connection, name: str) -> TaskInfo | None:
    row = conn.execute(_live().where(_T.name == name.lower())).first()
    return None if row is None else _info(row)


def by_id(conn: Connection, task_id: int) -> TaskInfo | None:
    row = conn.execute(_live().where(_T.task_id == task_id)).first()
    return None if row is None else _info(row)


def list_live(conn: Connection) -> list[TaskInfo]:
    return [_info(r) for r in conn.execute(_live().order_by(_T.name))]


def any_live(conn: Connection) -> bool:
    return conn.execute(_live().limit(1)).first() is not None


def _definition_columns(d: TaskDefinition) -> dict[Column[Any], object]:
    """The columns that hold ``d``."""
    return {
        _T.sql: d.sql,
        _T.body: json.dumps(list(d.statements)),
        _T.schedule: d.schedule,
        _T.after: json.dumps(sorted(set(d.after))),
        _T.condition: d.condition,
        _T.options: json.dumps(dataclasses.asdict(d.options)),
    }


def insert(conn: Connection, name: str, d: TaskDefinition, *, now: float) -> int:
    columns = {
        _T.name: name.lower(),
        _T.state: TaskState.SUSPENDED,  # as in Snowflake: a new task runs once it is resumed
        _T.suspended_reason: "",
        _T.failures: 0,
        _T.next_at: None,
        _T.created_at: now,
        **_definition_columns(d),
    }
    return conn.execute(t.tasks.insert().values(columns)).inserted_primary_key[0]


def _update(conn: Connection, task_id: int, values: Mapping[Column[Any], object]) -> None:
    conn.execute(t.tasks.update().where(_T.task_id == task_id).values(values))


def alter(conn: Connection, u: AlterTask) -> None:
    """Set the columns of the task's row that ``u`` sets (a definition: all of its columns)."""
    columns: dict[Column[Any], object] = {
        _T.state: u.state,
        _T.suspended_reason: u.suspended_reason,
        _T.failures: u.failures,
        _T.next_at: u.next_at,
    }
    if isinstance(u.definition, TaskDefinition):
        columns.update(_definition_columns(u.definition))
    _update(conn, u.task_id, values_set(columns))


def drop(conn: Connection, task_id: int, *, now: float) -> None:
    _update(conn, task_id, {_T.dropped_at: now, _T.next_at: None})


# -- runs -----------------------------------------------------------------------------------------


def _run(r: Any) -> TaskRun:
    return TaskRun(
        run_id=r.run_id,
        task_id=r.task_id,
        graph_run_id=r.graph_run_id,
        attempt=r.attempt,
        state=r.state,
        trigger=r.trigger,
        reason=r.reason,
        scheduled_at=r.scheduled_at,
        started_at=r.started_at,
        completed_at=r.completed_at,
        statement_id=r.statement_id,
        error=r.error,
        spark_jobs=r.spark_jobs,
        holder=r.holder,
    )


def add_run(conn: Connection, run: TaskRun) -> TaskRun:
    """Record ``run``: as stored, with its run id (a root's graph run id is its own run id)."""
    values = dataclasses.asdict(run)
    del values["run_id"]
    run_id = conn.execute(t.task_runs.insert().values(**values)).inserted_primary_key[0]
    graph_run_id = run_id if run.graph_run_id is None else run.graph_run_id
    if run.graph_run_id is None:
        conn.execute(t.task_runs.update().where(_R.run_id == run_id).values(graph_run_id=run_id))
    return dataclasses.replace(run, run_id=run_id, graph_run_id=graph_run_id)


def claim_and_add(
    conn: Connection, run: TaskRun, claim: RunClaim | None, *, postgres: bool
) -> TaskRun | None:
    """``add_run`` under ``claim`` (see ``RunClaim``): None if the lease or the slot was lost;
    a SKIPPED run instead of ``run`` if another run of its graph is executing."""
    if claim is not None:
        if claim.lease is not None and claim.epoch is not None:
            try:
                lease_repo.check_held(conn, claim.lease, claim.epoch, postgres=postgres)
            except ConflictError:
                return None
        if claim.next_at is not None:
            moved = conn.execute(
                t.tasks.update()
                .where(_T.task_id == run.task_id, _T.next_at == claim.seen_next_at)
                .values(next_at=claim.next_at)
            )
            if moved.rowcount != 1:
                return None  # another scheduler took the slot
        if not claim.overlap and claim.graph:
            busy = conn.execute(
                select(_R.run_id).where(
                    _R.state == TaskRunState.EXECUTING, _R.task_id.in_(claim.graph)
                )
            ).first()
            if busy is not None and run.state == TaskRunState.EXECUTING:
                run = dataclasses.replace(
                    run,
                    state=TaskRunState.SKIPPED,
                    completed_at=run.started_at,
                    reason=f"run {busy.run_id} of the graph was still executing"
                    " (ALLOW_OVERLAPPING_EXECUTION = FALSE)",
                )
    return add_run(conn, run)


def finish_run(
    conn: Connection,
    ending: FinishTaskRun,
    *,
    completed_at: float,
    commit_number: int | None = None,
) -> bool:
    """End an EXECUTING run as ``ending`` says, at ``completed_at`` (in commit
    ``commit_number``; None: one that committed nothing): False if it had ended."""
    columns = {
        _R.state: ending.state,
        _R.statement_id: ending.statement_id,
        _R.spark_jobs: ending.spark_jobs,
        _R.reason: ending.reason,
        _R.error: ending.error,
        _R.completed_at: completed_at,
    }
    if commit_number is not None:
        columns[_R.commit_number] = commit_number
    done = conn.execute(
        t.task_runs.update()
        .where(_R.run_id == ending.run_id, _R.state == TaskRunState.EXECUTING)
        .values(values_set(columns))
    )
    return done.rowcount == 1


def check_executing(conn: Connection, run_id: int, task: str) -> None:
    """Refuse to commit the statement of a run that is no longer EXECUTING."""
    state = conn.execute(select(_R.state).where(_R.run_id == run_id)).scalar()
    if state != TaskRunState.EXECUTING:
        raise ConflictError(
            f"Task {task}'s run {run_id} was ended ({state}) by another process while it ran"
            " (it was taken for dead); nothing it did was written."
        )


def runs(
    conn: Connection,
    *,
    task_id: int | None = None,
    graph_run_id: int | None = None,
    state: str | None = None,
    limit: int | None = None,
) -> list[TaskRun]:
    """Task runs, newest first."""
    query = select(t.task_runs).order_by(_R.run_id.desc())
    if task_id is not None:
        query = query.where(_R.task_id == task_id)
    if graph_run_id is not None:
        query = query.where(_R.graph_run_id == graph_run_id)
    if state is not None:
        query = query.where(_R.state == state)
    if limit is not None:
        query = query.limit(limit)
    return [_run(r) for r in conn.execute(query)]
