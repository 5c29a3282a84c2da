"""Refreshing an aggregate dynamic table from its stored state (issue 23 item 4).

For a query ``measures.shape_of`` accepts, the table stores per group its visible columns and
its state columns. An INCREMENTAL refresh differentiates only the aggregate's *input* (which reads
the changes of the tables, and what joins need), sums the signed changes per group, joins them
with the stored rows of the touched groups alone, and combines: no base row of an untouched group,
and no unchanged base row of a touched one, is read. Groups whose MIN/MAX lost its extreme (or
whose floating-point sum drifted, see ``measures``) are recomputed from their rows at the end.
The result is diffed with the touched stored rows into the minimum delta that ``apply_delta``
writes. A FULL refresh (and the creation) computes the same columns from all rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import DataType

from changelake.catalog.model import TableInfo
from changelake.changes.columns import METADATA_ACTION, METADATA_ISUPDATE, METADATA_ROW_ID
from changelake.changes.scan import PAIR_EVENTS
from changelake.dml.common import Target
from changelake.dml.keyed import STORED, UNRESOLVED, diff
from changelake.dml.matches import persisted
from changelake.dynamic.definition import Definition
from changelake.dynamic.measures import (
    Shape,
    combined,
    delta_state,
    describe,
    full_state,
    holds_extremes,
    refusal,
    shape_of,
    state_names,
)
from changelake.plan import sql_expr as S
from changelake.plan.compile import VIEW_ACTION, VIEW_ROW_ID, group_row_id
from changelake.plan.delta import formula
from changelake.plan.ir import Col, referenced, scans, source_column
from changelake.plan.ir import describe as ir_describe
from changelake.plan.subtree import input_changes, node_rows
from changelake.plan.views import Versions
from changelake.runtime.env import Context
from changelake.schema import ROW_KEY, TableSchema, quoted
from changelake.spark.local import sql_literal
from changelake.spark.relation import Relation, output_name
from changelake.storage.pruning import Narrowing
from changelake.storage.snapshot import state_relation
from changelake.storage.writer import run_checked

Ends = dict[int, tuple[TableInfo, int]]  # table id -> (table, version)
_OLD = "_cl_o_"  # prefix of a stored row's columns beside the changes of its group
_REDO, _KEEP, _HAD = "_cl_redo", "_cl_keep", "_cl_had"
# Up to this many groups to recompute, the input's files that cannot hold them are not read
RECOMPUTE_VALUES = 10_000


@dataclass(frozen=True)
class Maintained:
    """A query maintained from state: its shape, its aggregate arguments' types (by measure
    index), its aggregate values' types (by column id), and its state columns."""

    shape: Shape
    types: dict[int, DataType]
    value_types: dict[str, DataType]
    state: tuple[str, ...]

    @property
    def may_recompute(self) -> bool:
        """Whether a group may need a recompute (a MIN, MAX or floating-point sum)."""
        return holds_extremes(self.state) or any(n.endswith("_h") for n in self.state)

    @property
    def columns(self) -> tuple[Col, ...]:
        """The query's output columns."""
        top = self.shape.projects[-1] if self.shape.projects else self.shape.aggregate
        return top.columns


def maintained(
    ctx: Context,
    definition: Definition,
    ends: Ends,
) -> Maintained | None:
    """How ``definition``'s query is maintained from state, or None if it is not (its types
    are found by analysing the aggregate's input at ``ends``: no Spark job; kept per
    definitions token, as the query's binding is: the types follow from the tables' columns)."""
    shape = shape_of(definition.tree) if definition.tree is not None else None
    if shape is None:
        return None
    definitions = ctx.catalog.definitions()
    key = ("maintained types", definition.sql)
    found = definitions.get(key) if definitions is not None else None
    if found is None:
        found = _types(ctx, shape, ends)
        if definitions is not None:
            definitions.put(key, found)
    types, value_types = found
    if refusal(shape, types) is not None:
        return None
    return Maintained(shape, types, value_types, tuple(state_names(shape, types)))


