"""Tasks: CREATE, ALTER, DROP; graphs of tasks (AFTER) in the order they run.

A task is created suspended (as in Snowflake); RESUME starts it. A *root* has no predecessors:
it runs on its SCHEDULE, or, with a WHEN condition and no schedule, when the condition holds
(a *triggered* task). The others run in their root's graph run, after all their predecessors
succeeded in it. A child cannot have a schedule; a cycle in AFTER is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from changelake.catalog.alters import AlterTask
from changelake.catalog.model import TaskDefinition, TaskInfo, TaskState
from changelake.catalog.requests import (
    CommitRequest,
    DefineTask,
    DropTask,
    IfExists,
)
from changelake.errors import InvalidStatementError, ObjectNotFoundError, did_you_mean
from changelake.tasks import spec as task_spec
from changelake.txn.context import StatementContext


@dataclass(frozen=True)
class NewTask:
    """CREATE TASK as written (names and texts, not yet checked against the catalog)."""

    name: str
    sql: str
    statements: tuple[str, ...]
    options: Mapping[str, str]
    after: tuple[str, ...] = ()
    condition: str | None = None
    if_exists: IfExists = IfExists.ERROR


def task(ctx: StatementContext, name: str) -> TaskInfo:
    """The task called ``name``, or an error naming the known ones."""
    found = ctx.catalog.find_task(name)
    if found is None:
        known = [t.name for t in ctx.catalog.list_tasks()]
        raise ObjectNotFoundError(f"Task {name!r} does not exist.{did_you_mean(name, known)}")
    return found


def schedule_of(t: TaskInfo) -> task_spec.Schedule | None:
    d = t.definition
    return None if d.schedule is None else task_spec.schedule(d.schedule, about=f"task {t.name}")


def is_root(t: TaskInfo) -> bool:
    return not t.definition.after


def _commit(ctx: StatementContext, operation: str, *updates: object) -> None:
    ctx.catalog.commit(
        [CommitRequest(ctx.statement_id, operation, updates=updates)],  # type: ignore[arg-type]
        clock=ctx.clock,
    )


def create_task(ctx: StatementContext, new: NewTask) -> None:
    about = f"CREATE TASK {new.name}"
    after = tuple(_predecessor(ctx, n, about).task_id for n in new.after)
    written = new.options.get("SCHEDULE")
    if written is not None:
        task_spec.schedule(written, about=about)
        if after:
            raise InvalidStatementError(
                f"{about}: a task with AFTER runs in its root's graph run and has no SCHEDULE;"
                " give the schedule to the root task."
            )
    if new.condition is not None:
        _check_condition(ctx, new.condition, about)
    definition = TaskDefinition(
        sql=new.sql,
        statements=new.statements,
        schedule=written,
        after=after,
        condition=new.condition,
        options=task_spec.options(new.options, about=about),
    )
    _commit(ctx, "CREATE TASK", DefineTask(new.name, definition, new.if_exists))


def _predecessor(ctx: StatementContext, name: str, about: str) -> TaskInfo:
    found = ctx.catalog.find_task(name)
    if found is None:
        known = [t.name for t in ctx.catalog.list_tasks()]
        raise ObjectNotFoundError(
            f"{about}: AFTER {name}: no such task.{did_you_mean(name, known)}"
        )
    return found


def _check_condition(ctx: StatementContext, text: str, about: str) -> None:
    for stream in task_spec.streams_of(task_spec.condition(text, about=about)):
        ctx.stream(stream)  # an unknown stream is refused now, naming the known ones


def alter_task(ctx: StatementContext, name: str, action: str, args: Mapping[str, object]) -> None:
    """ALTER TASK name RESUME | SUSPEND | SET | UNSET | ADD AFTER | REMOVE AFTER | MODIFY AS |
    MODIFY WHEN | REMOVE WHEN."""
    t = task(ctx, name)
    about = f"ALTER TASK {t.name} {action}"
    d = t.definition
    fields: dict[str, Any] = {}
    if action == "RESUME":
        fields = dict(
            state=TaskState.STARTED, suspended_reason="", failures=0, next_at=_first_run(ctx, t)
        )
        if is_root(t) and d.schedule is None and d.condition is None:
            raise InvalidStatementError(
                f"{about}: task {t.name} has neither a SCHEDULE, a WHEN condition nor AFTER,"
                " so it would never run; give it one (ALTER TASK ... SET SCHEDULE = '5 MINUTE'),"
                " or run it with EXECUTE TASK."
            )
    elif action == "SUSPEND":
        fields = dict(state=TaskState.SUSPENDED, next_at=None)
    elif action in ("SET", "UNSET"):
        d = _set(d, args, about, unset=action == "UNSET")
    elif action in ("ADD AFTER", "REMOVE AFTER"):
        names = args["names"]
        assert isinstance(names, list)
        ids = [_predecessor(ctx, n, about).task_id for n in names]
        if action == "ADD AFTER":
            if d.schedule is not None:
                raise InvalidStatementError(
                    f"{about}: task {t.name} has a SCHEDULE; a task with AFTER runs in its"
                    " root's graph run (UNSET SCHEDULE first)."
                )
            after = (*d.after, *(i for i in ids if i not in d.after))
        else:
            after = tuple(i for i in d.after if i not in ids)
        d = replace(d, after=after)
    elif action == "MODIFY AS":
        statements = args["body"]
        assert isinstance(statements, list)
        d = replace(d, statements=tuple(statements), sql=str(args["text"]))
    elif action == "MODIFY WHEN":
        _check_condition(ctx, str(args["condition"]), about)
        d = replace(d, condition=str(args["condition"]))
    elif action == "REMOVE WHEN":
        d = replace(d, condition=None)
    if d != t.definition:
        fields["definition"] = d
        when = (d.schedule, d.after) != (t.definition.schedule, t.definition.after)
        if t.state == TaskState.STARTED and when:
            fields["next_at"] = _first_run(ctx, replace(t, definition=d))
    _commit(ctx, f"ALTER TASK {action}", AlterTask(t.task_id, **fields))


def _set(
    d: TaskDefinition, args: Mapping[str, object], about: str, *, unset: bool
) -> TaskDefinition:
    if unset:
        names = args["names"]
        assert isinstance(names, list)
        for n in names:
            if n == "SCHEDULE":
                d = replace(d, schedule=None)
            elif n in task_spec.IGNORED:
                continue
            else:
                try:
                    field = task_spec.field_of(n)
                except KeyError:
                    raise InvalidStatementError(f"{about}: there is no option {n}.") from None
                d = replace(d, options=replace(d.options, **{field: task_spec.default_of(n)}))
        return d
    written = args["options"]
    assert isinstance(written, dict)
    if "SCHEDULE" in written:
        task_spec.schedule(written["SCHEDULE"], about=about)
        if d.after:
            raise InvalidStatementError(
                f"{about}: a task with AFTER has no SCHEDULE (it runs in its root's graph run)."
            )
        d = replace(d, schedule=written["SCHEDULE"])
    return replace(d, options=task_spec.options(written, about=about, base=d.options))


def _first_run(ctx: StatementContext, t: TaskInfo) -> float | None:
    """When a started root with a schedule first runs: one period (or cron slot) from now."""
    found = schedule_of(t)
    return None if found is None or not is_root(t) else found.next_after(ctx.now())


def drop_task(ctx: StatementContext, name: str, *, if_exists: bool) -> bool:
    found = ctx.catalog.find_task(name)
    if found is None:
        if if_exists:
            return False
        task(ctx, name)  # raises, naming the known ones
    assert found is not None
    _commit(ctx, "DROP TASK", DropTask(found.task_id))
    return True


def graph_of(tasks: Sequence[TaskInfo], root: TaskInfo) -> list[TaskInfo]:
    """``root`` and the tasks that run after it, transitively, each after its predecessors."""
    children: dict[int, list[TaskInfo]] = {}
    for t in tasks:
        for before in t.definition.after:
            children.setdefault(before, []).append(t)
    reached: dict[int, TaskInfo] = {}
    stack = [root]
    while stack:
        t = stack.pop()
        if t.task_id not in reached:
            reached[t.task_id] = t
            stack.extend(children.get(t.task_id, ()))
    order: list[TaskInfo] = []
    placed: set[int] = set()

    def place(t: TaskInfo) -> None:
        if t.task_id in placed:
            return
        placed.add(t.task_id)
        for before in t.definition.after:
            if before in reached and t.task_id != root.task_id:
                place(reached[before])
        order.append(t)

    place(root)
    for t in sorted(reached.values(), key=lambda t: t.name):
        place(t)
    return order
