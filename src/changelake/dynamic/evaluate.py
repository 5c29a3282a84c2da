"""A dynamic table's query evaluated at one point, each row with its ROW_ID."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.catalog.model import TableInfo
from changelake.changes.columns import METADATA_ROW_ID
from changelake.dialect import parse_one
from changelake.dynamic.definition import Definition
from changelake.plan.bind import Binder
from changelake.plan.subtree import rows_at
from changelake.runtime.env import Context
from changelake.schema import quoted


def query_rows(
    ctx: Context,
    definition: Definition,
    versions: dict[int, tuple[TableInfo, int]],
    data_timestamp: float,
) -> DataFrame:
    """The query's rows with each table at its version in ``versions`` (the data timestamp's),
    and METADATA$ROW_ID: the view's ROW_ID when the query has an IR, else its values' hash."""
    if definition.tree is not None:
        return rows_at(ctx, definition.tree, versions)
    return _rows_by_value(ctx, definition.sql, versions, data_timestamp)


def _rows_by_value(
    ctx: Context,
    sql: str,
    versions: dict[int, tuple[TableInfo, int]],
    data_timestamp: float,
) -> DataFrame:
    """A query without differentiation rules: each row is keyed by its values and its rank
    among equal rows (its rows have no identity of their own). Tables are read at their
    versions, views at the data timestamp."""
    tree = parse_one(sql)
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    when = dt.datetime.fromtimestamp(data_timestamp).isoformat(sep=" ")
    for table in list(tree.find_all(exp.Table)):
        name = table.name.lower()
        if not name or name in ctes:
            continue
        info = ctx.catalog.find_table(name)
        point = f"VERSION => {versions[info.table_id][1]}" if info else f"TIMESTAMP => '{when}'"
        at = parse_one(f"SELECT * FROM x AT ({point})").find(exp.Table)
        assert at is not None
        table.set("when", at.args.get("when"))
    df = Binder(ctx).query(tree)
    value = F.md5(F.to_json(F.struct(*[F.col(quoted(c)) for c in df.columns])))
    rank = F.row_number().over(Window.partitionBy(value).orderBy(value))
    return df.select("*", F.concat(value, F.lit("#"), rank.cast("string")).alias(METADATA_ROW_ID))
