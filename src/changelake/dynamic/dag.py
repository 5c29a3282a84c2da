"""Refreshing dynamic tables with their upstreams at one data timestamp.

The dynamic tables a query reads (directly or through views) are refreshed first, each before
those that read it, all at the same data timestamp, so that a downstream never mixes two upstream
points (a dynamic table reads an upstream only at the version its refresh at exactly that point
left). A refresh that fails records a FAILED history row (its own commit); the dynamic tables
that read it are not refreshed in that round (a SKIPPED row each). A refresh that lost a race
with another refresh of the same table records nothing: the other refresh is the history.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from changelake.catalog.alters import AlterDynamicTable
from changelake.catalog.model import (
    DynamicTableInfo,
    RefreshAction,
    RefreshMode,
    RefreshRecord,
    RefreshState,
    SchedulingState,
)
from changelake.catalog.requests import (
    CommitRequest,
    RecordRefresh,
    Requirement,
    Update,
)
from changelake.dynamic.definition import Definition, define_all
from changelake.dynamic.nodata import base_versions_at, no_data_plans, run_no_data
from changelake.dynamic.refresh import (
    Outcome,
    RefreshPlan,
    data_timestamp_now,
    plan_refresh,
    result_key,
    run_refresh,
)
from changelake.dynamic.waves import in_waves
from changelake.errors import (
    ChangelakeError,
    ConflictError,
    DynamicTableError,
    TableNotFoundError,
    did_you_mean,
)
from changelake.plan.round_reads import changes_key
from changelake.runtime.env import Context
from changelake.storage.shared import SharedReads
from changelake.txn.context import StatementContext, new_statement_id

_RETRIES = 3  # a manual refresh whose upstream moved to a later point meanwhile starts over


def dynamic_table(ctx: StatementContext, name: str) -> DynamicTableInfo:
    """The dynamic table called ``name``, or an error saying what ``name`` is instead."""
    found = ctx.catalog.find_dynamic_table(name)
    if found is not None:
        return found
    if ctx.catalog.find_table(name) is not None:
        raise TableNotFoundError(
            f"{name} is a table, not a dynamic table; ALTER TABLE and DROP TABLE work on it."
        )
    known = [d.name for d in ctx.catalog.list_dynamic_tables()]
    raise TableNotFoundError(f"Dynamic table {name!r} does not exist.{did_you_mean(name, known)}")


def in_order(
    ctx: StatementContext, roots: Sequence[DynamicTableInfo]
) -> tuple[list[DynamicTableInfo], dict[int, Definition]]:
    """``roots`` and their upstreams (the dynamic tables their queries read, directly or through
    views), transitively, each after those it reads, as their rows are now; and each one's query
    as defined now. Which tables those are follows from the catalog's definitions alone, so it is
    kept per definitions token (txn/definitions.py): then their rows are one query and their
    queries' tables another (plan/kept.py)."""
    kept = ctx.catalog.definitions()
    key = ("dynamic tables in order", tuple(d.table_id for d in roots))
    ids = None if kept is None else kept.get(key)
    if ids is not None:
        found = ctx.catalog.dynamic_tables_by_id(ids)
        if len(found) == len(ids):  # else one was dropped meanwhile
            order = [found[t] for t in ids]
            return order, dict(zip(ids, define_all(ctx, _queries(order)), strict=True))
    order, definitions = _discovered(ctx, roots)
    if kept is not None:
        kept.put(key, tuple(d.table_id for d in order))
    return order, definitions


