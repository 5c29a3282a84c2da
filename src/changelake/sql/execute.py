"""Statement dispatch: parse one statement into its typed value, run its handler, return a
DataFrame."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.catalog.model import TaskInfo
from changelake.changelog.apply import apply_statement
from changelake.changelog.export import FileFormat, export  # export (COPY INTO)
from changelake.dialect import parse_one, to_spark
from changelake.dml.insert import insert
from changelake.dml.maintenance import optimize, vacuum
from changelake.dml.merge import merge
from changelake.dml.modify import delete, update
from changelake.dml.result import StatementResult
from changelake.dynamic.create import (
    alter_dynamic_table,
    create_dynamic_table,
    drop_dynamic_table,
)
from changelake.errors import TransactionError
from changelake.external.objects import create_connection, drop_connection, drop_external_table
from changelake.external.postgresql import scope
from changelake.plan.bind import Binder
from changelake.runtime.env import Context, Env
from changelake.spark.errors import spark_errors
from changelake.sql import apply, ddl, dynamic, external, show, tasks
from changelake.sql import statements as s
from changelake.sql.explain import explain
from changelake.sql.streams import create_stream, describe_stream, show_streams
from changelake.sql.table_functions import expand_table_functions
from changelake.tasks import define as task_ddl
from changelake.tasks.run import Finish, Runner, run_graph
from changelake.txn.context import new_statement_id
from changelake.txn.transaction import Transaction, TransactionSlot


@dataclass(frozen=True)
class Handling:
    """What a statement handler works with: the statement's context; BEGIN, COMMIT and ROLLBACK
    change ``transactions``."""

    ctx: Context
    transactions: TransactionSlot


def execute(env: Env, text: str, *, transactions: TransactionSlot) -> DataFrame:
    """Run one statement, inside the open transaction of ``transactions`` if there is one."""
    tree = parse_one(text)
    statement = s.statement_of(tree)
    h = Handling(env.context(transactions.current), transactions)
    with spark_errors(_label(text, tree)):
        reads = _dependent_query(statement)
        if reads is not None:
            scope.widen_for(env, reads)
        result = HANDLERS[type(statement)](h, statement)
        if reads is not None or isinstance(statement, _DEPENDENTS_GO):
            scope.settle(env)
    return result.to_dataframe(env.spark) if isinstance(result, StatementResult) else result


# Statements after which an external table with SCOPE = DEPENDENTS may need fewer rows.
_DEPENDENTS_GO = (s.Drop, dynamic.DropDynamicTable, external.CreateExternalTable)


def _dependent_query(statement: object) -> str | None:
    """The query of a statement that makes a dependent of tables (a view, a dynamic table, a
    stream on a table): external tables with SCOPE = DEPENDENTS widen for it first."""
    if isinstance(statement, s.CreateView):
        return to_spark(statement.query)
    if isinstance(statement, dynamic.CreateDynamicTable):
        return statement.new.sql
    if isinstance(statement, s.CreateStream) and not statement.on_view:
        return f"SELECT * FROM {statement.table}"
    return None


def _label(text: str, tree: exp.Expression) -> str:
    """How errors name a statement: its text up to its table ("UPDATE people", "INSERT INTO t")."""
    text = text.strip()
    table = tree.find(exp.Table)
    found = re.search(rf"\b{re.escape(table.name)}\b", text, re.I) if table else None
    return " ".join(text[: found.end()].split()) if found else text.split()[0].upper()


def _query(h: Handling, stmt: s.Query) -> DataFrame:
    binder = Binder(h.ctx)
    return binder.query(expand_table_functions(binder, stmt.tree.copy()))


def _begin(h: Handling, _: s.Begin) -> StatementResult:
    if h.transactions.current is not None:
        raise TransactionError("A transaction is already open; COMMIT or ROLLBACK it first.")
    h.transactions.current = Transaction(snapshot=h.ctx.catalog.snapshot())
    return StatementResult(h.ctx.statement_id, "BEGIN", "", message="Transaction started.")


def _end(h: Handling, *, commit: bool) -> dict[int, list[int]]:
    txn = h.transactions.current
    if txn is None:
        raise TransactionError(
            f"{'COMMIT' if commit else 'ROLLBACK'} without BEGIN: no transaction is open."
        )
    h.transactions.current = None
    if not commit or not txn.staged:
        return {}
    # The catalog checks every requirement before it applies any update: a later statement's
    # requirements hold against the state the transaction read, not its own earlier writes.
    return h.ctx.catalog.commit(txn.staged, clock=h.ctx.clock).versions


def _commit(h: Handling, _: s.Commit) -> StatementResult:
    versions = _end(h, commit=True)
    made = ", ".join(f"table {t} -> version {v[-1]}" for t, v in versions.items())
    return StatementResult(h.ctx.statement_id, "COMMIT", "", message=f"Committed. {made}".strip())


def _rollback(h: Handling, _: s.Rollback) -> StatementResult:
    _end(h, commit=False)
    return StatementResult(h.ctx.statement_id, "ROLLBACK", "", message="Rolled back.")


def _optimize(h: Handling, stmt: s.Optimize) -> StatementResult:
    h.ctx.require_no_transaction("OPTIMIZE")
    done = optimize(h.ctx, stmt.table)
    message = (
        f"Compacted {done.files_removed} file(s) into {done.files_added}."
        if done.version is not None
        else "Nothing to compact."
    )
    return StatementResult(
        h.ctx.statement_id, "OPTIMIZE", stmt.table.lower(), done.version, message=message
    )


def _vacuum(h: Handling, stmt: s.Vacuum) -> StatementResult:
    h.ctx.require_no_transaction("VACUUM")
    done = vacuum(h.ctx, stmt.table)
    return StatementResult(
        h.ctx.statement_id,
        "VACUUM",
        stmt.table.lower(),
        message=f"Removed {done.files_removed} expired file(s) and {done.orphans_removed} orphan"
        f" file(s); readable from version {done.readable_from_version}.",
    )


_SHOW: dict[s.ShowKind, Callable[[Handling, s.Show], DataFrame]] = {
    s.ShowKind.TABLES: lambda h, _: show.show_tables(h.ctx),
    s.ShowKind.VIEWS: lambda h, _: show.show_views(h.ctx),
    s.ShowKind.STREAMS: lambda h, _: show_streams(h.ctx),
    s.ShowKind.CHANNELS: lambda h, st: show.show_channels(h.ctx, st.table),
    s.ShowKind.INTERNAL_TABLES: lambda h, st: show.show_internal_tables(h.ctx, st.table),
    s.ShowKind.DYNAMIC_TABLES: lambda h, _: dynamic.show_dynamic_tables(h.ctx),
    s.ShowKind.TASKS: lambda h, _: tasks.show_tasks(h.ctx),
    s.ShowKind.CONNECTIONS: lambda h, _: external.show_connections(h.ctx),
    s.ShowKind.EXTERNAL_TABLES: lambda h, _: external.show_external_tables(h.ctx),
}

HANDLERS: dict[type, Callable[[Handling, Any], DataFrame | StatementResult]] = {
    s.Query: _query,
    s.Insert: lambda h, st: insert(h.ctx, st),
    s.Update: lambda h, st: update(h.ctx, st),
    s.Delete: lambda h, st: delete(h.ctx, st),
    s.Merge: lambda h, st: merge(h.ctx, st),
    s.CreateTable: lambda h, st: ddl.create_table(h.ctx, st),
    s.CreateView: lambda h, st: ddl.create_view(h.ctx, st),
    s.CreateStream: lambda h, st: create_stream(h.ctx, st),
    s.Drop: lambda h, st: ddl.drop(h.ctx, st),
    s.AlterTable: lambda h, st: ddl.alter(h.ctx, st),
    s.Truncate: lambda h, st: ddl.truncate(h.ctx, st),
    s.DescribeTable: lambda h, st: show.describe_table(h.ctx, st.table),
    s.DescribeHistory: lambda h, st: show.describe_history(h.ctx, st.table),
    s.DescribeStream: lambda h, st: describe_stream(h.ctx, st.stream),
    s.Show: lambda h, st: _SHOW[st.kind](h, st),
    s.Begin: _begin,
    s.Commit: _commit,
    s.Rollback: _rollback,
    s.Optimize: _optimize,
    s.Vacuum: _vacuum,
    s.Explain: lambda h, st: explain(h.ctx, st.tree),
    apply.ApplyChanges: lambda h, st: apply_statement(h.ctx, st.spec, st.source),
    # -- export (COPY INTO) --
    s.Export: lambda h, st: export(
        h.ctx, st.query, path=st.path, file_format=FileFormat.parse(st.file_format)
    ).to_dataframe(h.ctx.spark),
    # -- end export --
    dynamic.CreateDynamicTable: lambda h, st: create_dynamic_table(h.ctx, st.new),
    dynamic.AlterDynamicTable: lambda h, st: alter_dynamic_table(
        h.ctx, st.name, st.action, st.options
    ),
    dynamic.DropDynamicTable: lambda h, st: drop_dynamic_table(
        h.ctx, st.name, if_exists=st.if_exists
    ),
    dynamic.DescribeDynamicTable: lambda h, st: dynamic.describe_dynamic_table(h.ctx, st.name),
    tasks.CreateTask: lambda h, st: _create_task(h, st),
    tasks.AlterTask: lambda h, st: _alter_task(h, st),
    tasks.ExecuteTask: lambda h, st: _execute_task(h, st),
    tasks.DropTask: lambda h, st: _drop_task(h, st),
    tasks.DescribeTask: lambda h, st: tasks.describe_task(h.ctx, st.name),
    external.CreateConnection: lambda h, st: create_connection(
        h.ctx, st.name, st.kind, st.options, replace=st.replace, if_not_exists=st.if_not_exists
    ),
    external.DropConnection: lambda h, st: drop_connection(h.ctx, st.name, if_exists=st.if_exists),
    external.CreateExternalTable: lambda h, st: external.create_external_table(h.ctx, st),
    external.AlterExternalTable: lambda h, st: external.alter_external_table(h.ctx, st),
    external.DropExternalTable: lambda h, st: drop_external_table(
        h.ctx, st.name, if_exists=st.if_exists
    ),
    external.DescribeExternalTable: lambda h, st: external.describe_external_table(h.ctx, st.name),
}


# -- tasks ----------------------------------------------------------------------------------------


def _done(h: Handling, operation: str, name: str, message: str) -> StatementResult:
    return StatementResult(h.ctx.statement_id, operation, name.lower(), message=message)


def _create_task(h: Handling, st: tasks.CreateTask) -> StatementResult:
    h.ctx.require_no_transaction("CREATE TASK")
    for text in st.new.statements:
        s.statement_of(parse_one(text))  # a statement changelake does not run is refused now
    task_ddl.create_task(h.ctx, st.new)
    return _done(
        h,
        "CREATE TASK",
        st.new.name,
        f"Task {st.new.name} created, suspended: ALTER TASK {st.new.name} RESUME starts it.",
    )


def _alter_task(h: Handling, st: tasks.AlterTask) -> StatementResult:
    h.ctx.require_no_transaction("ALTER TASK")
    if st.if_exists and h.ctx.catalog.find_task(st.name) is None:
        return _done(h, "ALTER TASK", st.name, f"Task {st.name} does not exist; nothing done.")
    if isinstance(st.change, task_ddl.ModifyBody):
        for text in st.change.statements:
            s.statement_of(parse_one(text))
    task_ddl.alter_task(h.ctx, st.name, st.change)
    action = st.change.keyword
    return _done(h, f"ALTER TASK {action}", st.name, f"Task {st.name}: {action} done.")


def _drop_task(h: Handling, st: tasks.DropTask) -> StatementResult:
    h.ctx.require_no_transaction("DROP TASK")
    dropped = task_ddl.drop_task(h.ctx, st.name, if_exists=st.if_exists)
    message = f"Task {st.name} dropped." if dropped else f"Task {st.name} does not exist."
    return _done(h, "DROP TASK", st.name, message)


def _execute_task(h: Handling, st: tasks.ExecuteTask) -> DataFrame:
    """EXECUTE TASK: run the task's graph from it now, in this process (also without the
    service); answers the runs it made."""
    h.ctx.require_no_transaction("EXECUTE TASK")
    found = task_ddl.task(h.ctx, st.name)
    runner = Runner(
        h.ctx,
        h.ctx.env,
        run_task_body,
        holder=f"session:{new_statement_id()[:8]}",
        trigger="MANUAL",
    )
    done = run_graph(runner, found, scheduled_at=h.ctx.now())
    rows = tasks.graph_run_rows(h.ctx, done.graph_run_id)
    return h.ctx.spark.createDataFrame(rows, tasks.HISTORY_COLUMNS)


def run_task_body(env: Env, task: TaskInfo, finish: Finish) -> None:
    """How a task's statements run (a ``RunStatements``): DML and queries in one transaction
    that commits together with the run's SUCCEEDED row; a single other statement (DDL, OPTIMIZE,
    ALTER DYNAMIC TABLE ... REFRESH) on its own, then the row."""
    texts = task.definition.statements
    slot = TransactionSlot()
    if len(texts) == 1 and not tasks.transactional(texts[0]):
        execute(env, texts[0], transactions=slot)
        env.catalog.commit([finish(new_statement_id())], clock=env.clock)
        return
    slot.current = Transaction(snapshot=env.catalog.snapshot())
    for text in texts:
        result = execute(env, text, transactions=slot)
        if isinstance(parse_one(text), exp.Query):
            with spark_errors(_label(text, parse_one(text))):
                result.write.format("noop").mode("overwrite").save()  # run it, for its errors
    txn = slot.current
    first = txn.staged[0].statement_id if txn.staged else new_statement_id()
    env.catalog.commit([*txn.staged, finish(first)], clock=env.clock)
