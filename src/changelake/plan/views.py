"""Views in time: a view as of a point, and its changes over an interval.

The interval of a view is one interval per base table, each resolved from the same points. The
changes come from one of two plans with the same output and the same ROW_IDs: the *incremental*
plan (the view's derivative, ``plan.delta``) or *recompute-and-diff* (the view at both ends,
matched by ROW_ID). The planner picks the cheaper from catalog metadata (rows the plan reads);
``spark.changelake.viewChangesPlan`` (AUTO | INCREMENTAL | RECOMPUTE) forces one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from changelake.catalog.model import StreamInfo, TableInfo
from changelake.changes.columns import (
    METADATA_ACTION,
    METADATA_COMMIT_TIMESTAMP,
    METADATA_COMMIT_VERSION,
    METADATA_ISUPDATE,
    METADATA_ROW_ID,
)
from changelake.changes.plan import Information
from changelake.changes.query import (
    changes_between,
    only_inserted_between,
    plan_interval,
    resolve_intervals,
)
from changelake.changes.scan import table_row_id
from changelake.errors import InvalidStatementError, StaleStreamError, UnsupportedError
from changelake.plan.compile import VIEW_ACTION, VIEW_ROW_ID, compile_node, net_changes
from changelake.plan.definition import ViewDefinition, view_definition
from changelake.plan.delta import derive, formula
from changelake.plan.ir import (
    At,
    Delta,
    End,
    Node,
    Regroup,
    Scan,
    Signed,
    at,
    children,
    describe,
    scans,
)
from changelake.plan.monotonic import appended
from changelake.plan.round_reads import changes_key
from changelake.runtime.env import VIEW_CHANGES_PLAN, Context, Settings
from changelake.schema import quoted
from changelake.spark.local import sql_literal
from changelake.spark.relation import Relation
from changelake.storage.pruning import Comparison, Narrowing, holding, prune, value_range
from changelake.storage.snapshot import state_relation
from changelake.txn.context import StatementContext
from changelake.txn.points import Point, PointKind, resolve_all
from changelake.txn.retention import check_not_stale, recreate_hint

PLANS = ("AUTO", "INCREMENTAL", "RECOMPUTE")
MAX_REDO_COMMITS = 256  # each commit is its own plan, and Spark plans their union at once


@dataclass(frozen=True)
class ViewPlan:
    """How the changes of a view are computed, for EXPLAIN."""

    view: str
    tree: Node
    intervals: dict[str, tuple[int, int]]  # base table -> (start, end] versions
    derivative: Node | None
    chosen: str  # INCREMENTAL | RECOMPUTE
    reason: str

    def lines(self) -> list[str]:
        spans = ", ".join(f"{t} ({a}, {b}]" for t, a, b in self._spans())
        out = [
            f"CHANGES on view {self.view}: base tables {spans}",
            f"plan: {self.chosen} ({self.reason})",
        ]
        out += ["view:"] + ["  " + line for line in describe(self.tree)]
        if self.derivative is None:
            out.append("derivative: none (no base table changed)")
        else:
            out.append(f"derivative: {formula(self.derivative)}")
            out += ["  " + line for line in describe(self.derivative)]
        return out

    def _spans(self) -> list[tuple[str, int, int]]:
        return [(t, a, b) for t, (a, b) in sorted(self.intervals.items())]


# The interval each table is read over: table id -> (table, start, end), its state at ``start``
# and its changes after ``start`` up to ``end`` (a view's CHANGES, a stream's read, a refresh
# from the dynamic table's frontiers to its data timestamp).
Versions = dict[int, tuple[TableInfo, int, int]]


def _versions(
    ctx: StatementContext,
    view: str,
    definition: ViewDefinition,
    start: Point | None,
    end: Point | None,
) -> Versions:
    tables = {s.table_id: definition.tables[s.table_id] for s in scans(definition.tree)}
    if len(tables) > 1 and any(p is not None and p.kind is PointKind.VERSION for p in (start, end)):
        raise InvalidStatementError(
            f"View {view} reads {len(tables)} tables, whose versions differ: give the point as"
            " TIMESTAMP, OFFSET or STATEMENT instead of VERSION."
        )
    if end is not None and end.kind is PointKind.STREAM:
        raise InvalidStatementError("A stream is a start point: write AT (STREAM => 'name').")
    if start is not None and start.kind is PointKind.STREAM:
        frontiers = _stream_start(ctx, view, str(start.value))
        ends = resolve_all(ctx, list(tables.values()), end) if end is not None else {}
        return {
            t: (info, frontiers[t], ends[t])
            if end is not None
            else (info, frontiers[t], max(frontiers[t], ctx.read_version(info)))
            for t, info in tables.items()
        }
    intervals = resolve_intervals(ctx, list(tables.values()), start=start, end=end)
    return {t: (info, *intervals[t]) for t, info in tables.items()}


def _stream_start(ctx: StatementContext, view: str, name: str) -> dict[int, int]:
    """The start of ``CHANGES ... AT (STREAM => 'name')`` on ``view``: the stream's frontiers."""
    stream = ctx.stream(name)
    if stream.view != view.lower():
        on = f"view {stream.view}" if stream.on_view else "a table"
        raise InvalidStatementError(f"Stream {stream.name} is on {on}, not on view {view}.")
    check_view_stream(ctx, stream)
    return dict(stream.frontiers)


