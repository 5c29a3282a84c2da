"""EXPLAIN: the change-scan plans of a query (shape, files and rows per side), then Spark's plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from changelake.changes.plan import ChangePlan
from changelake.changes.query import interval_of_clause, plan_interval
from changelake.sql.dialect import parse_one
from changelake.sql.resolve import Resolver

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from changelake.session import Session


def change_plans(session: Session, tree: exp.Expression) -> list[ChangePlan]:
    """The plan of every change scan (CHANGES clause or stream) in ``tree``, from metadata."""
    from changelake.streams.frontier import stream_plan

    plans = []
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue
        changes = table.args.get("changes")
        if changes is not None:
            info = session.catalog.table(table.name)
            start, end, information = interval_of_clause(session, info, changes)
            plans.append(plan_interval(session, info, start=start, end=end, information=information))
        elif session.catalog.find_stream(table.name) is not None:
            plans.append(stream_plan(session, table.name)[2])
    return plans


def explain(session: Session, text: str) -> DataFrame:
    tree = parse_one(text)
    lines = [plan.describe() for plan in change_plans(session, tree)]
    df = Resolver(session).query(tree)
    lines += df._jdf.queryExecution().simpleString().splitlines()
    return session.spark.createDataFrame([(line,) for line in lines], "plan string")
