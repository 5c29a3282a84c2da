"""Tasks: CREATE, ALTER, DROP; graphs of tasks (AFTER) in the order they run.

A task is created suspended (as in Snowflake); RESUME starts it. A *root* has no predecessors:
it runs on its SCHEDULE, or, with a WHEN condition and no schedule, when the condition holds
(a *triggered* task). The others run in their root's graph run, after all their predecessors
succeeded in it. A child cannot have a schedule; a cycle in AFTER is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from changelake.catalog.alters import UNSET, AlterTask, Unset
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


@dataclass(frozen=True)
class Resume:
    keyword: ClassVar[str] = "RESUME"


@dataclass(frozen=True)
class Suspend:
    keyword: ClassVar[str] = "SUSPEND"


@dataclass(frozen=True)
class SetOptions:
    options: Mapping[str, str]  # option (upper case) -> value as written
    keyword: ClassVar[str] = "SET"


@dataclass(frozen=True)
class UnsetOptions:
    names: tuple[str, ...]  # options, upper case
    keyword: ClassVar[str] = "UNSET"


@dataclass(frozen=True)
class AddAfter:
    tasks: tuple[str, ...]  # predecessors' names
    keyword: ClassVar[str] = "ADD AFTER"


@dataclass(frozen=True)
class RemoveAfter:
    tasks: tuple[str, ...]
    keyword: ClassVar[str] = "REMOVE AFTER"


@dataclass(frozen=True)
class ModifyBody:
    statements: tuple[str, ...]
    sql: str  # the body as written
    keyword: ClassVar[str] = "MODIFY AS"


@dataclass(frozen=True)
class ModifyCondition:
    condition: str  # as written
    keyword: ClassVar[str] = "MODIFY WHEN"


@dataclass(frozen=True)
class RemoveCondition:
    keyword: ClassVar[str] = "REMOVE WHEN"


# What ALTER TASK changes: one value per action (``keyword``: the action as written); all but
# RESUME and SUSPEND change its definition.
Redefinition = (
    SetOptions
    | UnsetOptions
    | AddAfter
    | RemoveAfter
    | ModifyBody
    | ModifyCondition
    | RemoveCondition
)
TaskChange = Resume | Suspend | Redefinition


def alter_task(ctx: StatementContext, name: str, change: TaskChange) -> None:
    """ALTER TASK name RESUME | SUSPEND | SET | UNSET | ADD AFTER | REMOVE AFTER | MODIFY AS |
    MODIFY WHEN | REMOVE WHEN."""
    t = task(ctx, name)
    about = f"ALTER TASK {t.name} {change.keyword}"
    d = t.definition
    if isinstance(change, Resume):
        update = AlterTask(
            t.task_id,
            state=TaskState.STARTED,
            suspended_reason="",
            failures=0,
            next_at=_first_run(ctx, t),
        )
        if is_root(t) and d.schedule is None and d.condition is None:
            raise InvalidStatementError(
                f"{about}: task {t.name} has neither a SCHEDULE, a WHEN condition nor AFTER,"
                " so it would never run; give it one (ALTER TASK ... SET SCHEDULE = '5 MINUTE'),"
                " or run it with EXECUTE TASK."
            )
    elif isinstance(change, Suspend):
        update = AlterTask(t.task_id, state=TaskState.SUSPENDED, next_at=None)
    else:
        update = _redefine(ctx, t, _definition(ctx, t, change, about))
    _commit(ctx, f"ALTER TASK {change.keyword}", update)


def _definition(
    ctx: StatementContext, t: TaskInfo, change: Redefinition, about: str
) -> TaskDefinition:
    """``t``'s definition as ``change`` leaves it."""
    d = t.definition
    if isinstance(change, SetOptions):
        return _set(d, change.options, about)
    if isinstance(change, UnsetOptions):
        return _unset(d, change.names, about)
    if isinstance(change, AddAfter | RemoveAfter):
        ids = [_predecessor(ctx, n, about).task_id for n in change.tasks]
        if isinstance(change, RemoveAfter):
            return replace(d, after=tuple(i for i in d.after if i not in ids))
        if d.schedule is not None:
            raise InvalidStatementError(
                f"{about}: task {t.name} has a SCHEDULE; a task with AFTER runs in its"
                " root's graph run (UNSET SCHEDULE first)."
            )
        return replace(d, after=(*d.after, *(i for i in ids if i not in d.after)))
    if isinstance(change, ModifyBody):
        return replace(d, statements=change.statements, sql=change.sql)
    if isinstance(change, ModifyCondition):
        _check_condition(ctx, change.condition, about)
        return replace(d, condition=change.condition)
    return replace(d, condition=None)


def _redefine(ctx: StatementContext, t: TaskInfo, d: TaskDefinition) -> AlterTask:
    """The update that gives ``t`` definition ``d`` (a started task: with its next run under
    ``d``'s schedule and predecessors, if they changed)."""
    definition: TaskDefinition | Unset = UNSET
    next_at: float | None | Unset = UNSET
    if d != t.definition:
        definition = d
        when = (d.schedule, d.after) != (t.definition.schedule, t.definition.after)
        if t.state == TaskState.STARTED and when:
            next_at = _first_run(ctx, replace(t, definition=d))
    return AlterTask(t.task_id, definition=definition, next_at=next_at)


def _unset(d: TaskDefinition, names: Sequence[str], about: str) -> TaskDefinition:
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


def _set(d: TaskDefinition, written: Mapping[str, str], about: str) -> TaskDefinition:
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
