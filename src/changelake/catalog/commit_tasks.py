"""The commit path's updates and requirements of tasks (registered by commit.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from changelake.catalog import task_repo
from changelake.catalog.alters import AlterTask, FinishTaskRun
from changelake.catalog.commit_state import CommitState
from changelake.catalog.model import TaskDefinition, TaskState
from changelake.catalog.requests import (
    DefineTask,
    DropTask,
    IfExists,
    TaskRunExecuting,
)
from changelake.errors import InvalidStatementError, ObjectExistsError


def _define(state: CommitState, u: DefineTask) -> None:
    found = task_repo.find(state.conn, u.name)
    if found is None:
        task_id = task_repo.insert(state.conn, u.name, u.definition, now=state.now)
    elif u.if_exists is IfExists.KEEP:
        return
    elif u.if_exists is IfExists.REPLACE:
        task_id = found.task_id
        replaced = AlterTask(
            task_id,
            definition=u.definition,
            state=TaskState.SUSPENDED,
            suspended_reason="",
            failures=0,
            next_at=None,
        )
        task_repo.alter(state.conn, replaced)
    else:
        raise ObjectExistsError(
            f"Task {u.name} already exists; use CREATE OR REPLACE TASK to redefine it."
        )
    _check_acyclic(state, task_id)


def _alter(state: CommitState, u: AlterTask) -> None:
    task_repo.alter(state.conn, u)
    if isinstance(u.definition, TaskDefinition):
        _check_acyclic(state, u.task_id)


def _drop(state: CommitState, u: DropTask) -> None:
    task_repo.drop(state.conn, u.task_id, now=state.now)
    for task in task_repo.list_live(state.conn):
        if u.task_id in task.definition.after:
            after = tuple(a for a in task.definition.after if a != u.task_id)
            definition = replace(task.definition, after=after)
            task_repo.alter(state.conn, AlterTask(task.task_id, definition=definition))


def _check_acyclic(state: CommitState, changed: int) -> None:
    """Refuse predecessors that lead back to the task ``changed``."""
    tasks = {t.task_id: t for t in task_repo.list_live(state.conn)}
    path: list[int] = []
    seen: set[int] = set()

    def visit(task_id: int) -> None:
        if task_id in seen:
            return  # reached by another path: no cycle through it
        seen.add(task_id)
        path.append(task_id)
        for before in tasks[task_id].definition.after:
            if before == changed:
                names = " -> ".join(tasks[i].name for i in [changed, *reversed(path)])
                raise InvalidStatementError(
                    f"Task {tasks[changed].name} cannot run after {tasks[path[-1]].name}: the"
                    f" graph would have a cycle ({names}). A task graph runs each task once,"
                    " after its predecessors."
                )
            if before in tasks:
                visit(before)
        path.pop()

    visit(changed)


def _finish(state: CommitState, u: FinishTaskRun) -> None:
    state.finished_runs.append(u)  # stamped at the end


def record_runs(state: CommitState) -> None:
    """End the task runs this commit finished (after its stamp)."""
    assert state.stamp is not None
    for ending in state.finished_runs:
        task_repo.finish_run(
            state.conn,
            ending,
            completed_at=state.stamp.committed_at,
            commit_number=state.stamp.commit_number,
        )


def _executing(state: CommitState, r: TaskRunExecuting) -> None:
    task_repo.check_executing(state.conn, r.run_id, r.task)


APPLY: dict[type, Callable[[CommitState, Any], None]] = {
    DefineTask: _define,
    AlterTask: _alter,
    DropTask: _drop,
    FinishTaskRun: _finish,
}

CHECKS: dict[type, Callable[[CommitState, Any], None]] = {
    TaskRunExecuting: _executing,
}
