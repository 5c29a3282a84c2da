"""Change queries of one base table: an interval of versions resolved from points, planned from
metadata, executed as one DataFrame."""

from __future__ import annotations

from collections.abc import Sequence

from changelake.catalog import Catalog
from changelake.catalog.model import TableInfo
from changelake.changes.formats import Rendering, render, stamp
from changelake.changes.plan import ChangePlan, Information, only_inserts, plan_changes
from changelake.changes.scan import change_relation
from changelake.errors import InvalidStatementError
from changelake.runtime.env import Context
from changelake.spark.relation import Relation
from changelake.txn.context import StatementContext
from changelake.txn.points import Point, resolve, resolve_all


def resolve_interval(
    ctx: StatementContext, info: TableInfo, *, start: Point | None, end: Point | None
) -> tuple[int, int]:
    """The versions ``(start, end]`` of ``info`` that the points name (end: what ``ctx`` reads)."""
    if start is None:
        raise InvalidStatementError(
            f"CHANGES on {info.name} needs a start: add AT (...) or BEFORE (...), e.g."
            " AT (VERSION => 1) or AT (OFFSET => -3600)."
        )
    first = resolve(ctx, info, start)
    # Without an end: what the statement reads, or a later version a time point named.
    last = resolve(ctx, info, end) if end is not None else max(first, ctx.read_version(info))
    return first, last


def resolve_intervals(
    ctx: StatementContext, infos: Sequence[TableInfo], *, start: Point | None, end: Point | None
) -> dict[int, tuple[int, int]]:
    """``resolve_interval`` for each table (by id), a time point asked once for them all."""
    if start is None:
        return {infos[0].table_id: resolve_interval(ctx, infos[0], start=start, end=end)}
    firsts = resolve_all(ctx, infos, start)
    lasts = (
        resolve_all(ctx, infos, end)
        if end is not None
        else {i.table_id: max(firsts[i.table_id], ctx.read_version(i)) for i in infos}
    )
    return {i.table_id: (firsts[i.table_id], lasts[i.table_id]) for i in infos}


def plan_interval(
    catalog: Catalog, info: TableInfo, *, start: int, end: int, information: Information
) -> ChangePlan:
    """The metadata-only plan for changes of ``info`` in versions ``(start, end]``."""
    if start > end:
        raise InvalidStatementError(
            f"CHANGES on {info.name}: the start (version {start}) is after the end"
            f" (version {end}); give an end at or after the start."
        )
    touched = catalog.files_changed_between(info.table_id, start_exclusive=start, end_inclusive=end)
    return plan_changes(
        table_id=info.table_id,
        table_name=info.name,
        start_version=start,
        end_version=end,
        information=information,
        touched=touched,
    )


def only_inserted_between(catalog: Catalog, table_id: int, *, start: int, end: int) -> bool:
    """Whether versions ``(start, end]`` of table ``table_id`` only added rows
    (``plan.only_inserts`` of the files they changed): metadata only."""
    touched = catalog.files_changed_between(table_id, start_exclusive=start, end_inclusive=end)
    return only_inserts(touched, start=start, end=end)


def changes_between(
    ctx: Context,
    info: TableInfo,
    *,
    start: int,
    end: int,
    information: Information,
    rendering: Rendering | None = None,
) -> Relation:
    """The changes of ``info`` in versions ``(start, end]`` as one relation, rendered as a
    changelog when ``rendering`` is given."""
    plan = plan_interval(ctx.catalog, info, start=start, end=end, information=information)
    schema = ctx.catalog.schema_at(info.table_id, end)
    ordered = rendering is not None and rendering.row_by_row
    rel = change_relation(ctx.env, plan, schema, ordered=ordered)
    if rendering is None:
        return rel
    df = rel.frame(ctx.spark)
    return Relation.of_frame(render(df, rendering, stamp(ctx.catalog, info, end), ordered=ordered))