def _discovered(
    ctx: StatementContext, roots: Sequence[DynamicTableInfo]
) -> tuple[list[DynamicTableInfo], dict[int, Definition]]:
    """``in_order`` read a level of upstreams at a time: their rows in one query, their queries'
    tables in one."""
    found = ctx.catalog.dynamic_tables_by_id([d.table_id for d in roots])
    definitions: dict[int, Definition] = {}
    level = list(found.values())
    while level:
        ids = [d.table_id for d in level]
        definitions.update(zip(ids, define_all(ctx, _queries(level)), strict=True))
        wanted = {u for d in level for u in upstreams(definitions[d.table_id]) if u not in found}
        level = list(ctx.catalog.dynamic_tables_by_id(sorted(wanted)).values())
        found |= {d.table_id: d for d in level}
    order: list[DynamicTableInfo] = []
    placed: set[int] = set()

    def visit(d: DynamicTableInfo) -> None:
        if d.table_id in placed:
            return
        placed.add(d.table_id)
        for upstream in upstreams(definitions[d.table_id]):
            if upstream in found:  # else dropped meanwhile
                visit(found[upstream])
        order.append(d)

    for root in roots:
        if root.table_id in found:  # else dropped meanwhile
            visit(found[root.table_id])
    return order, definitions


def _queries(dts: Sequence[DynamicTableInfo]) -> list[tuple[str, str]]:
    return [(d.definition.sql, f"dynamic table {d.name}") for d in dts]


def upstreams(definition: Definition) -> list[int]:
    """The ids of the dynamic tables a query reads."""
    return [t for t, info in definition.tables.items() if info.is_dynamic()]


@dataclass
class Round:
    """What refreshing a set of dynamic tables at one data timestamp did."""

    data_timestamp: float
    refreshed: list[Outcome]
    failed: dict[int, ChangelakeError]  # table id -> its error, or its upstream's (skipped)
    lost: list[int]  # table ids another refresh got to first


def refresh_round(
    ctx: Context,
    roots: Sequence[DynamicTableInfo],
    data_timestamp: float,
    *,
    trigger: Callable[[DynamicTableInfo], str],
    requirements: tuple[Requirement, ...] = (),
    suspend_after: int | None = None,
    skip_suspended: bool = False,
    statement_id: str | None = None,
    workers: Executor | None = None,
) -> Round:
    """Refresh ``roots`` and their upstreams at ``data_timestamp``, each once; with
    ``skip_suspended`` (the scheduler), a suspended one and those that read it are not. The
    NO_DATA refreshes are decided first, from one read, and commit as one (nodata.py); the others
    run after their upstreams: one by one, or on ``workers`` those that do not read each other
    at once (each with a statement context of its own). The changes of a base table that several
    of them read over the same interval are scanned once for the round, and a refresh's delta
    is what the tables that read it read as its changes (``shared_reads``).
    Every refresh commits as statement ``statement_id`` (None: each as one of its own)."""
    order, definitions = in_order(ctx, roots)  # their rows as they are at T
    started = ctx.now()
    known = base_versions_at(ctx, definitions.values(), data_timestamp)
    done = Round(data_timestamp, [], {}, [])
    suspended = SchedulingState.SUSPENDED
    live = [d for d in order if not (skip_suspended and d.scheduling_state == suspended)]
    done.refreshed += _no_data(
        ctx,
        no_data_plans(live, definitions, data_timestamp, known),
        started_at=started,
        trigger=trigger,
        requirements=requirements,
        statement_id=statement_id,
    )
    committed = {o.table_id for o in done.refreshed}
    rest = {d.table_id: d for d in order if d.table_id not in committed}
    wanted = shared_reads(list(rest.values()), definitions, known)
    shared = SharedReads(ctx.spark, wanted)
    in_round = ctx.sharing(shared) if wanted else ctx  # else no Env (settings) anew

    def refresh(table_id: int) -> None:
        own = in_round if workers is None else in_round.env.context()
        _refresh_in_round(
            own,
            rest[table_id],
            definitions[table_id],
            done,
            trigger=trigger,
            requirements=requirements,
            suspend_after=suspend_after,
            skip_suspended=skip_suspended,
            statement_id=statement_id,
            known=known,
        )

    try:
        in_waves(
            list(rest),
            after=lambda t: upstreams(definitions[t]),
            run=refresh,
            workers=workers,
        )
    finally:
        shared.release()
    position = {d.table_id: i for i, d in enumerate(order)}
    done.refreshed.sort(key=lambda o: position[o.table_id])
    return done


