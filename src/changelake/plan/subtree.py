"""The rows and the changes of a query's subtree with every base table at given versions: what
dynamic tables read (a full refresh's rows, an aggregate's input changes)."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame

from changelake.catalog.model import TableInfo
from changelake.changes.columns import METADATA_ROW_ID
from changelake.plan.compile import VIEW_ROW_ID, compile_node
from changelake.plan.delta import derive
from changelake.plan.ir import End, Node, at
from changelake.plan.views import Leaves, Versions
from changelake.runtime.env import Context
from changelake.schema import quoted
from changelake.spark.relation import Relation
from changelake.storage.pruning import Narrowing


def input_changes(
    ctx: Context,
    node: Node,
    versions: Versions,
) -> tuple[Relation, Node] | None:
    """The (redundant) changes of the subtree ``node`` over the interval and its derivative, or
    None if no table it reads changed: its columns by internal id, RID and ACTION."""
    leaves = Leaves(ctx, versions, None)
    derivative = derive(node, changed=leaves.changed)
    if derivative is None:
        return None
    return compile_node(derivative, leaves.read), derivative


def node_rows(
    ctx: Context,
    node: Node,
    versions: dict[int, tuple[TableInfo, int]],
    narrowed: Mapping[int, Narrowing] | None = None,
) -> Relation:
    """The rows of the subtree ``node`` with each base table at the given version: its columns
    by internal id, and RID; of the tables ``narrowed`` names, only the rows it keeps (and the
    files that may hold them)."""
    at_versions = {t: (info, v, v) for t, (info, v) in versions.items()}
    read = Leaves(ctx, at_versions, None, narrowed).read
    return compile_node(at(node, End.START), read)


def rows_at(
    ctx: Context,
    tree: Node,
    versions: dict[int, tuple[TableInfo, int]],
) -> DataFrame:
    """The rows of query ``tree`` with each base table at the given version, with their
    METADATA$ROW_ID (a dynamic table's full refresh)."""
    rel = node_rows(ctx, tree, versions)
    names = [f"{quoted(c.id)} AS {quoted(c.name)}" for c in tree.columns]
    return rel.select(*names, f"{VIEW_ROW_ID} AS {quoted(METADATA_ROW_ID)}").frame(ctx.spark)
