"""Reading STREAMs: the changes from a stream's frontier to what the statement reads.

Reading a stream has no side effect: it returns the changes and a ``StreamRead``, the frontier
move a statement that commits must make (compare-and-set on the frontier it read).
"""

from __future__ import annotations

from dataclasses import dataclass

from changelake.catalog.model import StreamInfo
from changelake.catalog.requests import AdvanceStream, FrontierAt
from changelake.changes.plan import ChangePlan, Information, plan_changes
from changelake.changes.scan import change_relation
from changelake.runtime.env import Context
from changelake.spark.relation import Relation
from changelake.txn.context import StatementContext
from changelake.txn.retention import check_not_stale


@dataclass(frozen=True)
class StreamRead:
    """A stream as one statement read it: how far it read on each base table (the frontiers a
    commit moves it to), and for a stream on a table the plan of its changes."""

    stream: StreamInfo
    ends: tuple[tuple[int, int], ...]  # (table id, version), by table id
    plan: ChangePlan | None = None

    @property
    def advance(self) -> AdvanceStream:
        return AdvanceStream(self.stream.stream_id, self.ends)

    @property
    def requirement(self) -> FrontierAt:
        return FrontierAt(
            self.stream.stream_id,
            self.stream.name,
            self.stream.frontiers,
            self.stream.initial_consumed,
        )


def stream_plan(ctx: StatementContext, name: str) -> StreamRead:
    """What reading stream ``name`` (on a table) now would return, planned from metadata."""
    stream = ctx.stream(name)
    assert not stream.on_view, "streams on views are read by plan.streams"
    info = ctx.catalog.table_by_id(stream.table_id)
    check_not_stale(ctx.catalog, stream, info, now=ctx.now())
    end = max(ctx.read_version(info), stream.frontier_version)
    information = Information.APPEND_ONLY if stream.append_only else Information.DEFAULT
    # The first read of SHOW_INITIAL_ROWS returns every row at the end: all files up to it.
    touched = ctx.catalog.files_changed_between(
        info.table_id,
        start_exclusive=-1 if stream.pending_initial_rows else stream.frontier_version,
        end_inclusive=end,
    )
    plan = plan_changes(
        table_id=info.table_id,
        table_name=info.name,
        start_version=stream.frontier_version,
        end_version=end,
        information=information,
        touched=touched,
        initial_rows=stream.pending_initial_rows,
    )
    return StreamRead(stream, ((info.table_id, end),), plan)


def read_stream(
    ctx: Context,
    name: str,
    *,
    ordered: bool = False,
) -> tuple[Relation, StreamRead]:
    """The stream's pending changes (``ordered``: in changelog order, see ``change_relation``),
    and the frontier move that consumes them."""
    read = stream_plan(ctx, name)
    plan = read.plan
    assert plan is not None
    schema = ctx.catalog.schema_at(plan.table_id, plan.end_version)
    return change_relation(ctx.env, plan, schema, ordered=ordered), read


def has_data(ctx: StatementContext, name: str) -> bool:
    """SYSTEM$STREAM_HAS_DATA: whether the stream has changes to consume, from the per-version
    change summary (one indexed lookup). Before a SHOW_INITIAL_ROWS stream's first read, whether
    the table has rows: its live files are listed, once per stream.

    Like Snowflake's, it may say TRUE for changes that cancel out (a row inserted and deleted);
    a compaction alone is no change.
    """
    stream = ctx.stream(name)
    assert not stream.on_view, "streams on views are read by plan.streams"
    info = ctx.catalog.table_by_id(stream.table_id)
    check_not_stale(ctx.catalog, stream, info, now=ctx.now())
    end = max(ctx.read_version(info), stream.frontier_version)
    if stream.pending_initial_rows:  # the first read returns the rows at the end
        return any(f.live_rows > 0 for f in ctx.catalog.snapshot_files(info.table_id, end))
    return ctx.catalog.changed_since(
        info.table_id,
        stream.frontier_version,
        upto_inclusive=end,
        inserts_only=stream.append_only,
    )
