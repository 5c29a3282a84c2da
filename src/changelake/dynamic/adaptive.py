"""AUTO's choice per refresh (Snowflake's adaptive refreshes, Enzyme's cost model): apply the
query's changes (INCREMENTAL) or recompute it (FULL), by the size of the change against the
tables the query reads, known from catalog metadata; and a refresh whose tables were only
compacted, which is NO_DATA. The measure is the refresh's reason (its history, EXPLAIN)."""

from __future__ import annotations

from collections.abc import Mapping

from changelake.catalog.model import DynamicTableInfo, RefreshAction
from changelake.catalog.tables import MOVING_OPERATIONS
from changelake.dynamic.measures import holds_extremes
from changelake.txn.context import StatementContext

# AUTO's choice per refresh: recompute (FULL) when the tables a query reads changed by more than
# this share of their rows, and by at least ADAPTIVE_LEAST_ROWS (fewer cost about a refresh's
# fixed part either way, so the refresh stays incremental). An incremental refresh costs what its
# inputs' changes cost (for a GROUP BY, the touched groups too), a recompute what the inputs hold;
# measured in bench `dynamic_adaptive`. REFRESH_MODE = INCREMENTAL or FULL fixes the action.
ADAPTIVE_SHARE = 0.1
ADAPTIVE_LEAST_ROWS = 100_000


def adaptive(
    ctx: StatementContext,
    dyn: DynamicTableInfo,
    frontiers: Mapping[int, int],
    ends: Mapping[int, int],
) -> tuple[str, str]:
    """INCREMENTAL or FULL by the size of the change against the tables, known from metadata:
    the rows the intervals' versions changed (an update counted twice) and the tables' live
    rows at the data timestamp; the reason gives both. A table keeping a MIN or MAX recomputes
    past the floor if the change deleted rows: some group then loses its extreme, and a group's
    recompute reads every input row (bench ``dynamic_adaptive``: FULL was faster at every share)."""
    counted = interval_versions(frontiers, ends)
    if counted is not None:  # read with the readability checks (``_action``)
        versions = ctx.catalog.version_infos(counted).values()
        changed = sum(v.rows_inserted + v.rows_deleted + 2 * v.rows_updated for v in versions)
        removed = sum(v.rows_deleted + v.rows_updated for v in versions)
    else:
        intervals = [(t, frontiers[t], end) for t, end in ends.items() if end > frontiers[t]]
        changed = removed = ctx.catalog.rows_changed(intervals)
    if changed < ADAPTIVE_LEAST_ROWS:
        return (
            RefreshAction.INCREMENTAL,
            f"{changed:,} rows changed since the last refresh",
        )
    schema = ctx.catalog.schema_at(dyn.table_id, dyn.info.current_version)
    if removed and holds_extremes(c.name for c in schema.state):
        return (
            RefreshAction.FULL,
            f"{changed:,} rows changed, {removed:,} of them deleted or updated, and the table"
            " keeps a MIN or MAX: a group that loses its extreme is recomputed from every input"
            " row, so recomputing the query costs less",
        )
    rows = sum(f.live_rows for t, end in ends.items() for f in ctx.catalog.snapshot_files(t, end))
    measure = f"{changed:,} rows changed of the {rows:,} its query reads"
    if changed > ADAPTIVE_SHARE * rows:
        return (
            RefreshAction.FULL,
            f"{measure}, over {ADAPTIVE_SHARE:.0%}: recomputing costs less than the changes",
        )
    return (
        RefreshAction.INCREMENTAL,
        f"{measure}, under {ADAPTIVE_SHARE:.0%}: the changes cost less than recomputing",
    )


# Up to this many versions in a refresh's intervals, their row counts are read with the query its
# readability checks make (a scheduled refresh's intervals hold a few); more, by a sum in SQL.
_VERSIONS_COUNTED = 256


def only_moved(
    ctx: StatementContext, frontiers: Mapping[int, int], ends: Mapping[int, int]
) -> bool:
    """Whether every version of the intervals only moved rows (a compaction): the query's
    result is the same, so the refresh is NO_DATA (its frontiers move to the ends)."""
    counted = interval_versions(frontiers, ends)
    if not counted:
        return False
    found = ctx.catalog.version_infos(counted)
    return len(found) == len(counted) and all(
        v.operation in MOVING_OPERATIONS for v in found.values()
    )


def interval_versions(
    frontiers: Mapping[int, int], ends: Mapping[int, int]
) -> list[tuple[int, int]] | None:
    """Every (table, version) of the refresh's intervals, or None if they are too many."""
    if sum(max(0, ends[t] - s) for t, s in frontiers.items()) > _VERSIONS_COUNTED:
        return None
    return [(t, v) for t, s in frontiers.items() for v in range(s + 1, ends[t] + 1)]
