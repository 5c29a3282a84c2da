"""Statement dispatch: parse one statement into its typed value, run its handler, return a
DataFrame."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from changelake.catalog import Catalog
from changelake.catalog.model import TaskInfo
from changelake.changelog.apply import apply_statement
from changelake.changelog.export import FileFormat, export  # export (COPY INTO)
from changelake.clock import Clock
from changelake.dialect import parse_one, to_spark
from changelake.dml.insert import insert
from changelake.dml.merge import merge
from changelake.dml.modify import delete, update
from changelake.dml.result import StatementResult
from changelake.dynamic import tasks as task_ddl
from changelake.dynamic.create import (
    alter_dynamic_table,
    create_dynamic_table,
    drop_dynamic_table,
)
from changelake.dynamic.scheduler import Resources
from changelake.dynamic.task_run import Finish, Runner, RunStatements, run_graph
from changelake.errors import TransactionError
from changelake.external import scope
from changelake.external.objects import create_connection, drop_connection, drop_external_table
from changelake.plan.bind import Binder
from changelake.sql import apply, ddl, dynamic, external, show, tasks
from changelake.sql import statements as s
from changelake.sql.explain import explain
from changelake.sql.streams import create_stream, describe_stream, show_streams
from changelake.sql.table_functions import expand_table_functions
from changelake.storage.maintenance import optimize, vacuum
from changelake.storage.spark_errors import spark_errors
from changelake.storage.warehouse import Warehouse
from changelake.txn.context import StatementContext, new_statement_id
from changelake.txn.transaction import Transaction, TransactionSlot


@dataclass(frozen=True)
class Env:
    """What a statement handler works with; BEGIN, COMMIT and ROLLBACK change ``transactions``."""

    ctx: StatementContext
    spark: SparkSession
    warehouse: Warehouse
    transactions: TransactionSlot

    @property
    def io(self) -> tuple[StatementContext, SparkSession, Warehouse]:
        return self.ctx, self.spark, self.warehouse


def execute(
    text: str,
    *,
    spark: SparkSession,
    warehouse: Warehouse,
    catalog: Catalog,
    clock: Clock,
    transactions: TransactionSlot,
) -> DataFrame:
    """Run one statement, inside the open transaction of ``transactions`` if there is one."""
    tree = parse_one(text)
    statement = s.statement_of(tree)
    ctx = StatementContext(catalog, clock, transactions.current)
    env = Env(ctx, spark, warehouse, transactions)
    with spark_errors(_label(text, tree)):
        reads = _dependent_query(statement)
        if reads is not None:
            scope.widen_for(catalog, clock, spark, warehouse, reads)
        result = HANDLERS[type(statement)](env, statement)
        if reads is not None or isinstance(statement, _DEPENDENTS_GO):
            scope.settle(catalog, clock, spark, warehouse)
    return result.to_dataframe(spark) if isinstance(result, StatementResult) else result


def execute_on(resources: Resources, text: str, transactions: TransactionSlot) -> DataFrame:
    """``execute`` with a service's session (its Spark, warehouse, catalog and clock)."""
    r = resources
    return execute(
        text,
        spark=r.spark,
        warehouse=r.warehouse,
        catalog=r.catalog,
        clock=r.clock,
        transactions=transactions,
    )


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


def _query(env: Env, stmt: s.Query) -> DataFrame:
    binder = Binder(*env.io)
    return binder.query(expand_table_functions(binder, stmt.tree.copy()))


def _begin(env: Env, _: s.Begin) -> StatementResult:
    if env.transactions.current is not None:
        raise TransactionError("A transaction is already open; COMMIT or ROLLBACK it first.")
    env.transactions.current = Transaction(snapshot=env.ctx.catalog.snapshot())
    return StatementResult(env.ctx.statement_id, "BEGIN", "", message="Transaction started.")


def _end(env: Env, *, commit: bool) -> dict[int, list[int]]:
    txn = env.transactions.current
    if txn is None:
        raise TransactionError(
            f"{'COMMIT' if commit else 'ROLLBACK'} without BEGIN: no transaction is open."
        )
    env.transactions.current = None
    if not commit or not txn.staged:
        return {}
    # The catalog checks every requirement before it applies any update: a later statement's
    # requirements hold against the state the transaction read, not its own earlier writes.
    return env.ctx.catalog.commit(txn.staged, clock=env.ctx.clock).versions


def _commit(env: Env, _: s.Commit) -> StatementResult:
    versions = _end(env, commit=True)
    made = ", ".join(f"table {t} -> version {v[-1]}" for t, v in versions.items())
    return StatementResult(env.ctx.statement_id, "COMMIT", "", message=f"Committed. {made}".strip())


def _rollback(env: Env, _: s.Rollback) -> StatementResult:
    _end(env, commit=False)
    return StatementResult(env.ctx.statement_id, "ROLLBACK", "", message="Rolled back.")


