"""The NO_DATA refreshes of a round: decided together from one read, committed as one.

A refresh at data timestamp T is NO_DATA when every table its query reads is at T where the
table's last refresh left it (``refresh.unchanged``): a base table at its version at T, an
upstream dynamic table at the version the upstream's refresh at T leaves. When that refresh is
NO_DATA too, it writes nothing, so that version is the one the upstream has now. Upstreams
first, the NO_DATA refreshes of a round therefore follow from the dynamic tables' rows and the
versions at T of the base tables they read (one query), with no Spark and no file list.

They commit in one request, before any other refresh of the round runs: a history row per table
(whose version is the one a downstream reads the table at T), each table's ``RefreshedFrom`` (the
frontiers it was planned from) and the caller's requirements (the scheduler's lease). If another
refresh got to one of them first, nothing is written and the round refreshes each table on its
own (dag.py), which tells which lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from changelake.catalog.model import (
    DynamicTableInfo,
    RefreshAction,
    RefreshRecord,
    RefreshState,
)
from changelake.catalog.requests import CommitRequest, RecordRefresh, RefreshedFrom, Requirement
from changelake.dynamic.definition import Definition
from changelake.dynamic.refresh import UNCHANGED, Outcome, RefreshPlan, unchanged, versions_at
from changelake.errors import ChangelakeError
from changelake.txn.context import StatementContext, new_statement_id


def base_versions_at(
    ctx: StatementContext, definitions: Iterable[Definition], data_timestamp: float
) -> dict[int, int]:
    """The version at ``data_timestamp`` of every base table the queries ``definitions`` read, in
    one query (a round reads each once); none if one has no readable version at it (then each
    refresh reads its own, and the one that cannot read says so)."""
    base = {t: i for d in definitions for t, i in d.tables.items() if not i.is_dynamic()}
    try:
        return versions_at(ctx, list(base.values()), data_timestamp, explain=False)
    except ChangelakeError:
        return {}


def no_data_plans(
    dts: Sequence[DynamicTableInfo],
    definitions: Mapping[int, Definition],
    data_timestamp: float,
    base_versions: Mapping[int, int],
) -> list[RefreshPlan]:
    """The refreshes of ``dts`` (upstreams first, as their rows are now) at ``data_timestamp``
    that are NO_DATA, given the versions at it of the base tables they read (``base_versions``,
    by id). The others are left to be planned one by one, after their upstreams."""
    plans: dict[int, RefreshPlan] = {}
    for dyn in dts:
        if dyn.data_timestamp is None or dyn.data_timestamp >= data_timestamp:
            continue  # never refreshed; or at T already (nothing to do), or later (it lost)
        definition = definitions[dyn.table_id]
        ends = {t: base_versions[t] for t in definition.tables if t in base_versions}
        ends |= {t: plans[t].dt.info.current_version for t in definition.tables if t in plans}
        if len(ends) == len(definition.tables) and unchanged(dyn, definition, ends):
            versions = {t: (info, ends[t], ends[t]) for t, info in definition.tables.items()}
            plans[dyn.table_id] = RefreshPlan(
                dyn, definition, RefreshAction.NO_DATA, UNCHANGED, data_timestamp, versions
            )
    return list(plans.values())


def run_no_data(
    ctx: StatementContext,
    plans: Sequence[RefreshPlan],
    *,
    trigger: Callable[[DynamicTableInfo], str],
    started_at: float,
    requirements: tuple[Requirement, ...] = (),
    statement_id: str | None = None,
) -> list[Outcome]:
    """Commit the NO_DATA refreshes ``plans`` (upstreams first) in one request, also requiring
    ``requirements``; raises ConflictError, and writes nothing, if another refresh of one of
    them committed since it was planned. The commit belongs to statement ``statement_id``
    (None: one of its own)."""
    assert all(p.action == RefreshAction.NO_DATA for p in plans)
    records = [
        RefreshRecord(
            action=RefreshAction.NO_DATA,
            state=RefreshState.SUCCEEDED,
            trigger=trigger(p.dt),
            data_timestamp=p.data_timestamp,
            started_at=started_at,
            frontiers=p.frontiers,
            reason=p.reason,
        )
        for p in plans
    ]
    request = CommitRequest(
        statement_id or new_statement_id(),
        f"REFRESH {RefreshAction.NO_DATA}",
        updates=tuple(RecordRefresh(p.dt.table_id, r) for p, r in zip(plans, records, strict=True)),
        requirements=(
            *requirements,
            *(
                RefreshedFrom(p.dt.table_id, p.dt.name, p.dt.frontiers, p.dt.data_timestamp)
                for p in plans
            ),
        ),
    )
    ctx.catalog.commit([request], clock=ctx.clock)
    return [
        Outcome(p.dt.table_id, p.dt.name, r, p.dt.info.current_version)
        for p, r in zip(plans, records, strict=True)
    ]