def shared_reads(
    dts: Sequence[DynamicTableInfo],
    definitions: Mapping[int, Definition],
    known: Mapping[int, int],
) -> set[Hashable]:
    """What the incremental refreshes of ``dts`` (upstreams first) share in a round
    (``storage.shared``): the change scans of base tables that more than one of them reads over
    the same interval (from its frontier to the version at T, ``known``), read once; and the
    deltas of refreshes of tables that another reads from where they are now (``result_key``),
    whose one commit's changes they are. Refreshes that read a table from different
    frontiers read its changes apart."""
    scans: Counter[Hashable] = Counter()
    results: set[Hashable] = set()  # one reader is enough: it reads none of their files
    now = {d.table_id: d.info.current_version for d in dts}
    for dyn in dts:
        if dyn.frontiers is None or dyn.definition.effective_mode == RefreshMode.FULL:
            continue
        frontiers = dict(dyn.frontiers)
        for t, info in definitions[dyn.table_id].tables.items():
            start, end = frontiers.get(t), known.get(t)
            if info.is_dynamic() and t in now and start == now[t]:
                results.add(result_key(t))
            elif not info.is_dynamic() and start is not None and end is not None and start < end:
                scans[changes_key(t, start=start, end=end)] += 1
    return {key for key, n in scans.items() if n > 1} | results


def _refresh_in_round(
    ctx: Context,
    dyn: DynamicTableInfo,
    definition: Definition,
    done: Round,
    *,
    trigger: Callable[[DynamicTableInfo], str],
    requirements: tuple[Requirement, ...],
    suspend_after: int | None,
    skip_suspended: bool,
    statement_id: str | None,
    known: Mapping[int, int],
) -> None:
    """Refresh ``dyn`` in the round ``done`` (its upstreams' refreshes in it ended), into it."""
    data_timestamp = done.data_timestamp
    current = ctx.catalog.dynamic_table_by_id(dyn.table_id)
    if current is None:
        return  # dropped meanwhile
    blocked = [u for u in upstreams(definition) if u in done.failed or u in done.lost]
    if blocked:
        if blocked[0] in done.failed:
            error = done.failed[blocked[0]]
            reason = f"an upstream dynamic table failed: {error}"
            _record(ctx, current, RefreshState.SKIPPED, trigger(current), data_timestamp, reason)
            done.failed[dyn.table_id] = error
        else:
            done.lost.append(dyn.table_id)
        return
    if skip_suspended and current.scheduling_state == SchedulingState.SUSPENDED:
        done.failed[dyn.table_id] = DynamicTableError(
            f"dynamic table {current.name} is suspended ({current.suspended_reason})"
        )
        return
    if current.data_timestamp == data_timestamp:
        return  # refreshed at this point already (by another refresh of this round's)
    try:
        done.refreshed.append(
            refresh_one(
                ctx,
                current,
                data_timestamp,
                definition,
                trigger=trigger(current),
                requirements=requirements,
                suspend_after=suspend_after,
                statement_id=statement_id,
                known=known,
            )
        )
    except ConflictError:
        done.lost.append(dyn.table_id)
    except ChangelakeError as e:
        done.failed[dyn.table_id] = e


def _no_data(
    ctx: StatementContext,
    plans: list[RefreshPlan],
    *,
    started_at: float,
    trigger: Callable[[DynamicTableInfo], str],
    requirements: tuple[Requirement, ...],
    statement_id: str | None,
) -> list[Outcome]:
    """The round's NO_DATA refreshes ``plans``, committed as one (nodata.py); none if another
    refresh got to one of them first (each is then refreshed on its own, which tells which)."""
    if not plans:
        return []
    try:
        return run_no_data(
            ctx,
            plans,
            trigger=trigger,
            started_at=started_at,
            requirements=requirements,
            statement_id=statement_id,
        )
    except ConflictError:
        return []


