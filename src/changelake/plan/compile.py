"""Compiling IR trees to one relation (SQL text over the reads), one function per node type.

A compiled node has one column per output column (named by its internal id), ``_cl_vrid`` (the
row's ROW_ID as the view defines it) and, below a ``Delta`` leaf, ``_cl_vact`` (INSERT or
DELETE). ROW_IDs: a base row's own; through filters and projections unchanged; through a join the
hash of both sides' ids; through a UNION ALL branch prefixed with the branch's tag. Both the
incremental and the recompute-and-diff plan compile through here, so their ids agree.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

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
from changelake.spark.relation import Relation, leaves_of

VIEW_ROW_ID = "_cl_vrid"
VIEW_ACTION = "_cl_vact"

# A leaf's rows: the scan's table columns by their names in the table, VIEW_ROW_ID, and
# VIEW_ACTION for a Delta.
Leaf = Callable[[At | Delta | Scan], Relation]

_ctes = itertools.count()


def compile_node(node: Node, leaf: Leaf) -> Relation:
    """``node`` as one relation, reading its leaves through ``leaf``."""
    if isinstance(node, Scan | At | Delta):
        return _leaf(node, leaf)
    if isinstance(node, Filter):
        return compile_node(node.child, leaf).where(node.condition)
    if isinstance(node, Project):
        rel = compile_node(node.child, leaf)
        outputs = [f"({e}) AS {c.id}" for c, e in zip(node.outputs, node.expressions, strict=True)]
        return rel.select(*outputs, *_hidden(rel))
    if isinstance(node, Branch):
        rel = compile_node(node.child, leaf)
        return _replaced(rel, VIEW_ROW_ID, f"concat('{node.tag}', {VIEW_ROW_ID})")
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
        return _replaced(compile_node(node.child, leaf), VIEW_ACTION, f"'{node.action}'")
    if isinstance(node, Regroup):
        return _regroup(node, leaf)
    raise TypeError(f"cannot compile {type(node).__name__}")


def _replaced(rel: Relation, name: str, expression: str) -> Relation:
    """``rel`` with the column ``name`` (added if missing) computed by ``expression``."""
    items = [f"{expression} AS {name}" if c == name else quoted(c) for c in rel.columns]
    if name not in rel.columns:
        items.append(f"{expression} AS {name}")
    return rel.select(*items)


def _hidden(rel: Relation) -> list[str]:
    return [VIEW_ROW_ID, *_action(rel)]


def _action(rel: Relation) -> list[str]:
    return [VIEW_ACTION] if VIEW_ACTION in rel.columns else []


def _leaf(node: Scan | At | Delta, leaf: Leaf) -> Relation:
    scan = node if isinstance(node, Scan) else node.scan
    rel = leaf(node)
    columns = [f"{quoted(s)} AS {c.id}" for s, c in zip(scan.sources, scan.columns, strict=True)]
    return rel.select(*columns, *_hidden(rel))


def _pair_id_sql(left: str, right: str) -> str:
    """The ROW_ID of a joined row: a hash of both sides' ids (SQL text over the two id columns,
    or NULL), a marker for a NULL side."""
    return f"md5(concat(coalesce({left}, '∅'), '|', coalesce({right}, '∅')))"


def _join(node: Join, leaf: Leaf) -> Relation:
    left = _replaced_id(compile_node(node.left, leaf), "_cl_lrid")
    right = _replaced_id(compile_node(node.right, leaf), "_cl_rrid")
    filtering = node.kind in (JoinKind.SEMI, JoinKind.ANTI)  # the left side's rows only
    action = [f"_l.{VIEW_ACTION}"] if VIEW_ACTION in left.columns else []
    if VIEW_ACTION in right.columns and not filtering:
        if action:
            raise TypeError("a join of two changes has no one action")
        action = [f"_r.{VIEW_ACTION}"]
    rid = "_cl_lrid" if filtering else _pair_id_sql("_cl_lrid", "_cl_rrid")
    outputs = [c.id for c in node.columns]
    if node.kind is JoinKind.CROSS and node.condition is None:
        how = "cross"
    else:
        how = "inner" if node.kind is JoinKind.CROSS else node.kind.value
    columns = [*outputs, f"{rid} AS {VIEW_ROW_ID}", *action]
    return left.join(right, node.condition or "TRUE", how, columns=columns)


def _replaced_id(rel: Relation, name: str) -> Relation:
    return rel.select(*[f"{VIEW_ROW_ID} AS {name}" if c == VIEW_ROW_ID else c for c in rel.columns])


def _pad(node: Pad, leaf: Leaf) -> Relation:
    rel = compile_node(node.child, leaf)
    nulls = [f"NULL AS {c.id}" for c in node.nulls]
    own = [c.id for c in node.child.columns]
    if node.side == "left":
        rid = f"{_pair_id_sql(VIEW_ROW_ID, 'NULL')} AS {VIEW_ROW_ID}"
        return rel.select(*own, *nulls, rid, *_action(rel))
    rid = f"{_pair_id_sql('NULL', VIEW_ROW_ID)} AS {VIEW_ROW_ID}"
    return rel.select(*nulls, *own, rid, *_action(rel))


def _union(node: Union, leaf: Leaf) -> Relation:
    left = compile_node(node.left, leaf)
    right = compile_node(node.right, leaf)
    renamed = [
        f"{b.id} AS {a.id}" for a, b in zip(node.left.columns, node.right.columns, strict=True)
    ]
    return left.union(right.select(*renamed, *_hidden(right)))


def _grouped(node: Aggregate, rel: Relation) -> Relation:
    """The aggregate of ``rel`` (the child's rows); a group's ROW_ID hashes its keys."""
    if VIEW_ACTION in rel.columns:
        raise TypeError("an aggregate's input must be a state, not changes")
    keys = [f"{e} AS {c.id}" for c, e in zip(node.keys, node.key_expressions, strict=True)]
    values = [f"{e} AS {c.id}" for c, e in zip(node.values, node.value_expressions, strict=True)]
    ids = [c.id for c in node.columns]
    if not values:
        text = f"SELECT DISTINCT {', '.join(keys)} FROM {{child}} AS _g"
    elif keys:
        grouping = ", ".join(node.key_expressions)
        text = f"SELECT {', '.join([*keys, *values])} FROM {{child}} AS _g GROUP BY {grouping}"
    else:
        text = f"SELECT {', '.join(values)} FROM {{child}} AS _g"
    out = Relation.query(
        text, [*[c.id for c in node.keys], *[c.id for c in node.values]], child=rel
    )
    # to_json tells NULL from '' and 1 from '1'; the keys are named by position, not by the
    # plan's internal ids, so one grouping has one ROW_ID however the query was built (over a
    # view or over a dynamic table of it); no keys: one group, one id
    rid = group_row_id([c.id for c in node.keys])
    return out.select(*ids, f"{rid} AS {VIEW_ROW_ID}")


def group_row_id(keys: list[str]) -> str:
    """The ROW_ID of the group with these key values (SQL text over the key columns, in GROUP BY
    order)."""
    if not keys:
        return "md5('')"
    fields = ", ".join(f"'k{i}', {k}" for i, k in enumerate(keys))
    return f"md5(to_json(named_struct({fields})))"


def _windowed(node: Window, rel: Relation) -> Relation:
    """The window functions over ``rel`` (the child's rows); rows keep their ids."""
    if VIEW_ACTION in rel.columns:
        raise TypeError("a window's input must be a state, not changes")
    outputs = [f"{e} AS {c.id}" for c, e in zip(node.outputs, node.expressions, strict=True)]
    return rel.select(*[c.id for c in node.child.columns], *outputs, VIEW_ROW_ID)


def _regroup(node: Regroup, leaf: Leaf) -> Relation:
    """The touched groups at the start, their input rows read once, and at the end: the same
    rows with the input's net changes applied (a deleted or updated row leaves by ROW_ID, and
    the inserted rows join), so the input is not read a second time. The net changes and the
    start rows are named once (a CTE each) and used twice."""
    stateful = node.stateful
    columns = [c.id for c in stateful.child.columns]
    n = next(_ctes)
    net_name, start_name = f"_cl_net{n}", f"_cl_start{n}"
    net_rel = net_changes(compile_node(node.delta, leaf), stateful.child.columns)
    before_rows = at(stateful.child, End.START)
    if node.bounded is not None:
        before_rows = keyed(before_rows, *node.bounded)
    start_rel = compile_node(before_rows, leaf)
    net = Relation(f"SELECT * FROM {net_name}", net_rel.columns)
    start = Relation(f"SELECT * FROM {start_name}", start_rel.columns)
    if node.keys:
        keys = list(node.keys)
        touched = net.select(*[f"{e} AS _cl_t{i}" for i, e in enumerate(keys)])
        touched = Relation.query("SELECT DISTINCT * FROM {t} AS _t", touched.columns, t=touched)
        with_keys = start.select("*", *[f"{e} AS _cl_k{i}" for i, e in enumerate(keys)])
        cond = " AND ".join(f"_l._cl_k{i} <=> _r._cl_t{i}" for i in range(len(keys)))
        start = with_keys.join(touched, cond, "left_semi", columns=[*columns, VIEW_ROW_ID])
    gone = net.where(f"{VIEW_ACTION} = 'DELETE'").select(f"{VIEW_ROW_ID} AS _cl_gone")
    kept = start.join(gone, f"_l.{VIEW_ROW_ID} = _r._cl_gone", "left_anti")
    end = kept.union(net.where(f"{VIEW_ACTION} = 'INSERT'").select(*columns, VIEW_ROW_ID))
    apply = _grouped if isinstance(stateful, Aggregate) else _windowed
    before = _replaced(apply(stateful, start), VIEW_ACTION, "'DELETE'")  # type: ignore[arg-type]
    after = _replaced(apply(stateful, end), VIEW_ACTION, "'INSERT'")  # type: ignore[arg-type]
    both = before.union(after)
    text = (
        f"WITH {net_name} AS ({net_rel.sql}), {start_name} AS ({start_rel.sql})"
        f" SELECT * FROM ({both.sql}) AS _rg"
    )
    return Relation(text, both.columns, leaves_of({"n": net_rel, "s": start_rel, "b": both}))


def net_changes(signed: Relation, columns: tuple[Col, ...]) -> Relation:
    """The minimum delta of a redundant one: per ROW_ID and values, inserts minus deletes, as
    that many rows with ACTION INSERT (or DELETE)."""
    ids = [c.id for c in columns]
    grouped = ", ".join([VIEW_ROW_ID, *ids])
    sign = f"CASE WHEN {VIEW_ACTION} = 'INSERT' THEN 1 ELSE -1 END"
    net = Relation.query(
        f"SELECT {grouped}, sum({sign}) AS _cl_net FROM {{s}} AS _n GROUP BY {grouped}",
        [VIEW_ROW_ID, *ids, "_cl_net"],
        s=signed,
    )
    repeated = "explode(array_repeat(0, CAST(abs(_cl_net) AS INT))) AS _cl_n"
    rows = net.where("_cl_net != 0").select("*", repeated)
    action = f"CASE WHEN _cl_net > 0 THEN 'INSERT' ELSE 'DELETE' END AS {VIEW_ACTION}"
    return rows.select(*ids, VIEW_ROW_ID, action)
