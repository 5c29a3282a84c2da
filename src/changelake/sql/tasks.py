"""Task statements: their typed values, and SHOW TASKS / DESCRIBE TASK / TASK_HISTORY as small
DataFrames. The work is in ``changelake.dynamic`` (tasks, task_run)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.catalog.model import TaskInfo, TaskRun, TaskState
from changelake.catalog.requests import IfExists
from changelake.dialect import parse_one
from changelake.dialect import tasks as d
from changelake.dialect.apply import ApplyChangesSyntax
from changelake.errors import InvalidStatementError
from changelake.runtime.env import Context
from changelake.tasks.define import (
    AddAfter,
    ModifyBody,
    ModifyCondition,
    NewTask,
    RemoveAfter,
    RemoveCondition,
    Resume,
    SetOptions,
    Suspend,
    TaskChange,
    UnsetOptions,
    task,
)
from changelake.txn.context import StatementContext

# What a task body of several statements may hold: what runs inside BEGIN ... COMMIT.
TRANSACTIONAL = (
    exp.Query,
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.TruncateTable,
    ApplyChangesSyntax,
)


@dataclass(frozen=True)
class CreateTask:
    new: NewTask


@dataclass(frozen=True)
class AlterTask:
    name: str
    change: TaskChange
    if_exists: bool


@dataclass(frozen=True)
class ExecuteTask:
    name: str


@dataclass(frozen=True)
class DropTask:
    name: str
    if_exists: bool


@dataclass(frozen=True)
class DescribeTask:
    name: str


TaskStatement = CreateTask | AlterTask | ExecuteTask | DropTask | DescribeTask


def transactional(text: str) -> bool:
    """Whether statement ``text`` runs inside a transaction (else it commits on its own)."""
    return isinstance(parse_one(text), TRANSACTIONAL)


def _check_body(name: str, body: list[str], in_transaction: bool) -> tuple[str, ...]:
    if in_transaction:
        for text in body:
            if not transactional(text):
                raise InvalidStatementError(
                    f"Task {name}: {text.split()[0].upper()} ... cannot run inside BEGIN ..."
                    " COMMIT (DDL and maintenance commit on their own); make it a task's only"
                    " statement, or a task of its own (AFTER this one)."
                )
    return tuple(body)


def _create(tree: d.CreateTaskSyntax) -> CreateTask:
    name = tree.this.name
    return CreateTask(
        NewTask(
            name=name,
            sql=tree.args["text"],
            statements=_check_body(name, tree.args["body"], bool(tree.args.get("transaction"))),
            options=tree.args["options"],
            after=tuple(tree.args["after"]),
            condition=tree.args.get("condition"),
            if_exists=IfExists.of(
                replace=bool(tree.args.get("replace")), if_not_exists=bool(tree.args.get("exists"))
            ),
        )
    )


def _change(tree: d.AlterTaskSyntax) -> TaskChange:
    """What ALTER TASK changes: its node's ``action``, with the arguments that action has."""
    a = tree.args
    match a["action"]:
        case "RESUME":
            return Resume()
        case "SUSPEND":
            return Suspend()
        case "SET":
            return SetOptions(dict(a["options"]))
        case "UNSET":
            return UnsetOptions(tuple(a["names"]))
        case "ADD AFTER":
            return AddAfter(tuple(a["names"]))
        case "REMOVE AFTER":
            return RemoveAfter(tuple(a["names"]))
        case "MODIFY AS":
            body = _check_body(tree.this.name, a["body"], bool(a.get("transaction")))
            return ModifyBody(body, a["text"])
        case "MODIFY WHEN":
            return ModifyCondition(a["condition"])
        case "REMOVE WHEN":
            return RemoveCondition()
    raise ValueError(f"ALTER TASK: no action {a['action']!r}")


def _alter(tree: d.AlterTaskSyntax) -> AlterTask:
    return AlterTask(tree.this.name, _change(tree), bool(tree.args.get("exists")))


BUILDERS: dict[type, Callable[..., TaskStatement]] = {
    d.CreateTaskSyntax: _create,
    d.AlterTaskSyntax: _alter,
    d.ExecuteTaskSyntax: lambda t: ExecuteTask(t.this.name),
    d.DropTaskSyntax: lambda t: DropTask(t.this.name, bool(t.args.get("exists"))),
    d.DescribeTaskSyntax: lambda t: DescribeTask(t.this.name),
}