def _optimize(env: Env, stmt: s.Optimize) -> StatementResult:
    env.ctx.require_no_transaction("OPTIMIZE")
    done = optimize(*env.io, stmt.table)
    message = (
        f"Compacted {done.files_removed} file(s) into {done.files_added}."
        if done.version is not None
        else "Nothing to compact."
    )
    return StatementResult(
        env.ctx.statement_id, "OPTIMIZE", stmt.table.lower(), done.version, message=message
    )


def _vacuum(env: Env, stmt: s.Vacuum) -> StatementResult:
    env.ctx.require_no_transaction("VACUUM")
    done = vacuum(env.ctx, env.warehouse, stmt.table)
    return StatementResult(
        env.ctx.statement_id,
        "VACUUM",
        stmt.table.lower(),
        message=f"Removed {done.files_removed} expired file(s) and {done.orphans_removed} orphan"
        f" file(s); readable from version {done.readable_from_version}.",
    )


_SHOW: dict[str, Callable[[Env, s.Show], DataFrame]] = {
    "TABLES": lambda env, _: show.show_tables(env.ctx, env.spark),
    "VIEWS": lambda env, _: show.show_views(env.ctx, env.spark),
    "STREAMS": lambda env, _: show_streams(env.ctx, env.spark),
    "CHANNELS": lambda env, st: show.show_channels(env.ctx, env.spark, st.table),
    "INTERNAL TABLES": lambda env, st: show.show_internal_tables(env.ctx, env.spark, st.table),
    "DYNAMIC TABLES": lambda env, _: dynamic.show_dynamic_tables(env.ctx, env.spark),
    "TASKS": lambda env, _: tasks.show_tasks(env.ctx, env.spark),
    "CONNECTIONS": lambda env, _: external.show_connections(env.ctx, env.spark),
    "EXTERNAL TABLES": lambda env, _: external.show_external_tables(env.ctx, env.spark),
}

HANDLERS: dict[type, Callable[[Env, Any], DataFrame | StatementResult]] = {
    s.Query: _query,
    s.Insert: lambda env, st: insert(
        *env.io, table=st.table, columns=st.columns, source=st.source, overwrite=st.overwrite
    ),
    s.Update: lambda env, st: update(
        *env.io,
        table=st.table,
        assignments=st.assignments,
        source=st.source,
        condition=st.condition,
    ),
    s.Delete: lambda env, st: delete(
        *env.io, table=st.table, using=st.using, condition=st.condition
    ),
    s.Merge: lambda env, st: merge(
        *env.io, table=st.table, source=st.source, on=st.on, whens=st.whens
    ),
    s.CreateTable: lambda env, st: ddl.create_table(*env.io, st),
    s.CreateView: lambda env, st: ddl.create_view(*env.io, st),
    s.CreateStream: lambda env, st: create_stream(*env.io, st),
    s.Drop: lambda env, st: ddl.drop(env.ctx, st),
    s.AlterTable: lambda env, st: ddl.alter(env.ctx, st),
    s.Truncate: lambda env, st: ddl.truncate(env.ctx, st),
    s.DescribeTable: lambda env, st: show.describe_table(env.ctx, env.spark, st.table),
    s.DescribeHistory: lambda env, st: show.describe_history(env.ctx, env.spark, st.table),
    s.DescribeStream: lambda env, st: describe_stream(env.ctx, env.spark, st.stream),
    s.Show: lambda env, st: _SHOW[st.kind](env, st),
    s.Begin: _begin,
    s.Commit: _commit,
    s.Rollback: _rollback,
    s.Optimize: _optimize,
    s.Vacuum: _vacuum,
    s.Explain: lambda env, st: explain(*env.io, st.tree),
    apply.ApplyChanges: lambda env, st: apply_statement(*env.io, st.spec, st.source),
    # -- export (COPY INTO) --
    s.Export: lambda env, st: export(
        *env.io, st.query, path=st.path, file_format=FileFormat.parse(st.file_format)
    ).to_dataframe(env.spark),
    # -- end export --
    dynamic.CreateDynamicTable: lambda env, st: create_dynamic_table(*env.io, st.new),
    dynamic.AlterDynamicTable: lambda env, st: alter_dynamic_table(
        *env.io, st.name, st.action, st.options
    ),
    dynamic.DropDynamicTable: lambda env, st: drop_dynamic_table(
        env.ctx, st.name, if_exists=st.if_exists
    ),
    dynamic.DescribeDynamicTable: lambda env, st: dynamic.describe_dynamic_table(
        env.ctx, env.spark, st.name
    ),
    tasks.CreateTask: lambda env, st: _create_task(env, st),
    tasks.AlterTask: lambda env, st: _alter_task(env, st),
    tasks.ExecuteTask: lambda env, st: _execute_task(env, st),
    tasks.DropTask: lambda env, st: _drop_task(env, st),
    tasks.DescribeTask: lambda env, st: tasks.describe_task(env.ctx, env.spark, st.name),
    external.CreateConnection: lambda env, st: create_connection(
        env.ctx, st.name, st.kind, st.options, replace=st.replace, if_not_exists=st.if_not_exists
    ),
    external.DropConnection: lambda env, st: drop_connection(
        env.ctx, st.name, if_exists=st.if_exists
    ),
    external.CreateExternalTable: lambda env, st: external.create_external_table(*env.io, st),
    external.AlterExternalTable: lambda env, st: external.alter_external_table(*env.io, st),
    external.DropExternalTable: lambda env, st: drop_external_table(
        env.ctx, st.name, if_exists=st.if_exists
    ),
    external.DescribeExternalTable: lambda env, st: external.describe_external_table(
        env.ctx, env.spark, st.name
    ),
}


