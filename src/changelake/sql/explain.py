"""EXPLAIN: the change-scan plans of a query (shape, files and rows per side), then Spark's plan."""

from __future__ import annotations

from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.changes.query import plan_interval, resolve_interval
from changelake.dialect.dynamic import AlterDynamicTableSyntax
from changelake.dml.merge import plan_merge
from changelake.dml.modify import plan_delete, plan_update
from changelake.dynamic.dag import dynamic_table, in_order
from changelake.dynamic.refresh import explain_refresh
from changelake.plan.bind import Binder
from changelake.plan.points import changes_clause
from changelake.plan.streams import stream_plan_lines
from changelake.plan.views import view_changes
from changelake.runtime.env import Context
from changelake.spark.relation import plan_lines
from changelake.sql.statements import Delete, Merge, Statement, Update, statement_of


def change_plans(ctx: Context, tree: exp.Expression) -> list[str]:
    """The plan of every change scan (CHANGES clause on a table or view, or a stream) in
    ``tree``, from metadata, as lines."""
    lines: list[str] = []
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue
        changes = table.args.get("changes")
        if changes is not None and ctx.catalog.view_sql(table.name) is not None:
            information, start, end = changes_clause(ctx.spark, changes)
            _, plan = view_changes(ctx, table.name, start=start, end=end, information=information)
            lines += plan.lines()
        elif changes is not None:
            info = ctx.table(table.name)
            information, start, end = changes_clause(ctx.spark, changes)
            first, last = resolve_interval(ctx, info, start=start, end=end)
            lines += plan_interval(
                ctx.catalog, info, start=first, end=last, information=information
            ).lines()
        elif ctx.catalog.find_stream(table.name) is not None:
            lines += stream_plan_lines(ctx, table.name)
    return lines


def explain(ctx: Context, tree: exp.Expression) -> DataFrame:
    if isinstance(tree, AlterDynamicTableSyntax) and tree.args["action"] == "REFRESH":
        order, definitions = in_order(ctx, [dynamic_table(ctx, tree.this.name)])
        lines = explain_refresh(ctx, order, definitions)
        return ctx.spark.createDataFrame([(line,) for line in lines], "plan string")
    if isinstance(tree, exp.Update | exp.Delete | exp.Merge):
        lines = _write_plan(ctx, statement_of(tree))
        return ctx.spark.createDataFrame([(line,) for line in lines], "plan string")
    lines = change_plans(ctx, tree)
    df = Binder(ctx).query(tree)
    lines += plan_lines(df)
    return ctx.spark.createDataFrame([(line,) for line in lines], "plan string")


def _write_plan(ctx: Context, statement: Statement) -> list[str]:
    """EXPLAIN UPDATE / DELETE / MERGE: how the write reads its target, and Spark's plan of that
    read."""
    if isinstance(statement, Update):
        return plan_update(ctx, statement)[0].explain("UPDATE")
    if isinstance(statement, Merge):
        return plan_merge(ctx, statement)[0].explain("MERGE")
    assert isinstance(statement, Delete)
    if statement.condition is None and not statement.using:
        return [f"DELETE {statement.table.name}: removes every file (no Spark job)"]
    return plan_delete(ctx, statement).explain("DELETE")