def check_view_stream(ctx: StatementContext, stream: StreamInfo) -> Node:
    """StaleStreamError if the stream's view was redefined or dropped, or if its changes on a
    base table fell out of retention; else the view's IR."""
    assert stream.view is not None
    recreate = recreate_hint(stream, stream.view)
    if ctx.catalog.view_sql(stream.view) is None:
        raise StaleStreamError(
            f"Stream {stream.name} is stale: view {stream.view} was dropped.{recreate}"
        )
    redefined = (
        f"Stream {stream.name} is stale: view {stream.view} (or a view it reads) was redefined"
        " after the stream was created"
    )
    try:
        definition = view_definition(
            ctx, stream.view, f"view {stream.view} of stream {stream.name}"
        )
    except UnsupportedError as e:
        # what a view may use follows from its text, and the stream's view had changes when the
        # stream was created: one of the views it reads was redefined since
        raise StaleStreamError(f"{redefined}; {e}") from e
    if definition.fingerprint != stream.view_definition:
        refused = definition.append_only_refusal() if stream.append_only else None
        if refused is not None:
            raise StaleStreamError(
                f"{redefined}, and {refused.stale_reason(stream.name, stream.view)}."
            )
        raise StaleStreamError(
            f"{redefined}, so its changes no longer follow from the stream's position.{recreate}"
        )
    for table_id, _ in stream.frontiers:
        check_not_stale(ctx.catalog, stream, ctx.catalog.table_by_id(table_id), now=ctx.now())
    return definition.tree


def view_at(ctx: Context, name: str, point: Point) -> Relation:
    """View ``name`` as of ``point`` (each base table at the version the point names)."""
    if point.kind is PointKind.STREAM:
        raise InvalidStatementError(
            f"AT (STREAM => ...) names an interval's start: use it in a CHANGES clause on {name}."
        )
    definition = view_definition(ctx, name, f"view {name}")
    versions = {
        t: (info, v, v) for t, (info, v, _) in _versions(ctx, name, definition, point, None).items()
    }
    # its tables' columns as of the point, as a table's time travel reads them
    read_at = {t: v for t, (_, v, _) in versions.items()}
    tree = view_definition(ctx, name, f"view {name}", at=read_at).tree
    ctx.catalog.read_ahead({t: (v, v) for t, (_, v, _) in versions.items()})
    rel = compile_node(at(tree, End.START), Leaves(ctx, versions, None).read)
    return rel.select(*[f"{c.id} AS {quoted(c.name)}" for c in tree.columns])


def view_changes(
    ctx: Context,
    name: str,
    *,
    start: Point | None,
    end: Point | None,
    information: Information,
) -> tuple[Relation, ViewPlan]:
    """The changes of view ``name`` between the points, with METADATA$ACTION, METADATA$ISUPDATE
    and METADATA$ROW_ID, and the plan that computes them."""
    about = f"CHANGES on view {name}"
    definition = view_definition(ctx, name, about)
    refused = definition.append_only_refusal() if information is Information.APPEND_ONLY else None
    if refused is not None:
        raise UnsupportedError(refused.changes_message(about, name))
    versions = _versions(ctx, name, definition, start, end)
    return changes_over(ctx, name, definition.tree, versions, information=information)