def _types(
    ctx: Context, shape: Shape, ends: Ends
) -> tuple[dict[int, DataType], dict[str, DataType]]:
    """The types of ``shape``'s aggregate arguments (by measure index) and values (by column
    id), from an analysis of its input at ``ends``."""
    agg = shape.aggregate
    # one analysis gives the arguments' types (first(x) has x's) and the values' types
    arguments = [f"first({m.argument}) AS _cl_arg{m.index}" for m in shape.measures if m.argument]
    values = [
        f"{e} AS {quoted(c.id)}" for c, e in zip(agg.values, agg.value_expressions, strict=True)
    ]
    items = [*arguments, *values]
    fields = []
    if items:
        probe = node_rows(ctx, agg.child, ends)
        typed = Relation.query(f"SELECT {', '.join(items)} FROM {{p}} AS _p", [], p=probe)
        fields = typed.frame(ctx.spark).schema.fields
    types = {int(f.name[7:]): f.dataType for f in fields if f.name.startswith("_cl_arg")}
    value_types = {f.name: f.dataType for f in fields if not f.name.startswith("_cl_arg")}
    return types, value_types


def stored_state(m: Maintained | None, schema: TableSchema) -> Maintained | None:
    """``m`` if the table holds exactly its state columns (it was created or last
    reinitialized with them), else None: the table is refreshed without its state."""
    if m is None or tuple(c.name for c in schema.state) != m.state:
        return None
    return m


def aggregated_rows(m: Maintained, rows: Relation, names: list[str]) -> Relation:
    """The query's rows over the aggregate's input ``rows``, its visible columns named
    ``names``, with the state columns and METADATA$ROW_ID."""
    return _output(m, _grouped(m, rows), names)


def input_rows(ctx: Context, m: Maintained, ends: Ends) -> Relation:
    """The aggregate's input rows with each table at its version in ``ends``."""
    return node_rows(ctx, m.shape.aggregate.child, ends)


def _aggregated(m: Maintained, rows: Relation, measures: list[str]) -> Relation:
    """``measures`` (select items) of ``rows`` per group of the aggregate's keys (by id)."""
    agg = m.shape.aggregate
    keys = [f"{e} AS {quoted(c.id)}" for c, e in zip(agg.keys, agg.key_expressions, strict=True)]
    items = [*keys, *measures]
    group = f" GROUP BY {', '.join(agg.key_expressions)}" if keys else ""
    text = f"SELECT {', '.join(items)} FROM {{r}} AS _r{group}"
    return Relation.query(text, [output_name(i) for i in items], r=rows)


def _grouped(m: Maintained, rows: Relation) -> Relation:
    """Aggregate-level rows (key and value columns by id, state, RID) from input rows."""
    agg = m.shape.aggregate
    values = [
        f"{e} AS {quoted(c.id)}" for c, e in zip(agg.values, agg.value_expressions, strict=True)
    ]
    out = _aggregated(m, rows, [*values, *full_state(m.shape, m.types)])
    rid = group_row_id([c.id for c in agg.keys])
    return out.select(*[quoted(c.id) for c in agg.columns], *m.state, f"{rid} AS {VIEW_ROW_ID}")


def _output(
    m: Maintained, rel: Relation, names: list[str], passed: tuple[str, ...] = ()
) -> Relation:
    """Aggregate-level rows through the query's projections, named as the table's columns
    (and the ``passed`` columns as they were)."""
    kept = [*m.state, VIEW_ROW_ID, *map(quoted, passed)]
    for project in m.shape.projects:
        outputs = [
            f"{e} AS {quoted(c.id)}"
            for c, e in zip(project.outputs, project.expressions, strict=True)
        ]
        rel = rel.select(*outputs, *kept)
    shown = [f"{quoted(c.id)} AS {quoted(n)}" for c, n in zip(m.columns, names, strict=True)]
    return rel.select(
        *shown, *m.state, f"{VIEW_ROW_ID} AS {quoted(METADATA_ROW_ID)}", *map(quoted, passed)
    )


