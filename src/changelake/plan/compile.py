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
    Aggregate,
    At,
    Branch,
    Col,
    Delta,
    End,
    Filter,
    Join,
    JoinKind,
    Node,
    Pad,
    Project,
    Regroup,
    Scan,
    Signed,
    Union,
    Window,
    at,
    keyed,
)
from changelake.schema import quoted
from changelake.storage import native

VIEW_ROW_ID = "_cl_vrid"
VIEW_ACTION = "_cl_vact"

# A leaf's rows: the scan's table columns by their names in the table, VIEW_ROW_ID, and
# VIEW_ACTION for a Delta.
Leaf = Callable[[At | Delta | Scan], DataFrame]


def compile_node(node: Node, leaf: Leaf) -> DataFrame:
    """``node`` as a lazy DataFrame, reading its leaves through ``leaf``."""
    if isinstance(node, Scan | At | Delta):
        return _leaf(node, leaf)
    if isinstance(node, Filter):
        return compile_node(node.child, leaf).where(F.expr(node.condition))
    if isinstance(node, Project):
        df = compile_node(node.child, leaf)
        outputs = [f"({e}) AS {c.id}" for c, e in zip(node.outputs, node.expressions, strict=True)]
        return native.select(df, [*outputs, *_hidden(df)])
    if isinstance(node, Branch):
        df = compile_node(node.child, leaf)
        return df.withColumn(VIEW_ROW_ID, F.concat(F.lit(node.tag), F.col(VIEW_ROW_ID)))
    if isinstance(node, Join):
        return _join(node, leaf)
    if isinstance(node, Union):
        return _union(node, leaf)
    if isinstance(node, Aggregate):
        return _grouped(node, compile_node(node.child, leaf))
    if isinstance(node, Window):
        return _windowed(node, compile_node(node.child, leaf))
    if isinstance(node, Pad):
        return _pad(node, leaf)
    if isinstance(node, Signed):
        return compile_node(node.child, leaf).withColumn(VIEW_ACTION, F.lit(node.action))
    if isinstance(node, Regroup):
        return _regroup(node, leaf)
    raise TypeError(f"cannot compile {type(node).__name__}")


def _hidden(df: DataFrame) -> list[str]:
    return [VIEW_ROW_ID, *_action(df)]


def _leaf(node: Scan | At | Delta, leaf: Leaf) -> DataFrame:
    scan = node if isinstance(node, Scan) else node.scan
    df = leaf(node)
    columns = [f"{quoted(s)} AS {c.id}" for s, c in zip(scan.sources, scan.columns, strict=True)]
    return native.select(df, [*columns, *_hidden(df)])


def _pair_id_sql(left: str, right: str) -> str:
    """The ROW_ID of a joined row: a hash of both sides' ids (SQL text over the two id columns,
    or NULL), a marker for a NULL side."""
    return f"md5(concat(coalesce({left}, '∅'), '|', coalesce({right}, '∅')))"


def _join(node: Join, leaf: Leaf) -> DataFrame:
    left = compile_node(node.left, leaf).withColumnRenamed(VIEW_ROW_ID, "_cl_lrid")
    right = compile_node(node.right, leaf).withColumnRenamed(VIEW_ROW_ID, "_cl_rrid")
    if node.kind is JoinKind.CROSS and node.condition is None:
        joined = left.crossJoin(right)
    else:
        how = "inner" if node.kind is JoinKind.CROSS else node.kind.value
        joined = left.join(right, F.expr(node.condition or "TRUE"), how)
    if node.kind in (JoinKind.SEMI, JoinKind.ANTI):
        rid = "_cl_lrid"
    else:
        rid = _pair_id_sql("_cl_lrid", "_cl_rrid")
    outputs = [c.id for c in node.columns]
    return native.select(joined, [*outputs, f"{rid} AS {VIEW_ROW_ID}", *_action(joined)])


def _pad(node: Pad, leaf: Leaf) -> DataFrame:
    df = compile_node(node.child, leaf)
    nulls = [f"NULL AS {c.id}" for c in node.nulls]
    own = [c.id for c in node.child.columns]
    if node.side == "left":
        return native.select(
            df,
            [*own, *nulls, f"{_pair_id_sql(VIEW_ROW_ID, 'NULL')} AS {VIEW_ROW_ID}", *_action(df)],
        )
    return native.select(
        df, [*nulls, *own, f"{_pair_id_sql('NULL', VIEW_ROW_ID)} AS {VIEW_ROW_ID}", *_action(df)]
    )


def _action(df: DataFrame) -> list[str]:
    return [VIEW_ACTION] if VIEW_ACTION in df.columns else []


def _union(node: Union, leaf: Leaf) -> DataFrame:
    left = compile_node(node.left, leaf)
    right = compile_node(node.right, leaf)
    renamed = [
        f"{b.id} AS {a.id}" for a, b in zip(node.left.columns, node.right.columns, strict=True)
    ]
    return left.unionByName(native.select(right, [*renamed, *_hidden(right)]))