def changes_over(
    ctx: Context,
    name: str,
    tree: Node,
    versions: Versions,
    *,
    information: Information,
    initial_rows: bool = False,
) -> tuple[Relation, ViewPlan]:
    """The changes of view ``name`` (IR ``tree``) over one interval per base table; with
    ``initial_rows``, every row of the view at the end as an INSERT (a stream's first read).
    APPEND_ONLY: ``tree`` is one that ``monotonic.refusal`` accepts."""
    ctx.catalog.read_ahead({t: (first, last) for t, (_, first, last) in versions.items()})
    if information is Information.REDO:
        return _redo(ctx, name, tree, versions)
    leaves = Leaves(ctx, versions, information)
    if information is Information.APPEND_ONLY:
        derivative = appended(tree, changed=leaves.changed)
    else:
        derivative = derive(tree, changed=leaves.changed)
    chosen, reason = _choose(ctx.settings, ctx, tree, derivative, versions, information)
    if initial_rows:
        chosen, reason = "INITIAL ROWS", "a stream's first read returns every row at the end"
    plan = ViewPlan(
        name,
        tree,
        {info.name: (a, b) for info, a, b in versions.values()},
        derivative,
        chosen,
        reason,
    )
    names = [f"{c.id} AS {quoted(c.name)}" for c in tree.columns]
    if initial_rows:
        after = Leaves(ctx, versions, None).read
        return _inserts(compile_node(at(tree, End.END), after), names), plan
    if information is Information.APPEND_ONLY:
        if derivative is None:
            return _empty(tree, leaves), plan
        return _inserts(compile_node(derivative, leaves.read), names), plan
    if chosen == "RECOMPUTE":
        before = compile_node(Signed(at(tree, End.START), "DELETE"), leaves.read)
        signed = before.union(compile_node(Signed(at(tree, End.END), "INSERT"), leaves.read))
    elif derivative is None:
        return _empty(tree, leaves), plan
    else:
        signed = compile_node(derivative, leaves.read)
    return _consolidated(signed, tree, names), plan


def _redo(
    ctx: Context,
    name: str,
    tree: Node,
    versions: Versions,
) -> tuple[Relation, ViewPlan]:
    """REDO: the view's minimum delta of each commit to its base tables, in commit order. A
    commit is one statement (a transaction writing two base tables is one commit); its
    METADATA$COMMIT_VERSION is the version it made of a base table it wrote (the one created
    first), METADATA$COMMIT_TIMESTAMP its commit time."""
    commits: dict[str, list[tuple[float, int, int]]] = {}
    for table_id, (_, first, last) in versions.items():
        for v in ctx.catalog.versions(table_id, after_exclusive=first, upto_inclusive=last):
            commits.setdefault(v.statement_id, []).append((v.committed_at, table_id, v.version))
    steps = sorted(sorted(c) for c in commits.values())
    if len(steps) > MAX_REDO_COMMITS:
        raise UnsupportedError(
            f"CHANGES on view {name}: INFORMATION => REDO over {len(steps)} commits is more than"
            f" {MAX_REDO_COMMITS}; narrow the interval, or use DEFAULT."
        )
    reached = {t: first for t, (_, first, _) in versions.items()}
    parts = []
    for ordinal, step in enumerate(steps):
        span = {t: (info, reached[t], reached[t]) for t, (info, _, _) in versions.items()}
        for _, table_id, version in step:
            span[table_id] = (span[table_id][0], reached[table_id], version)
            reached[table_id] = version
        rel, _ = changes_over(ctx, name, tree, span, information=Information.DEFAULT)
        committed_at, _, version = step[0]
        parts.append(
            rel.select(
                "*",
                f"CAST({version} AS BIGINT) AS {quoted(METADATA_COMMIT_VERSION)}",
                f"timestamp_micros({round(committed_at * 1_000_000)})"
                f" AS {quoted(METADATA_COMMIT_TIMESTAMP)}",
                f"{ordinal} AS _cl_step",
            )
        )
    leaves = Leaves(ctx, versions, None)
    plan = ViewPlan(
        name,
        tree,
        {info.name: (a, b) for info, a, b in versions.values()},
        derive(tree, changed=leaves.changed),
        "REDO",
        f"{len(steps)} commits, each its own minimum delta",
    )
    if not parts:
        empty = _empty(tree, leaves)
        return empty.select(
            "*",
            f"CAST(NULL AS BIGINT) AS {quoted(METADATA_COMMIT_VERSION)}",
            f"CAST(NULL AS TIMESTAMP) AS {quoted(METADATA_COMMIT_TIMESTAMP)}",
        ), plan
    out = functools.reduce(Relation.union, parts)
    order = ", ".join(["_cl_step", quoted(METADATA_ROW_ID), quoted(METADATA_ACTION)])
    ordered = Relation.query(f"SELECT * FROM {{r}} AS _o ORDER BY {order}", out.columns, r=out)
    return ordered.drop("_cl_step"), plan


