"""Streams read in queries, on tables and on views.

A stream on a view keeps a frontier per base table of the view; reading it returns the view's
changes from those frontiers to what the statement reads of each table (``plan.views``), and
consuming it moves every frontier at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from changelake.catalog.model import StreamInfo
from changelake.changes.plan import Information
from changelake.errors import UnsupportedError
from changelake.plan.definition import view_definition
from changelake.plan.ir import Node, scans
from changelake.plan.views import (
    Versions,
    ViewPlan,
    changes_over,
    check_view_stream,
)
from changelake.runtime.env import Context
from changelake.spark.relation import Relation
from changelake.streams import frontier
from changelake.streams.frontier import StreamRead
from changelake.txn.context import StatementContext
from changelake.txn.points import Point, resolve


@dataclass(frozen=True)
class ViewStreamSource:
    """What a new stream on a view starts from: the view's meaning and a frontier per table."""

    view: str
    definition: str
    frontiers: tuple[tuple[int, int], ...]  # (table id, version), by table id
    tables: tuple[str, ...]


def view_stream_source(
    ctx: StatementContext, view: str, stream: str, *, point: Point | None, append_only: bool
) -> ViewStreamSource:
    """Where stream ``stream`` on ``view`` starts: each base table at ``point`` (default: now)."""
    definition = view_definition(ctx, view, f"stream {stream} on view {view}")
    refused = definition.append_only_refusal() if append_only else None
    if refused is not None:
        raise UnsupportedError(refused.stream_message(stream, view))
    tables = {s.table_id: ctx.catalog.table(s.table) for s in scans(definition.tree)}
    frontiers = tuple(
        (t, resolve(ctx, info, point) if point is not None else ctx.read_version(info))
        for t, info in sorted(tables.items())
    )
    names = tuple(sorted(info.name for info in tables.values()))
    return ViewStreamSource(view.lower(), definition.fingerprint, frontiers, names)


def read_stream(
    ctx: Context,
    name: str,
    *,
    ordered: bool = False,
) -> tuple[Relation, StreamRead]:
    """The pending changes of stream ``name`` (on a table or a view), and the frontier move that
    consumes them. ``ordered`` (table streams only): in changelog order, see ``change_relation``."""
    stream = ctx.stream(name)
    if not stream.on_view:
        return frontier.read_stream(ctx, name, ordered=ordered)
    rel, _, read = _read_view_stream(ctx, stream)
    return rel, read


def stream_plan_lines(ctx: Context, name: str) -> list[str]:
    """What reading stream ``name`` now would do, for EXPLAIN."""
    stream = ctx.stream(name)
    if not stream.on_view:
        plan = frontier.stream_plan(ctx, name).plan
        assert plan is not None
        return plan.lines()
    _, plan, _ = _read_view_stream(ctx, stream)
    return [f"STREAM {stream.name} on view {stream.view}:"] + plan.lines()


def has_data(ctx: StatementContext, name: str) -> bool:
    """SYSTEM$STREAM_HAS_DATA. On a view: whether a base table changed since its frontier (or,
    before a SHOW_INITIAL_ROWS stream's first read, has rows), from metadata. Like Snowflake's,
    it may say TRUE for changes the view filters out or that cancel out."""
    stream = ctx.stream(name)
    if not stream.on_view:
        return frontier.has_data(ctx, name)
    _, versions = _view_interval(ctx, stream)
    if stream.pending_initial_rows:
        return any(
            f.live_rows > 0
            for info, _, last in versions.values()
            for f in ctx.catalog.snapshot_files(info.table_id, last)
        )
    return any(
        ctx.catalog.changed_since(
            info.table_id, first, upto_inclusive=last, inserts_only=stream.append_only
        )
        for info, first, last in versions.values()
    )


def _view_interval(ctx: StatementContext, stream: StreamInfo) -> tuple[Node, Versions]:
    tree = check_view_stream(ctx, stream)
    versions = {}
    for table_id, start in stream.frontiers:
        info = ctx.catalog.table_by_id(table_id)
        versions[table_id] = (info, start, max(start, ctx.read_version(info)))
    return tree, versions


def _read_view_stream(ctx: Context, stream: StreamInfo) -> tuple[Relation, ViewPlan, StreamRead]:
    assert stream.view is not None
    tree, versions = _view_interval(ctx, stream)
    rel, plan = changes_over(
        ctx,
        stream.view,
        tree,
        versions,
        information=Information.APPEND_ONLY if stream.append_only else Information.DEFAULT,
        initial_rows=stream.pending_initial_rows,
    )
    ends = tuple((t, last) for t, (_, _, last) in sorted(versions.items()))
    return rel, plan, StreamRead(stream, ends)
