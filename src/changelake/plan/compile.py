"""Compiling IR trees to Spark DataFrames, one function per node type.

A compiled node has one column per output column (named by its internal id), ``_cl_vrid`` (the
row's ROW_ID as the view defines it) and, below a ``Delta`` leaf, ``_cl_vact`` (INSERT or
DELETE). ROW_IDs: a base row's own; through filters and projections unchanged; through a join the
hash of both sides' ids; through a UNION ALL branch prefixed with the branch's tag. Both the
incremental and the recompute-and-diff plan compile through here, so their ids agree.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from changelake.plan.ir import (
    At,
    Branch,
    Delta,
    Filter,
    Join,
    JoinKind,
    Node,
    Project,
    Scan,
    Union,
)

RID = "_cl_vrid"
ACTION = "_cl_vact"

# A leaf's rows: the scan's table columns by their names in the table, RID, and ACTION for a Delta.
Leaf = Callable[[At | Delta | Scan], DataFrame]


def compile_node(node: Node, leaf: Leaf) -> DataFrame:
    """``node`` as a lazy DataFrame, reading its leaves through ``leaf``."""
    if isinstance(node, Scan | At | Delta):
        return _leaf(node, leaf)
    if isinstance(node, Filter):
        return compile_node(node.child, leaf).where(F.expr(node.condition))
    if isinstance(node, Project):
        df = compile_node(node.child, leaf)
        outputs = [
            F.expr(e).alias(c.id) for c, e in zip(node.outputs, node.expressions, strict=True)
        ]
        return df.select(*outputs, *_hidden(df))
    if isinstance(node, Branch):
        df = compile_node(node.child, leaf)
        return df.withColumn(RID, F.concat(F.lit(node.tag), F.col(RID)))
    if isinstance(node, Join):
        return _join(node, leaf)
    if isinstance(node, Union):
        return _union(node, leaf)
    raise TypeError(f"cannot compile {type(node).__name__}")


def _hidden(df: DataFrame) -> list[Column]:
    return [F.col(RID)] + ([F.col(ACTION)] if ACTION in df.columns else [])


def _leaf(node: Scan | At | Delta, leaf: Leaf) -> DataFrame:
    scan = node if isinstance(node, Scan) else node.scan
    df = leaf(node)
    columns = [F.col(f"`{s}`").alias(c.id) for s, c in zip(scan.sources, scan.columns, strict=True)]
    return df.select(*columns, *_hidden(df))


def _join(node: Join, leaf: Leaf) -> DataFrame:
    left = compile_node(node.left, leaf).withColumnRenamed(RID, "_cl_lrid")
    right = compile_node(node.right, leaf).withColumnRenamed(RID, "_cl_rrid")
    if node.kind is JoinKind.CROSS and node.condition is None:
        joined = left.crossJoin(right)
    else:
        joined = left.join(right, F.expr(node.condition or "TRUE"), "inner")
    rid = F.md5(F.concat_ws("|", F.col("_cl_lrid"), F.col("_cl_rrid")))
    outputs = [F.col(c.id) for c in node.columns]
    action = [F.col(ACTION)] if ACTION in joined.columns else []
    return joined.select(*outputs, rid.alias(RID), *action)


def _union(node: Union, leaf: Leaf) -> DataFrame:
    left = compile_node(node.left, leaf)
    right = compile_node(node.right, leaf)
    renamed = [
        F.col(b.id).alias(a.id) for a, b in zip(node.left.columns, node.right.columns, strict=True)
    ]
    return left.unionByName(right.select(*renamed, *_hidden(right)))