def _inserts(rel: Relation, names: list[str]) -> Relation:
    return rel.select(
        *names,
        f"'INSERT' AS {quoted(METADATA_ACTION)}",
        f"false AS {quoted(METADATA_ISUPDATE)}",
        f"{VIEW_ROW_ID} AS {quoted(METADATA_ROW_ID)}",
    )


def _consolidated(signed: Relation, tree: Node, names: list[str]) -> Relation:
    """The minimum delta of a redundant one; a ROW_ID left with a DELETE and an INSERT is an
    update (METADATA$ISUPDATE, computed last)."""
    rows = net_changes(signed, tree.columns)
    by_id = f"OVER (PARTITION BY {VIEW_ROW_ID})"
    update = f"min({VIEW_ACTION}) {by_id} != max({VIEW_ACTION}) {by_id}"
    return rows.select(
        *names,
        f"{VIEW_ACTION} AS {quoted(METADATA_ACTION)}",
        f"{update} AS {quoted(METADATA_ISUPDATE)}",
        f"{VIEW_ROW_ID} AS {quoted(METADATA_ROW_ID)}",
    )


def _empty(tree: Node, leaves: Leaves) -> Relation:
    rel = compile_node(at(tree, End.START), leaves.read)
    none = Relation.query("SELECT * FROM {r} AS _e LIMIT 0", rel.columns, r=rel)
    return _inserts(none, [f"{c.id} AS {quoted(c.name)}" for c in tree.columns])


def _choose(
    settings: Settings,
    ctx: StatementContext,
    tree: Node,
    derivative: Node | None,
    versions: Versions,
    information: Information,
) -> tuple[str, str]:
    forced = settings.view_changes_plan
    if forced not in PLANS:
        raise InvalidStatementError(
            f"{VIEW_CHANGES_PLAN} is {forced!r}; set it to one of {', '.join(PLANS)}."
        )
    if information is Information.APPEND_ONLY:
        return "INCREMENTAL", "APPEND_ONLY reads only inserted rows"
    if forced != "AUTO":
        return forced, f"forced by {VIEW_CHANGES_PLAN}"
    rows = {t: _live_rows(ctx, info, last) for t, (info, _, last) in versions.items()}
    changed = {t: _changed_rows(ctx, info, a, b) for t, (info, a, b) in versions.items()}
    recompute = 2 * sum(rows[s.table_id] for s in scans(tree))
    incremental = _reads(derivative, rows, changed) if derivative is not None else 0
    verdict = "INCREMENTAL" if incremental <= recompute else "RECOMPUTE"
    return verdict, f"reads ~{incremental} rows incrementally vs ~{recompute} to recompute"


def _reads(node: Node, rows: dict[int, int], changed: dict[int, int]) -> int:
    if isinstance(node, Regroup):  # the stateful node's input once, and its changes
        return _reads(node.stateful.child, rows, changed) + _reads(node.delta, rows, changed)
    if isinstance(node, Delta):
        return changed[node.scan.table_id]
    if isinstance(node, At | Scan):
        scan = node if isinstance(node, Scan) else node.scan
        return rows[scan.table_id]
    return sum(_reads(c, rows, changed) for c in children(node))


def _live_rows(ctx: StatementContext, info: TableInfo, version: int) -> int:
    return sum(
        f.file.row_count - f.deleted_rows
        for f in ctx.catalog.snapshot_files(info.table_id, version)
    )


def _changed_rows(ctx: StatementContext, info: TableInfo, start: int, end: int) -> int:
    """The rows a change scan of ``info`` over ``(start, end]`` reads: whole touched files."""
    plan = plan_interval(ctx.catalog, info, start=start, end=end, information=Information.DEFAULT)
    deleted_from = sum(f.row_count for f in plan.before_deleted.files)
    return plan.before_files.rows + deleted_from + plan.after_files.rows