# -- tasks ----------------------------------------------------------------------------------------


def _done(env: Env, operation: str, name: str, message: str) -> StatementResult:
    return StatementResult(env.ctx.statement_id, operation, name.lower(), message=message)


def _create_task(env: Env, st: tasks.CreateTask) -> StatementResult:
    env.ctx.require_no_transaction("CREATE TASK")
    for text in st.new.statements:
        s.statement_of(parse_one(text))  # a statement changelake does not run is refused now
    task_ddl.create_task(env.ctx, st.new)
    return _done(
        env,
        "CREATE TASK",
        st.new.name,
        f"Task {st.new.name} created, suspended: ALTER TASK {st.new.name} RESUME starts it.",
    )


def _alter_task(env: Env, st: tasks.AlterTask) -> StatementResult:
    env.ctx.require_no_transaction("ALTER TASK")
    if st.if_exists and env.ctx.catalog.find_task(st.name) is None:
        return _done(env, "ALTER TASK", st.name, f"Task {st.name} does not exist; nothing done.")
    for text in st.args.get("body") or ():
        s.statement_of(parse_one(text))
    task_ddl.alter_task(env.ctx, st.name, st.action, st.args)
    return _done(env, f"ALTER TASK {st.action}", st.name, f"Task {st.name}: {st.action} done.")


def _drop_task(env: Env, st: tasks.DropTask) -> StatementResult:
    env.ctx.require_no_transaction("DROP TASK")
    dropped = task_ddl.drop_task(env.ctx, st.name, if_exists=st.if_exists)
    message = f"Task {st.name} dropped." if dropped else f"Task {st.name} does not exist."
    return _done(env, "DROP TASK", st.name, message)


def _execute_task(env: Env, st: tasks.ExecuteTask) -> DataFrame:
    """EXECUTE TASK: run the task's graph from it now, in this process (also without the
    service); answers the runs it made."""
    env.ctx.require_no_transaction("EXECUTE TASK")
    found = task_ddl.task(env.ctx, st.name)
    runner = Runner(
        env.ctx,
        env.spark,
        body_runner(env.spark, env.warehouse, env.ctx.catalog, env.ctx.clock),
        holder=f"session:{new_statement_id()[:8]}",
        trigger="MANUAL",
    )
    done = run_graph(runner, found, scheduled_at=env.ctx.now())
    rows = tasks.graph_run_rows(env.ctx, done.graph_run_id)
    return env.spark.createDataFrame(rows, tasks.HISTORY_COLUMNS)


def body_runner(
    spark: SparkSession, warehouse: Warehouse, catalog: Catalog, clock: Clock
) -> RunStatements:
    """How a task's statements run: DML and queries in one transaction that commits together
    with the run's SUCCEEDED row; a single other statement (DDL, OPTIMIZE, ALTER DYNAMIC TABLE
    ... REFRESH) on its own, then the row."""

    def run(task: TaskInfo, finish: Finish) -> None:
        texts = task.definition.statements
        slot = TransactionSlot()
        if len(texts) == 1 and not tasks.transactional(texts[0]):
            execute(
                texts[0],
                spark=spark,
                warehouse=warehouse,
                catalog=catalog,
                clock=clock,
                transactions=slot,
            )
            catalog.commit([finish(new_statement_id())], clock=clock)
            return
        slot.current = Transaction(snapshot=catalog.snapshot())
        for text in texts:
            result = execute(
                text,
                spark=spark,
                warehouse=warehouse,
                catalog=catalog,
                clock=clock,
                transactions=slot,
            )
            if isinstance(parse_one(text), exp.Query):
                with spark_errors(_label(text, parse_one(text))):
                    result.write.format("noop").mode("overwrite").save()  # run it, for its errors
        txn = slot.current
        first = txn.staged[0].statement_id if txn.staged else new_statement_id()
        catalog.commit([*txn.staged, finish(first)], clock=clock)

    return run