def _ts(epoch: float | None) -> dt.datetime | None:
    return None if epoch is None else dt.datetime.fromtimestamp(epoch)


SHOW_COLUMNS = (
    "name string, state string, schedule string, predecessors string, condition string,"
    " definition string, next_scheduled_time timestamp, failures int,"
    " suspend_task_after_num_failures int, task_auto_retry_attempts int,"
    " allow_overlapping_execution boolean, user_task_timeout_ms bigint, suspended_reason string,"
    " comment string, created_on timestamp"
)


def _row(ctx: StatementContext, t: TaskInfo, names: dict[int, str]) -> tuple:
    d_, o = t.definition, t.definition.options
    return (
        t.name,
        t.state,
        d_.schedule,
        ", ".join(names.get(i, f"(dropped task {i})") for i in d_.after) or None,
        d_.condition,
        d_.sql,
        _ts(t.next_at),
        t.failures,
        o.suspend_after_failures,
        o.auto_retry_attempts,
        o.allow_overlapping,
        o.timeout_ms,
        t.suspended_reason or None,
        o.comment or None,
        _ts(t.created_at),
    )


def show_tasks(ctx: Context) -> DataFrame:
    """SHOW TASKS: each task with its state, schedule, predecessors, condition and options."""
    tasks = ctx.catalog.list_tasks()
    names = {t.task_id: t.name for t in tasks}
    return ctx.spark.createDataFrame([_row(ctx, t, names) for t in tasks], SHOW_COLUMNS)


def describe_task(ctx: Context, name: str) -> DataFrame:
    """DESCRIBE TASK: its SHOW row, one property per row."""
    found = task(ctx, name)
    names = {t.task_id: t.name for t in ctx.catalog.list_tasks()}
    keys = [c.split()[0] for c in SHOW_COLUMNS.split(",")]
    values = _row(ctx, found, names)
    rows = [(k, "" if v is None else str(v)) for k, v in zip(keys, values, strict=True)]
    return ctx.spark.createDataFrame(rows, "property string, value string")


HISTORY_COLUMNS = (
    "name string, run_id bigint, graph_run_group_id bigint, attempt_number int, state string,"
    " run_trigger string, reason string, scheduled_time timestamp, query_start_time timestamp,"
    " completed_time timestamp, query_id string, error_message string, spark_jobs int"
)


def history_rows(ctx: StatementContext, name: str | None, limit: int | None) -> list[tuple]:
    """TASK_HISTORY: task runs (of task ``name``, or of all), newest first, after the next
    scheduled run of each started root (state SCHEDULED, no run id yet)."""
    task_id = task(ctx, name).task_id if name is not None else None
    runs = ctx.catalog.task_runs(task_id=task_id, limit=limit)
    tasks = ctx.catalog.list_tasks()
    names = {t.task_id: t.name for t in tasks}
    scheduled = [  # the next run of each started root with a schedule, as Snowflake shows it
        (t.name, None, None, 1, "SCHEDULED", "SCHEDULED", None, _ts(t.next_at))
        + (None, None, None, None, 0)
        for t in tasks
        if t.next_at is not None and t.state == TaskState.STARTED and task_id in (None, t.task_id)
    ]
    found = scheduled + [_history_row(r, names) for r in runs]
    return found if limit is None else found[:limit]


def graph_run_rows(ctx: StatementContext, graph_run_id: int | None) -> list[tuple]:
    """TASK_HISTORY of one graph run, in the order its tasks ran."""
    if graph_run_id is None:
        return []
    names = {t.task_id: t.name for t in ctx.catalog.list_tasks()}
    runs = ctx.catalog.task_runs(graph_run_id=graph_run_id)
    return [_history_row(r, names) for r in reversed(runs)]


def _history_row(r: TaskRun, names: dict[int, str]) -> tuple:
    return (
        names.get(r.task_id, f"(dropped task {r.task_id})"),
        r.run_id,
        r.graph_run_id,
        r.attempt,
        r.state,
        r.trigger,
        r.reason or None,
        _ts(r.scheduled_at),
        _ts(r.started_at),
        _ts(r.completed_at),
        r.statement_id,
        r.error or None,
        r.spark_jobs,
    )