@contextmanager
def maintained_delta(
    ctx: Context,
    m: Maintained,
    versions: Versions,
    target: Target,
    *,
    optimistic: bool = False,
) -> Iterator[Relation]:
    """The minimum delta that brings ``target``'s stored rows to the query at the interval's
    end, from the stored state of the groups the changes touch (valid in the ``with`` block):
    one plan. Where a group may need a recompute, ``optimistic`` leaves each one that does as
    ``UNRESOLVED`` events (``apply_delta`` raises ``Unresolved``: the caller asks again, not
    optimistic); else the combined groups are persisted and those to recompute counted first,
    and recomputed from their rows."""
    schema = target.state.schema
    names = [c.name for c in schema.visible]
    stored_names = [c.name for c in schema.stored]
    agg = m.shape.aggregate
    ends = {t: (info, end) for t, (info, _, end) in versions.items()}
    found = input_changes(ctx, agg.child, versions)
    if found is None:  # no table it reads changed: no group changes
        nothing = node_rows(ctx, agg.child, ends).where("FALSE")
        changes = nothing.select("*", f"'INSERT' AS {VIEW_ACTION}")
    else:
        changes, _ = found
    partial = _aggregated(m, changes, delta_state(m.shape, m.types))
    rid = group_row_id([c.id for c in agg.keys])
    partial = partial.select("*", f"{rid} AS {VIEW_ROW_ID}")
    stored = state_relation(ctx.spark, ctx.warehouse, target.state, identity=True).select(
        f"{quoted(ROW_KEY)} AS {quoted(_OLD + ROW_KEY)}",
        *[f"{quoted(n)} AS {quoted(_OLD + n)}" for n in stored_names],
        *[f"{c} AS {quoted(_OLD + c)}" for c in STORED],
    )
    on = f"_l.{VIEW_ROW_ID} = _r.{quoted(_OLD + ROW_KEY)}"
    # the touched groups are hashed, the stored rows stream past them (no sort of the table)
    joined = partial.join(stored, on, "left", hint="SHUFFLE_HASH(_l)")
    now = combined(m.shape, m.types, _OLD)
    types = {c.name: c.type for c in schema.state}
    keep = now.state["_cl_n"] > 0 if agg.keys else S.lit(True)
    combined_groups = joined.select(
        *[quoted(c.id) for c in agg.keys],
        VIEW_ROW_ID,
        *[quoted(_OLD + n) for n in [ROW_KEY, *stored_names, *STORED]],
        *[now.state[n].cast(types[n]).alias(n) for n in m.state],
        *[now.values[c.id].cast(m.value_types[c.id]).alias(c.id) for c in agg.values],
        now.recompute.alias(_REDO),
        keep.alias(_KEEP),
        S.col(_OLD + ROW_KEY).isNotNull().alias(_HAD),
    )
    unresolved = m.may_recompute and optimistic  # a group to recompute: UNRESOLVED events
    frame = combined_groups.frame(ctx.spark) if m.may_recompute and not optimistic else None
    with persisted(frame) if frame is not None else nullcontext() as kept:
        redo = False
        groups = combined_groups
        narrowed = None
        if kept is not None:  # one small job saves reading base rows when no group needs it
            groups = Relation.of_frame(kept, combined_groups.columns)
            redo, narrowed = _flagged(m, kept, table=target.info.name)
        # a group not recomputed has its stored row beside its new one: no join to pair them
        passed = (_REDO, _KEEP, _HAD, *[_OLD + n for n in [*stored_names, *STORED]])
        rows = _output(m, groups if unresolved else groups.where(f"NOT {_REDO}"), names, passed)
        before = _image([(_OLD + n, n) for n in stored_names])
        after = _image([(n, n) for n in stored_names])
        # both events of a stored group keep its row's address and identity (apply_delta)
        # only the images and what the events keep: a user column may be named _a or _b
        images = rows.select(
            quoted(METADATA_ROW_ID),
            f"CASE WHEN {_HAD} THEN {before} END AS _b",
            f"CASE WHEN {_KEEP} THEN {after} END AS _a",
            *[f"{quoted(_OLD + c)} AS {c}" for c in STORED],
            _REDO,
        )
        changed = f"{_REDO} OR NOT (_b <=> _a)" if unresolved else "NOT (_b <=> _a)"
        paired = images.where(changed).select(
            quoted(METADATA_ROW_ID), f"{PAIR_EVENTS} AS _e", *STORED, _REDO
        )
        action = f"CASE WHEN {_REDO} THEN '{UNRESOLVED}' ELSE _e.a END" if unresolved else "_e.a"
        delta = paired.where("_e IS NOT NULL").select(
            *[f"_e.v.{quoted(n)} AS {quoted(n)}" for n in stored_names],
            f"{action} AS {quoted(METADATA_ACTION)}",
            f"_e.u AS {quoted(METADATA_ISUPDATE)}",
            quoted(METADATA_ROW_ID),
            *STORED,
        )
        if redo:
            fresh = _recomputed(ctx, m, groups, ends, types, narrowed)
            old = groups.where(f"{_REDO} AND {_HAD}").select(
                *[f"{quoted(_OLD + n)} AS {quoted(n)}" for n in [*stored_names, *STORED]],
                f"{quoted(_OLD + ROW_KEY)} AS {quoted(ROW_KEY)}",
            )
            delta = delta.union(diff(old, _output(m, fresh, names), stored_names, STORED))
        yield delta