def _grouped(node: Aggregate, df: DataFrame) -> DataFrame:
    """The aggregate of ``df`` (the child's rows); a group's ROW_ID hashes its keys."""
    if VIEW_ACTION in df.columns:
        raise TypeError("an aggregate's input must be a state, not changes")
    keys = [F.expr(e).alias(c.id) for c, e in zip(node.keys, node.key_expressions, strict=True)]
    values = [
        F.expr(e).alias(c.id) for c, e in zip(node.values, node.value_expressions, strict=True)
    ]
    if not values:
        out = df.select(*keys).distinct()
    elif keys:
        out = df.groupBy(*keys).agg(*values)
    else:
        out = df.agg(*values)
    # to_json tells NULL from '' and 1 from '1'; the keys are named by position, not by the
    # plan's internal ids, so one grouping has one ROW_ID however the query was built (over a
    # view or over a dynamic table of it); no keys: one group, one id
    rid = group_row_id([F.col(c.id) for c in node.keys])
    return out.select(*[F.col(c.id) for c in node.columns], rid.alias(VIEW_ROW_ID))


def group_row_id(keys: list[Column]) -> Column:
    """The ROW_ID of the group with these key values (in GROUP BY order)."""
    key_columns = [k.alias(f"k{i}") for i, k in enumerate(keys)]
    return F.md5(F.to_json(F.struct(*key_columns))) if key_columns else F.md5(F.lit(""))


def _windowed(node: Window, df: DataFrame) -> DataFrame:
    """The window functions over ``df`` (the child's rows); rows keep their ids."""
    if VIEW_ACTION in df.columns:
        raise TypeError("a window's input must be a state, not changes")
    outputs = [F.expr(e).alias(c.id) for c, e in zip(node.outputs, node.expressions, strict=True)]
    return df.select(*[F.col(c.id) for c in node.child.columns], *outputs, F.col(VIEW_ROW_ID))


def _regroup(node: Regroup, leaf: Leaf) -> DataFrame:
    """The touched groups at the start, their input rows read once, and at the end: the same
    rows with the input's net changes applied (a deleted or updated row leaves by ROW_ID, and
    the inserted rows join), so the input is not read a second time."""
    stateful = node.stateful
    columns = [F.col(c.id) for c in stateful.child.columns]
    net = net_changes(compile_node(node.delta, leaf), stateful.child.columns)
    before_rows = at(stateful.child, End.START)
    if node.bounded is not None:
        before_rows = keyed(before_rows, *node.bounded)
    start = compile_node(before_rows, leaf)
    if node.keys:
        keys = list(node.keys)
        touched = net.select(*[F.expr(e).alias(f"_cl_t{i}") for i, e in enumerate(keys)])
        with_keys = start.select("*", *[F.expr(e).alias(f"_cl_k{i}") for i, e in enumerate(keys)])
        same = [F.col(f"_cl_k{i}").eqNullSafe(F.col(f"_cl_t{i}")) for i in range(len(keys))]
        cond = same[0]
        for more in same[1:]:
            cond = cond & more
        start = with_keys.join(touched.distinct(), cond, "left_semi").select(
            *columns, F.col(VIEW_ROW_ID)
        )
    gone = net.where(F.col(VIEW_ACTION) == "DELETE").select(F.col(VIEW_ROW_ID).alias("_cl_gone"))
    kept = start.join(gone, F.col(VIEW_ROW_ID) == F.col("_cl_gone"), "left_anti")
    end = kept.unionByName(
        net.where(F.col(VIEW_ACTION) == "INSERT").select(*columns, F.col(VIEW_ROW_ID))
    )
    apply = _grouped if isinstance(stateful, Aggregate) else _windowed
    before = apply(stateful, start).withColumn(VIEW_ACTION, F.lit("DELETE"))  # type: ignore[arg-type]
    after = apply(stateful, end).withColumn(VIEW_ACTION, F.lit("INSERT"))  # type: ignore[arg-type]
    return before.unionByName(after)


def net_changes(signed: DataFrame, columns: tuple[Col, ...]) -> DataFrame:
    """The minimum delta of a redundant one: per ROW_ID and values, inserts minus deletes, as
    that many rows with ACTION INSERT (or DELETE)."""
    ids = [F.col(c.id) for c in columns]
    sign = F.when(F.col(VIEW_ACTION) == "INSERT", 1).otherwise(-1)
    net = signed.groupBy(F.col(VIEW_ROW_ID), *ids).agg(F.sum(sign).alias("_cl_net"))
    repeated = F.explode(F.array_repeat(F.lit(0), F.abs(F.col("_cl_net")).cast("int")))
    rows = net.where(F.col("_cl_net") != 0).select("*", repeated.alias("_cl_n"))
    action = F.when(F.col("_cl_net") > 0, "INSERT").otherwise("DELETE")
    return rows.select(*ids, F.col(VIEW_ROW_ID), action.alias(VIEW_ACTION))
