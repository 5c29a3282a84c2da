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

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from changelake.catalog.model import TableInfo
from changelake.changes.columns import METADATA_ACTION, METADATA_ISUPDATE, METADATA_ROW_ID
from changelake.changes.scan import PAIR_EVENTS
from changelake.dml.common import Target
from changelake.dml.keyed import STORED, diff
from changelake.dml.matches import persisted
from changelake.dynamic.definition import Definition
from changelake.dynamic.measures import (
    Shape,
    combined,
    delta_state,
    describe,
    full_state,
    refusal,
    shape_of,
    state_names,
)
from changelake.plan.compile import VIEW_ACTION, VIEW_ROW_ID, group_row_id
from changelake.plan.delta import formula
from changelake.plan.ir import Col
from changelake.plan.ir import describe as ir_describe
from changelake.plan.subtree import input_changes, node_rows
from changelake.schema import ROW_KEY, TableSchema, quoted
from changelake.storage.env import Env
from changelake.storage.snapshot import state_relation
from changelake.storage.writer import run_checked
from changelake.txn.context import StatementContext

Ends = dict[int, tuple[TableInfo, int]]  # table id -> (table, version)
Versions = dict[int, tuple[TableInfo, int, int]]  # table id -> (table, start, end)
_OLD = "_cl_o_"  # prefix of a stored row's columns beside the changes of its group
_REDO, _KEEP, _HAD = "_cl_redo", "_cl_keep", "_cl_had"


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
        return any(n.endswith(("_m", "_h")) for n in self.state)

    @property
    def columns(self) -> tuple[Col, ...]:
        """The query's output columns."""
        top = self.shape.projects[-1] if self.shape.projects else self.shape.aggregate
        return top.columns


def maintained(
    ctx: StatementContext,
    env: Env,
    definition: Definition,
    ends: Ends,
) -> Maintained | None:
    """How ``definition``'s query is maintained from state, or None if it is not (its types
    are found by analysing the aggregate's input at ``ends``: no Spark job)."""
    shape = shape_of(definition.tree) if definition.tree is not None else None
    if shape is None:
        return None
    probe = node_rows(ctx, env, shape.aggregate.child, ends)
    arguments = [F.expr(m.argument).alias(f"a{m.index}") for m in shape.measures if m.argument]
    types = {int(f.name[1:]): f.dataType for f in probe.select(*arguments).schema.fields}
    if refusal(shape, types) is not None:
        return None
    agg = shape.aggregate
    values = [F.expr(e).alias(c.id) for c, e in zip(agg.values, agg.value_expressions, strict=True)]
    value_types = {f.name: f.dataType for f in probe.agg(*values).schema.fields} if values else {}
    return Maintained(shape, types, value_types, tuple(state_names(shape, types)))


def stored_state(m: Maintained | None, schema: TableSchema) -> Maintained | None:
    """``m`` if the table holds exactly its state columns (it was created or last
    reinitialized with them), else None: the table is refreshed without its state."""
    if m is None or tuple(c.name for c in schema.state) != m.state:
        return None
    return m


def aggregated_rows(m: Maintained, rows: DataFrame, names: list[str]) -> DataFrame:
    """The query's rows over the aggregate's input ``rows``, its visible columns named
    ``names``, with the state columns and METADATA$ROW_ID."""
    return _output(m, _grouped(m, rows), names)


def input_rows(ctx: StatementContext, env: Env, m: Maintained, ends: Ends) -> DataFrame:
    """The aggregate's input rows with each table at its version in ``ends``."""
    return node_rows(ctx, env, m.shape.aggregate.child, ends)


def _keys(m: Maintained) -> list[Column]:
    agg = m.shape.aggregate
    return [F.expr(e).alias(c.id) for c, e in zip(agg.keys, agg.key_expressions, strict=True)]


def _grouped(m: Maintained, rows: DataFrame) -> DataFrame:
    """Aggregate-level rows (key and value columns by id, state, RID) from input rows."""
    agg = m.shape.aggregate
    values = [F.expr(e).alias(c.id) for c, e in zip(agg.values, agg.value_expressions, strict=True)]
    measures = [*values, *full_state(m.shape, m.types)]
    keys = _keys(m)
    out = rows.groupBy(*keys).agg(*measures) if keys else rows.agg(*measures)
    rid = F.expr(group_row_id([c.id for c in agg.keys]))
    return out.select(*[F.col(c.id) for c in agg.columns], *m.state, rid.alias(VIEW_ROW_ID))


def _output(
    m: Maintained, df: DataFrame, names: list[str], passed: tuple[str, ...] = ()
) -> DataFrame:
    """Aggregate-level rows through the query's projections, named as the table's columns
    (and the ``passed`` columns as they were)."""
    for project in m.shape.projects:
        outputs = [
            F.expr(e).alias(c.id) for c, e in zip(project.outputs, project.expressions, strict=True)
        ]
        df = df.select(*outputs, *m.state, VIEW_ROW_ID, *passed)
    shown = [F.col(c.id).alias(n) for c, n in zip(m.columns, names, strict=True)]
    return df.select(*shown, *m.state, F.col(VIEW_ROW_ID).alias(METADATA_ROW_ID), *passed)