def _image(columns: list[tuple[str, str]]) -> str:
    """A row image: a struct of (column, field name) pairs."""
    return f"named_struct({', '.join(f'{sql_literal(n)}, {quoted(c)}' for c, n in columns)})"


def _flagged(
    m: Maintained, kept: DataFrame, *, table: str
) -> tuple[bool, dict[int, Narrowing] | None]:
    """Whether any of the combined groups ``kept`` is flagged for a recompute and, where a
    grouping key is a column of one table the input reads once and at most
    ``RECOMPUTE_VALUES`` groups are flagged, the narrowing of that table's read to their values
    (its files by their statistics). One small job either way."""
    flagged = kept.where(_REDO)
    found = _key_source(m)
    if found is None:
        return bool(run_checked(flagged.count, table=table)), None
    key, table_id, column = found
    values = run_checked(
        lambda: flagged.select(quoted(key)).limit(RECOMPUTE_VALUES + 1).toArrow(), table=table
    ).column(0)
    exact = pa.types.is_integer(values.type) or pa.types.is_string(values.type)
    if len(values) > RECOMPUTE_VALUES or values.null_count or not exact:
        return len(values) > 0, None
    return len(values) > 0, {table_id: Narrowing(column, tuple(sorted(set(values.to_pylist()))))}


def _key_source(m: Maintained) -> tuple[str, int, str] | None:
    """A grouping key (its column id) that is a column of a table the aggregate's input reads
    once: (the key, the table's id, the table's column); None if no key is."""
    agg = m.shape.aggregate
    for col, expression in zip(agg.keys, agg.key_expressions, strict=True):
        ref = referenced(expression)
        found = source_column(agg.child, ref) if ref is not None else None
        if found is not None:
            scan, column = found
            if sum(s.table_id == scan.table_id for s in scans(agg.child)) == 1:
                return col.id, scan.table_id, column
    return None


def _recomputed(
    ctx: Context,
    m: Maintained,
    groups: Relation,
    ends: Ends,
    types: dict[str, str],
    narrowed: dict[int, Narrowing] | None = None,
) -> Relation:
    """The groups flagged for a recompute, from their input rows at the end (those of the
    ``narrowed`` tables' files that may hold them)."""
    rows = node_rows(ctx, m.shape.aggregate.child, ends, narrowed)
    agg = m.shape.aggregate
    if agg.keys:
        flagged = groups.where(_REDO).select(
            *[f"{quoted(c.id)} AS _cl_t{i}" for i, c in enumerate(agg.keys)]
        )
        with_keys = rows.select(
            "*", *[f"{e} AS _cl_k{i}" for i, e in enumerate(agg.key_expressions)]
        )
        same = " AND ".join(f"_l._cl_k{i} <=> _r._cl_t{i}" for i in range(len(agg.keys)))
        rows = with_keys.join(flagged, same, "left_semi").select(*map(quoted, rows.columns))
    out = _grouped(m, rows)
    return out.select(
        *[quoted(c.id) for c in agg.columns],
        *[S.col(n).cast(types[n]).alias(n) for n in m.state],
        VIEW_ROW_ID,
    )


def explain_lines(
    ctx: Context,
    m: Maintained,
    versions: Versions,
) -> list[str]:
    """What an INCREMENTAL refresh maintains from state and what it recomputes, for EXPLAIN."""
    agg = m.shape.aggregate
    names = {c.id: c.name for c in agg.child.columns}
    lines = [
        "aggregate maintained from stored state: the input's changes summed per group and"
        " combined with the stored rows of the groups they touch (no regrouping of base rows)"
    ]
    lines += ["  " + line for line in describe(m.shape, names)]
    if any(n.endswith("_h") for n in m.state):
        lines.append(
            "  a group whose floating-point sum's history outgrew its rows' magnitudes is"
            " recomputed from its rows at the end"
        )
    found = input_changes(ctx, agg.child, versions)
    if found is None:
        return [*lines, "  input derivative: none (no table it reads changed)"]
    derivative = found[1]
    lines.append(f"  input derivative: {formula(derivative)}")
    return lines + ["    " + line for line in ir_describe(derivative)]