def refresh_with_upstreams(
    ctx: Context,
    target: DynamicTableInfo,
    *,
    trigger: str = "MANUAL",
) -> list[Outcome]:
    """Refresh dynamic table ``target`` now, its upstreams first at the same data timestamp,
    all as the statement of ``ctx``. Raises the refresh's error if it or an upstream failed."""
    ctx.require_no_transaction(f"ALTER DYNAMIC TABLE {target.name} REFRESH")
    for attempt in range(_RETRIES):
        done = refresh_round(
            ctx,
            [target],
            data_timestamp_now(ctx),
            trigger=lambda d: trigger if d.table_id == target.table_id else "DOWNSTREAM",
            statement_id=ctx.statement_id,
        )
        if done.failed:
            raise next(iter(done.failed.values()))
        if target.table_id not in done.lost or attempt == _RETRIES - 1:
            break
    if target.table_id in done.lost:
        raise ConflictError(
            f"Dynamic table {target.name} kept being refreshed by other refreshes while this one"
            " ran; it is up to date as of their data timestamp."
        )
    return done.refreshed


def refresh_one(
    ctx: Context,
    dyn: DynamicTableInfo,
    data_timestamp: float,
    definition: Definition,
    *,
    trigger: str,
    requirements: tuple[Requirement, ...] = (),
    suspend_after: int | None = None,
    statement_id: str | None = None,
    known: Mapping[int, int] | None = None,
) -> Outcome:
    """Refresh ``dyn`` at ``data_timestamp`` with its query as ``definition`` (defined at the
    start of the round; ``known``: the versions at it of base tables, read for the round); a
    failure goes into its history, then raises."""
    started = ctx.now()
    action, reason = RefreshAction.FULL, ""
    try:
        plan = plan_refresh(ctx, dyn, definition, data_timestamp, known=known)
        action, reason = plan.action, plan.reason
        if action == RefreshAction.NO_DATA:
            (done,) = run_no_data(
                ctx,
                [plan],
                trigger=lambda _: trigger,
                started_at=started,
                requirements=requirements,
                statement_id=statement_id,
            )
            return done
        return run_refresh(
            ctx,
            plan,
            trigger=trigger,
            started_at=started,
            requirements=requirements,
            statement_id=statement_id,
        )
    except ConflictError:
        raise
    except ChangelakeError as e:
        _record(
            ctx,
            dyn,
            RefreshState.FAILED,
            trigger,
            data_timestamp,
            str(e),
            action=action,
            reason=reason,
            started=started,
            suspend_after=suspend_after,
        )
        raise


def _record(
    ctx: StatementContext,
    dyn: DynamicTableInfo,
    state: str,
    trigger: str,
    data_timestamp: float,
    error: str,
    *,
    action: str = RefreshAction.NO_DATA,
    reason: str = "",
    started: float | None = None,
    suspend_after: int | None = None,
) -> None:
    """Record a refresh that did not happen (FAILED: counted; ``suspend_after`` consecutive
    failures suspend the table with the error as the reason; SKIPPED)."""
    updates: list[Update] = []
    if state == RefreshState.FAILED:
        failures = dyn.failures + 1
        if suspend_after is not None and failures >= suspend_after:
            reason = f"suspended after {failures} failed refreshes in a row; the last: {error}"
            update = AlterDynamicTable.suspending(dyn.table_id, reason, failures=failures)
        else:
            update = AlterDynamicTable(dyn.table_id, failures=failures)
        updates.append(update)
    record = RefreshRecord(
        action=action,
        state=state,
        trigger=trigger,
        data_timestamp=data_timestamp,
        started_at=started if started is not None else ctx.now(),
        error=error,
        reason=reason,
    )
    try:
        ctx.catalog.commit(
            [
                CommitRequest(
                    new_statement_id(),
                    f"REFRESH {state}",
                    updates=(*updates, RecordRefresh(dyn.table_id, record)),
                )
            ],
            clock=ctx.clock,
        )
    except ConflictError:
        pass  # dropped meanwhile: no history to keep; the refresh's own error says more