class Leaves:
    """Reads the leaves of a view's plans: base tables at the interval's ends, and their changes."""

    def __init__(
        self,
        ctx: Context,
        versions: Versions,
        information: Information | None,
        narrowed: Mapping[int, Narrowing] | None = None,
    ):
        self.ctx = ctx
        self.versions = versions
        self.information = information
        self.narrowed = narrowed or {}

    def changed(self, scan: Scan) -> bool:
        _, first, last = self.versions[scan.table_id]
        return first < last

    def read(self, node: At | Delta | Scan) -> Relation:
        scan = node if isinstance(node, Scan) else node.scan
        info, first, last = self.versions[scan.table_id]
        if isinstance(node, Delta):
            return self._changes(info, first, last)
        if isinstance(node, At) and node.end is End.END:
            if self.information is Information.APPEND_ONLY:
                # what the view could join an inserted row with: the start state and every
                # inserted row, with its values as inserted
                added = self._changes(info, first, last).drop(VIEW_ACTION)
                return self._state(info, first).union(added)
            return self._state(info, last)
        key = node.key if isinstance(node, At) else None
        return self._state(info, first, key=key, changed=(first, last))

    def _state(
        self,
        info: TableInfo,
        version: int,
        *,
        key: str | None = None,
        changed: tuple[int, int] = (0, 0),
    ) -> Relation:
        """The table at ``version``; with ``key``, only the files (and rows) whose ``key`` may
        be one of the values in the files the changes over ``changed`` read."""
        state = self.ctx.state(info, version)
        bounds = self._touched(info, key, changed) if key is not None else None
        if bounds is not None:
            lo, hi = bounds
            within = [Comparison(key, ">=", lo), Comparison(key, "<=", hi)]
            state = state.with_files(prune(state.files, state.schema, within))
        narrowing = self.narrowed.get(info.table_id)
        if narrowing is not None:
            values = [(v,) for v in narrowing.values]
            state = state.with_files(holding(state.files, state.schema, [narrowing.column], values))
        rel = state_relation(self.ctx.spark, self.ctx.warehouse, state, identity=True, row_ids=True)
        if bounds is not None:
            lo, hi = (sql_literal(b) for b in bounds)
            rel = rel.where(f"{quoted(key)} BETWEEN {lo} AND {hi}")
        if narrowing is not None:
            listed = ", ".join(sql_literal(v) for v in narrowing.values)
            rel = rel.where(f"{quoted(narrowing.column)} IN ({listed})")
        columns = [quoted(c.name) for c in state.schema.visible]
        rid = table_row_id(state.schema)
        return rel.select(*columns, f"{rid} AS {VIEW_ROW_ID}")

    def _touched(self, info: TableInfo, key: str, changed: tuple[int, int]) -> tuple | None:
        first, last = changed
        plan = plan_interval(
            self.ctx.catalog, info, start=first, end=last, information=Information.DEFAULT
        )
        files = plan.before_files.files + plan.before_deleted.files + plan.after_files.files
        schema = self.ctx.catalog.schema_at(info.table_id, last)
        return value_range(files, schema, key)

    def _changes(self, info: TableInfo, first: int, last: int) -> Relation:
        """The changes of ``info`` over ``(first, last]``: one scan for every plan of a round
        that reads them (``Env.shared``, ``changes_key``)."""
        information = self.information or Information.DEFAULT
        if information is Information.APPEND_ONLY and only_inserted_between(
            self.ctx.catalog, info.table_id, start=first, end=last
        ):  # the same rows: read as the round's other readers of the interval read them
            information = Information.DEFAULT

        def scan() -> Relation:
            rel = changes_between(self.ctx, info, start=first, end=last, information=information)
            schema = self.ctx.catalog.schema_at(info.table_id, last)
            columns = [quoted(c.name) for c in schema.visible]
            return rel.select(
                *columns,
                f"{quoted(METADATA_ROW_ID)} AS {VIEW_ROW_ID}",
                f"{quoted(METADATA_ACTION)} AS {VIEW_ACTION}",
            )

        if self.ctx.shared is None:
            return scan()
        key = changes_key(info.table_id, start=first, end=last, information=information)
        return self.ctx.shared.relation(key, scan)
