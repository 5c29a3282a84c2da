"""Refreshing dynamic tables.

A refresh reads every table its query reads at one *data timestamp* T: a base table at its last
version committed at or before T (as ``AT (TIMESTAMP => T)`` reads it), an upstream dynamic table
at the version its refresh for the latest data timestamp <= T left. It commits the result with,
per base table, the version it read (its frontier), in one request that also records the refresh
in the history and requires the frontiers it started from (``RefreshedFrom``): of two refreshes
racing, one commits and the other changes nothing.

Actions: NO_DATA (no table changed since the frontiers: no Spark job, the data timestamp moves),
INCREMENTAL (the query's minimum delta from the frontiers, ``plan.views.changes_over``),
FULL (the query at T, diffed with the stored rows by ROW_ID: only what differs is written), and
REINITIALIZE (a FULL one because the frontiers no longer tell what changed: a view it reads was
replaced, a table it reads was replaced, or their history left retention).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from changelake.catalog.alters import AlterDynamicTable
from changelake.catalog.model import (
    DynamicTableInfo,
    RefreshAction,
    RefreshMode,
    RefreshRecord,
    RefreshState,
    TableInfo,
)
from changelake.catalog.requests import (
    RecordRefresh,
    RefreshedFrom,
    Requirement,
    Update,
)
from changelake.catalog.writes import TableWrite, write_request
from changelake.changes.columns import METADATA_ACTION, METADATA_ISUPDATE, METADATA_ROW_ID
from changelake.changes.plan import Information
from changelake.dml.common import Target
from changelake.dml.keyed import STORED, Unresolved, apply_delta, diff
from changelake.dynamic.adaptive import adaptive, interval_versions, only_moved
from changelake.dynamic.definition import Definition
from changelake.dynamic.evaluate import query_rows
from changelake.dynamic.maintain import (
    aggregated_rows,
    explain_lines,
    input_rows,
    maintained,
    maintained_delta,
    stored_state,
)
from changelake.errors import (
    ConflictError,
    DynamicTableError,
    TimeTravelError,
)
from changelake.plan.monotonic import inserts_only
from changelake.plan.round_reads import changes_key, written_changes
from changelake.plan.views import Versions, changes_over
from changelake.runtime.env import Context
from changelake.schema import quoted
from changelake.spark import native
from changelake.spark.jobs import counted_jobs
from changelake.spark.relation import Relation
from changelake.storage import index
from changelake.storage.snapshot import state_relation
from changelake.txn.context import StatementContext, new_statement_id
from changelake.txn.points import Point, PointKind, resolve, resolve_all


@dataclass(frozen=True)
class RefreshPlan:
    """What a refresh of ``dt`` at ``data_timestamp`` will do, and why."""

    dt: DynamicTableInfo
    definition: Definition
    action: str
    reason: str
    data_timestamp: float
    versions: Versions  # start: each table's frontier; end: its version at the data timestamp

    @property
    def frontiers(self) -> tuple[tuple[int, int], ...]:
        return tuple((t, end) for t, (_, _, end) in sorted(self.versions.items()))

    def lines(self) -> list[str]:
        """The plan, for EXPLAIN."""
        when = dt.datetime.fromtimestamp(self.data_timestamp).isoformat(sep=" ")
        lines = [
            f"REFRESH dynamic table {self.dt.name}: {self.action} ({self.reason})",
            f"  data timestamp {when}",
        ]
        for info, start, end in sorted(self.versions.values(), key=lambda v: v[0].name):
            lines.append(f"  {info.name}: versions {start} -> {end}")
        return lines


@dataclass(frozen=True)
class Outcome:
    """A committed refresh: the table, its history record and the version it left."""

    table_id: int
    name: str
    record: RefreshRecord
    version: int


def data_timestamp_now(ctx: StatementContext) -> float:
    """The data timestamp of a refresh starting now: the clock, or the last commit if that is
    later (a clock behind another machine's), so that everything committed before the refresh
    began is in it."""
    return max(round(ctx.now(), 6), ctx.catalog.settled_snapshot().committed_at)


def version_at(ctx: StatementContext, info: TableInfo, data_timestamp: float) -> int:
    """The version of ``info`` a refresh at ``data_timestamp`` reads."""
    if info.is_dynamic():
        found = ctx.catalog.dynamic_version_at(info.table_id, data_timestamp)
        if found is None:
            # it was refreshed to another point meanwhile: reading it would mix two points
            raise ConflictError(
                f"Dynamic table {info.name} was not refreshed at the data timestamp"
                f" {dt.datetime.fromtimestamp(data_timestamp).isoformat(sep=' ')} (another"
                " refresh moved it); refresh again."
            )
        return found
    when = dt.datetime.fromtimestamp(data_timestamp).isoformat(sep=" ")
    return resolve(ctx, info, Point(PointKind.TIMESTAMP, data_timestamp, text=repr(when)))


def versions_at(
    ctx: StatementContext,
    infos: Sequence[TableInfo],
    data_timestamp: float,
    *,
    explain: bool,
    known: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """``version_at`` of each table (by id), the base tables' asked of the catalog at once
    (those in ``known``, read already at this data timestamp, not again); for ``explain``,
    dynamic tables as they are now."""
    dynamic = [i for i in infos if i.is_dynamic()]
    ends = {
        i.table_id: ctx.read_version(i) if explain else version_at(ctx, i, data_timestamp)
        for i in dynamic
    }
    known = known or {}
    ends |= {i.table_id: known[i.table_id] for i in infos if i.table_id in known}
    when = dt.datetime.fromtimestamp(data_timestamp).isoformat(sep=" ")
    point = Point(PointKind.TIMESTAMP, data_timestamp, text=repr(when))
    ends |= resolve_all(ctx, [i for i in infos if i.table_id not in ends], point)
    return {i.table_id: ends[i.table_id] for i in infos}


def plan_refresh(
    ctx: StatementContext,
    dyn: DynamicTableInfo,
    definition: Definition,
    data_timestamp: float,
    *,
    explain: bool = False,
    known: Mapping[int, int] | None = None,
) -> RefreshPlan:
    """The refresh of ``dyn``, its query defined as ``definition``, at ``data_timestamp`` (its
    upstreams refreshed at it already; for ``explain``, upstream dynamic tables as they are
    now); ``known``: the versions at it of base tables, read already for the round."""
    if dyn.data_timestamp is not None and dyn.data_timestamp > data_timestamp:
        raise ConflictError(
            f"Dynamic table {dyn.name} was refreshed to a later point than this refresh's;"
            " nothing was written."
        )
    infos = list(definition.tables.values())
    ends = versions_at(ctx, infos, data_timestamp, explain=explain, known=known)
    frontiers = dict(dyn.frontiers or ())
    versions = {
        t: (info, frontiers.get(t, ends[t]), ends[t]) for t, info in definition.tables.items()
    }
    action, reason = _action(ctx, dyn, definition, frontiers, ends)
    if action == RefreshAction.INCREMENTAL and dyn.definition.refresh_mode == RefreshMode.AUTO:
        action, reason = adaptive(ctx, dyn, frontiers, ends)
    return RefreshPlan(dyn, definition, action, reason, data_timestamp, versions)


UNCHANGED = "no table it reads changed since its last refresh"
ONLY_COMPACTED = "the tables it reads were only compacted since its last refresh"


def unchanged(dyn: DynamicTableInfo, definition: Definition, ends: Mapping[int, int]) -> bool:
    """Whether every table ``definition`` reads is at T (``ends``: its version at T, by id)
    where ``dyn``'s last refresh left it, with the query as it was then: a NO_DATA refresh."""
    return (
        dyn.frontiers is not None
        and definition.fingerprint == dyn.definition.fingerprint
        and bool(definition.tables)
        and dict(dyn.frontiers) == dict(ends)
    )


def _action(
    ctx: StatementContext,
    dyn: DynamicTableInfo,
    definition: Definition,
    frontiers: dict[int, int],
    ends: dict[int, int],
) -> tuple[str, str]:
    if dyn.frontiers is None:
        return RefreshAction.FULL, "its first refresh"
    if definition.fingerprint != dyn.definition.fingerprint:
        return RefreshAction.REINITIALIZE, "a view its query reads was replaced"
    if set(frontiers) != set(ends):
        return RefreshAction.REINITIALIZE, "a table its query reads was replaced"
    checked = [
        (t, start + 1)
        for t, start in frontiers.items()
        if 0 <= start < ctx.read_version(definition.tables[t])
    ]
    # what the checks below ask, and the versions ``adaptive`` counts when they are few
    counted = interval_versions(frontiers, ends)
    ctx.catalog.version_infos(sorted({*checked, *(counted or ())}))
    for t, start in frontiers.items():
        try:
            ctx.check_readable(definition.tables[t], start)
        except TimeTravelError:
            return (
                RefreshAction.REINITIALIZE,
                f"the history of {definition.tables[t].name} since its last refresh left retention",
            )
    if unchanged(dyn, definition, ends):
        return RefreshAction.NO_DATA, UNCHANGED
    if only_moved(ctx, frontiers, ends):
        return RefreshAction.NO_DATA, ONLY_COMPACTED
    if dyn.definition.effective_mode == RefreshMode.FULL:
        return RefreshAction.FULL, dyn.definition.mode_reason
    return RefreshAction.INCREMENTAL, "its query's changes since the last refresh"


def run_refresh(
    ctx: Context,
    plan: RefreshPlan,
    *,
    trigger: str,
    started_at: float,
    requirements: tuple[Requirement, ...] = (),
    statement_id: str | None = None,
) -> Outcome:
    """Run ``plan`` and commit it, also requiring ``requirements`` (the scheduler's lease);
    raises, and commits nothing, if it fails or lost a race. The commit belongs to statement
    ``statement_id`` (the ALTER ... REFRESH that ran it, so AT (STATEMENT => ...) finds it);
    None, a scheduled refresh, gets an id of its own. A NO_DATA plan commits with its round's
    others (``nodata.run_no_data``)."""
    assert plan.action != RefreshAction.NO_DATA, plan
    dyn = plan.dt
    write_id = new_statement_id()  # the files' directories: one statement may run several
    table_id, name, since = dyn.table_id, dyn.name, dyn.info.current_version
    target = Target(dyn.info, ctx.state(dyn.info, since))
    with counted_jobs(ctx.spark, f"refresh of dynamic table {dyn.name}") as count:
        try:  # first as if no group needs a recompute: one plan, no job to count them
            applied, kept = _written(ctx, plan, target, write_id, optimistic=True)
        except Unresolved:
            write_id = new_statement_id()
            applied, kept = _written(ctx, plan, target, write_id, optimistic=False)
        jobs = count()
    record = RefreshRecord(
        action=plan.action,
        state=RefreshState.SUCCEEDED,
        trigger=trigger,
        data_timestamp=plan.data_timestamp,
        started_at=started_at,
        frontiers=plan.frontiers,
        rows_inserted=applied.inserted,
        rows_deleted=applied.deleted,
        rows_updated=applied.updated,
        spark_jobs=jobs,
        reason=plan.reason,
    )
    updates: list[Update] = []
    if plan.definition.fingerprint != dyn.definition.fingerprint:
        updates.append(AlterDynamicTable(table_id, fingerprint=plan.definition.fingerprint))
    updates.append(RecordRefresh(table_id, record))
    request = write_request(
        statement_id or write_id,
        f"REFRESH {plan.action}",
        [applied],
        updates=updates,
        requirements=(
            *requirements,
            RefreshedFrom(table_id, name, dyn.frontiers, dyn.data_timestamp),
        ),
    )
    result = ctx.catalog.commit([request], clock=ctx.clock)
    version = result.version_of(table_id)
    if kept is not None and ctx.shared is not None and version is not None:
        # the table's changes over this commit, for the round's readers of it
        changes = written_changes(kept, target.state.schema)
        ctx.shared.hand(changes_key(table_id, start=since, end=version), changes)
    return Outcome(table_id, name, record, version or since)


def result_key(table_id: int) -> tuple[str, int]:
    """The key among a round's shared reads (``Env.shared``) that asks the refresh of dynamic
    table ``table_id`` to keep its delta for the round's readers of the table."""
    return ("refresh result", table_id)


def _written(
    ctx: Context,
    plan: RefreshPlan,
    target: Target,
    write_id: str,
    *,
    optimistic: bool,
) -> tuple[TableWrite, Relation | None]:
    """The refresh's delta written to files of ``write_id`` (``_delta``'s ``optimistic``), and
    the delta persisted where the round's readers of the table read it (``result_key``)."""
    shared = ctx.shared
    keep = shared is not None and shared.wants(result_key(plan.dt.table_id))
    with _delta(ctx, plan, target, optimistic=optimistic) as (delta, changed, inserts):
        kept = shared.keep(delta) if shared is not None and keep else None
        written = apply_delta(
            ctx.spark,
            ctx.warehouse,
            target,
            kept or delta,
            statement_id=write_id,
            changed=changed,
            inserts_only=inserts,
            typed=plan.action == RefreshAction.INCREMENTAL,
        )
    return written, kept


@contextmanager
def _delta(
    ctx: Context,
    plan: RefreshPlan,
    target: Target,
    *,
    optimistic: bool,
) -> Iterator[tuple[Relation, Callable[[], int] | None, bool]]:
    """The minimum delta that brings the stored rows to the query at the data timestamp (for
    the ``with`` block), and for a view's changes the rows its tables changed and whether it
    is known to insert only (``apply_delta``'s ``changed`` and ``inserts_only``);
    ``optimistic``: see ``maintained_delta``."""
    schema = target.state.schema
    names = [c.name for c in schema.visible]
    stored = [c.name for c in schema.stored]
    tree = plan.definition.tree
    ends = {t: (info, end) for t, (info, _, end) in plan.versions.items()}
    found = maintained(ctx, plan.definition, ends)
    state = stored_state(found, schema)
    if plan.action == RefreshAction.INCREMENTAL and state is not None:
        with maintained_delta(ctx, state, plan.versions, target, optimistic=optimistic) as delta:
            yield delta, None, False
        return
    if plan.action == RefreshAction.INCREMENTAL and tree is not None:
        # a view that only gains rows, over versions that only added rows: its APPEND_ONLY
        # changes are its minimum delta, without pairing the events of a ROW_ID
        inserts = inserts_only(ctx, tree, plan.versions)
        information = Information.APPEND_ONLY if inserts else Information.DEFAULT
        rel, _ = changes_over(ctx, plan.dt.name, tree, plan.versions, information=information)
        hidden = (METADATA_ACTION, METADATA_ISUPDATE, METADATA_ROW_ID)
        intervals = [(t, start, end) for t, (_, start, end) in plan.versions.items() if end > start]
        changed = partial(ctx.catalog.rows_changed, intervals)
        yield rel.select(*_renaming(rel.columns, names, hidden)), changed, inserts
        return
    if state is not None:
        rows = aggregated_rows(state, input_rows(ctx, state, ends), names)
    else:
        found = query_rows(ctx, plan.definition, ends, plan.data_timestamp)
        found = native.select(found, _renaming(found.columns, names, (METADATA_ROW_ID,)))
        # state columns the query no longer maintains are left NULL
        rows = Relation.of_frame(found).select(
            "*", *[f"CAST(NULL AS {c.type}) AS {quoted(c.name)}" for c in schema.state]
        )
    stored_rows = state_relation(ctx.spark, ctx.warehouse, target.state, identity=True)
    yield diff(stored_rows, rows, stored, STORED), None, False


def _renaming(columns: Sequence[str], names: list[str], hidden: tuple[str, ...]) -> list[str]:
    """The query's ``columns`` renamed by position to the dynamic table's column ``names``, and
    the ``hidden`` ones as they are (SQL expressions)."""
    shown = [c for c in columns if c not in hidden]
    if len(shown) != len(names):
        raise DynamicTableError(
            f"The query now has {len(shown)} column(s) ({', '.join(shown)}), the dynamic table"
            f" {len(names)} ({', '.join(names)}): a table it reads gained or lost a column"
            " (SELECT * reads them all). Recreate it with CREATE OR REPLACE DYNAMIC TABLE."
        )
    renamed = [f"{quoted(a)} AS {quoted(b)}" for a, b in zip(shown, names, strict=True)]
    return [*renamed, *[quoted(h) for h in hidden]]


def explain_refresh(
    ctx: Context,
    order: list[DynamicTableInfo],
    definitions: dict[int, Definition],
) -> list[str]:
    """EXPLAIN ALTER DYNAMIC TABLE ... REFRESH: what refreshing ``order`` (upstreams first)
    now would do, from metadata: each refresh's action and, for an incremental one, the
    differentiated plan."""
    data_timestamp = data_timestamp_now(ctx)
    lines = []
    for dyn in order:
        plan = plan_refresh(ctx, dyn, definitions[dyn.table_id], data_timestamp, explain=True)
        lines += plan.lines()
        tree = plan.definition.tree
        if plan.action == RefreshAction.INCREMENTAL and tree is not None:
            _, view_plan = changes_over(
                ctx,
                dyn.name,
                tree,
                plan.versions,
                information=Information.DEFAULT,
            )
            ends = {t: (info, end) for t, (info, _, end) in plan.versions.items()}
            state = stored_state(
                maintained(ctx, plan.definition, ends),
                ctx.state(dyn.info).schema,
            )
            if state is not None:
                lines += explain_lines(ctx, state, plan.versions)
                continue
            lines += ["  " + line for line in view_plan.lines()]
            lines.append("  " + index.describe(ctx.state(dyn.info).files))
    return lines