@contextmanager
def maintained_delta(
    ctx: StatementContext,
    env: Env,
    m: Maintained,
    versions: Versions,
    target: Target,
) -> Iterator[DataFrame]:
    """The minimum delta that brings ``target``'s stored rows to the query at the interval's
    end, from the stored state of the groups the changes touch (valid in the ``with`` block)."""
    schema = target.state.schema
    names = [c.name for c in schema.visible]
    stored_names = [c.name for c in schema.stored]
    agg = m.shape.aggregate
    ends = {t: (info, end) for t, (info, _, end) in versions.items()}
    found = input_changes(ctx, env, agg.child, versions)
    if found is None:  # no table it reads changed: no group changes
        nothing = node_rows(ctx, env, agg.child, ends).limit(0)
        found = nothing.withColumn(VIEW_ACTION, F.lit("INSERT")), agg.child
    changes, _ = found
    keys = _keys(m)
    summed = delta_state(m.shape, m.types)
    partial = changes.groupBy(*keys).agg(*summed) if keys else changes.agg(*summed)
    partial = partial.withColumn(VIEW_ROW_ID, F.expr(group_row_id([c.id for c in agg.keys])))
    stored = (
        state_relation(env.spark, env.warehouse, target.state, identity=True)
        .frame(env.spark)
        .select(
            F.col(quoted(ROW_KEY)).alias(_OLD + ROW_KEY),
            *[F.col(quoted(n)).alias(_OLD + n) for n in stored_names],
            *[F.col(c).alias(_OLD + c) for c in STORED],
        )
    )
    joined = partial.join(stored, F.col(VIEW_ROW_ID) == F.col(_OLD + ROW_KEY), "left")
    now = combined(m.shape, m.types, _OLD)
    types = {c.name: c.type for c in schema.state}
    keep = now.state["_cl_n"] > 0 if agg.keys else F.lit(True)
    frame = joined.select(
        *[F.col(c.id) for c in agg.keys],
        F.col(VIEW_ROW_ID),
        *[F.col(_OLD + n) for n in [ROW_KEY, *stored_names, *STORED]],
        *[now.state[n].cast(types[n]).alias(n) for n in m.state],
        *[now.values[c.id].cast(m.value_types[c.id]).alias(c.id) for c in agg.values],
        now.recompute.alias(_REDO),
        keep.alias(_KEEP),
        F.col(_OLD + ROW_KEY).isNotNull().alias(_HAD),
    )
    with persisted(frame) if m.may_recompute else nullcontext(frame) as frame:
        redo = 0
        if m.may_recompute:  # one small job saves reading base rows when no group needs it
            redo = run_checked(lambda: frame.where(F.col(_REDO)).count(), table=target.info.name)
        # a group not recomputed has its stored row beside its new one: no join to pair them
        passed = (_REDO, _KEEP, _HAD, *[_OLD + n for n in [*stored_names, *STORED]])
        rows = _output(m, frame.where(~F.col(_REDO)), names, passed)
        before = F.when(F.col(_HAD), F.struct(*[F.col(_OLD + n).alias(n) for n in stored_names]))
        after = F.when(F.col(_KEEP), F.struct(*[F.col(quoted(n)) for n in stored_names]))
        # both events of a stored group keep its row's address and identity (apply_delta)
        # only the images and what the events keep: a user column may be named _a or _b
        images = rows.select(
            F.col(METADATA_ROW_ID),
            before.alias("_b"),
            after.alias("_a"),
            *[F.col(_OLD + c).alias(c) for c in STORED],
        )
        paired = images.where("NOT (_b <=> _a)").select(
            F.col(METADATA_ROW_ID), F.expr(PAIR_EVENTS).alias("_e"), *STORED
        )
        delta = paired.where(F.col("_e").isNotNull()).select(
            *[F.col("_e").getField("v").getField(n).alias(n) for n in stored_names],
            F.col("_e").getField("a").alias(METADATA_ACTION),
            F.col("_e").getField("u").alias(METADATA_ISUPDATE),
            F.col(METADATA_ROW_ID),
            *STORED,
        )
        if redo:
            fresh = _recomputed(ctx, env, m, frame, ends, types)
            old = frame.where(F.col(_REDO) & F.col(_HAD)).select(
                *[F.col(_OLD + n).alias(n) for n in [*stored_names, *STORED]],
                F.col(_OLD + ROW_KEY).alias(ROW_KEY),
            )
            recomputed = diff(old, _output(m, fresh, names), stored_names, STORED)
            delta = delta.unionByName(recomputed)
        yield delta


def _recomputed(
    ctx: StatementContext,
    env: Env,
    m: Maintained,
    frame: DataFrame,
    ends: Ends,
    types: dict[str, str],
) -> DataFrame:
    """The groups flagged for a recompute, from their input rows at the end."""
    rows = node_rows(ctx, env, m.shape.aggregate.child, ends)
    agg = m.shape.aggregate
    if agg.keys:
        flagged = frame.where(F.col(_REDO)).select(
            *[F.col(c.id).alias(f"_cl_t{i}") for i, c in enumerate(agg.keys)]
        )
        with_keys = rows.select(
            "*", *[F.expr(e).alias(f"_cl_k{i}") for i, e in enumerate(agg.key_expressions)]
        )
        same = [F.col(f"_cl_k{i}").eqNullSafe(F.col(f"_cl_t{i}")) for i in range(len(agg.keys))]
        cond = same[0]
        for more in same[1:]:
            cond = cond & more
        rows = with_keys.join(flagged, cond, "left_semi").select(*rows.columns)
    out = _grouped(m, rows)
    return out.select(
        *[F.col(c.id) for c in agg.columns],
        *[F.col(n).cast(types[n]).alias(n) for n in m.state],
        F.col(VIEW_ROW_ID),
    )


def explain_lines(
    ctx: StatementContext,
    env: Env,
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
    found = input_changes(ctx, env, agg.child, versions)
    if found is None:
        return [*lines, "  input derivative: none (no table it reads changed)"]
    derivative = found[1]
    lines.append(f"  input derivative: {formula(derivative)}")
    return lines + ["    " + line for line in ir_describe(derivative)]
