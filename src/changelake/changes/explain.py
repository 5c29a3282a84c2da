"""EXPLAIN of a query: the Spark plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from changelake.sql.dialect import parse_one
from changelake.sql.resolve import Resolver

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from changelake.session import Session


def explain(session: Session, text: str) -> DataFrame:
    df = Resolver(session).query(parse_one(text))
    plan = df._jdf.queryExecution().toString()
    return session.spark.createDataFrame([(plan,)], "plan string")
