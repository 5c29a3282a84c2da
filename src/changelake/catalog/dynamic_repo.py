"""Dynamic tables: their definitions, where their refreshes have got to, and their history."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Column, Connection, select

from changelake.catalog import tables as t
from changelake.catalog.alters import AlterDynamicTable, values_set
from changelake.catalog.model import (
    DynamicDefinition,
    DynamicTableInfo,
    RefreshInfo,
    RefreshRecord,
    RefreshState,
    SchedulingState,
)
from changelake.catalog.table_repo import table_info
from changelake.errors import ConflictError

_DT, _T, _R = t.dynamic_tables.c, t.tables.c, t.dt_refreshes.c


def _frontiers(text_: str | None) -> tuple[tuple[int, int], ...] | None:
    return None if text_ is None else tuple((int(a), int(b)) for a, b in json.loads(text_))


def _info(row: Any) -> DynamicTableInfo:
    return DynamicTableInfo(
        info=table_info(row),
        definition=DynamicDefinition(
            sql=row.sql,
            depends_on=tuple(json.loads(row.depends_on)),
            fingerprint=row.fingerprint,
            target_lag=row.target_lag,
            refresh_mode=row.refresh_mode,
            effective_mode=row.effective_mode,
            mode_reason=row.mode_reason,
            initialize=row.initialize,
        ),
        scheduling_state=row.scheduling_state,
        suspended_reason=row.suspended_reason,
        failures=row.failures,
        frontiers=_frontiers(row.frontiers),
        data_timestamp=row.data_timestamp,
    )


def _live() -> Any:
    return (
        select(t.tables, t.dynamic_tables.c)
        .join(t.dynamic_tables, _DT.table_id == _T.table_id)
        .where(_T.dropped_at.is_(None))
    )


def find(conn: Connection, name: str) -> DynamicTableInfo | None:
    row = conn.execute(_live().where(_T.name == name.lower())).first()
    return None if row is None else _info(row)


def by_id(conn: Connection, table_id: int) -> DynamicTableInfo | None:
    row = conn.execute(_live().where(_T.table_id == table_id)).first()
    return None if row is None else _info(row)


def by_ids(conn: Connection, table_ids: Sequence[int]) -> dict[int, DynamicTableInfo]:
    rows = conn.execute(_live().where(_T.table_id.in_(sorted(set(table_ids)))))
    return {r.table_id: _info(r) for r in rows}


def list_live(conn: Connection) -> list[DynamicTableInfo]:
    return [_info(r) for r in conn.execute(_live().order_by(_T.name))]


def any_live(conn: Connection) -> bool:
    return conn.execute(_live().limit(1)).first() is not None


def version_at(conn: Connection, table_id: int, data_timestamp: float) -> int | None:
    """The version of dynamic table ``table_id`` that a successful refresh at exactly
    ``data_timestamp`` left (None: it was not refreshed at that point)."""
    return conn.execute(
        select(_R.version)
        .where(
            _R.table_id == table_id,
            _R.state == RefreshState.SUCCEEDED,
            _R.data_timestamp == data_timestamp,
        )
        .order_by(_R.refresh_id.desc())
        .limit(1)
    ).scalar()


def history(
    conn: Connection, table_id: int | None = None, *, limit: int | None = None
) -> list[RefreshInfo]:
    """Refreshes, newest first (of one dynamic table, or of all)."""
    query = select(t.dt_refreshes).order_by(_R.refresh_id.desc())
    if table_id is not None:
        query = query.where(_R.table_id == table_id)
    if limit is not None:
        query = query.limit(limit)
    return [
        RefreshInfo(
            refresh_id=r.refresh_id,
            table_id=r.table_id,
            record=RefreshRecord(
                action=r.action,
                state=r.state,
                trigger=r.trigger,
                data_timestamp=r.data_timestamp,
                started_at=r.started_at,
                rows_inserted=r.rows_inserted,
                rows_deleted=r.rows_deleted,
                rows_updated=r.rows_updated,
                spark_jobs=r.spark_jobs,
                error=r.error,
                reason=r.reason,
            ),
            ended_at=r.ended_at,
            version=r.version,
        )
        for r in conn.execute(query)
    ]


# -- requirements and updates ---------------------------------------------------------------------


def check_refreshed_from(
    conn: Connection,
    table_id: int,
    name: str,
    frontiers: tuple[tuple[int, int], ...] | None,
    *,
    data_timestamp: float | None,
) -> None:
    """Refuse a refresh that started from frontiers or a data timestamp another refresh has
    moved since."""
    found = conn.execute(
        select(_DT.frontiers, _DT.data_timestamp).where(_DT.table_id == table_id)
    ).first()
    if (
        found is None
        or _frontiers(found.frontiers) != frontiers
        or found.data_timestamp != data_timestamp
    ):
        raise ConflictError(
            f"Dynamic table {name} was refreshed (or replaced) by another refresh while this one"
            " ran; nothing was written. Its contents are up to date as of that refresh; refresh"
            " again for a later data timestamp."
        )


def insert(conn: Connection, table_id: int, d: DynamicDefinition) -> None:
    conn.execute(
        t.dynamic_tables.insert().values(
            table_id=table_id,
            sql=d.sql,
            depends_on=json.dumps(sorted(set(d.depends_on))),
            fingerprint=d.fingerprint,
            target_lag=d.target_lag,
            refresh_mode=d.refresh_mode,
            effective_mode=d.effective_mode,
            mode_reason=d.mode_reason,
            initialize=d.initialize,
            scheduling_state=SchedulingState.ACTIVE,
            suspended_reason="",
            failures=0,
            frontiers=None,
            data_timestamp=None,
        )
    )


def _update(conn: Connection, table_id: int, values: Mapping[Column[Any], object]) -> None:
    conn.execute(t.dynamic_tables.update().where(_DT.table_id == table_id).values(values))


def alter(conn: Connection, u: AlterDynamicTable) -> None:
    """Set the columns of the table's row that ``u`` sets."""
    columns = {
        _DT.fingerprint: u.fingerprint,
        _DT.target_lag: u.target_lag,
        _DT.refresh_mode: u.refresh_mode,
        _DT.effective_mode: u.effective_mode,
        _DT.mode_reason: u.mode_reason,
        _DT.scheduling_state: u.scheduling_state,
        _DT.suspended_reason: u.suspended_reason,
        _DT.failures: u.failures,
    }
    _update(conn, u.table_id, values_set(columns))


def reached(conn: Connection, table_id: int, r: RefreshRecord) -> None:
    """A successful refresh moved the table to ``r.frontiers`` at ``r.data_timestamp``."""
    assert r.frontiers is not None
    frontiers = json.dumps([list(f) for f in r.frontiers])
    _update(
        conn,
        table_id,
        {_DT.frontiers: frontiers, _DT.data_timestamp: r.data_timestamp, _DT.failures: 0},
    )


def record(
    conn: Connection,
    refreshes: Sequence[tuple[int, RefreshRecord, int | None]],
    *,
    ended_at: float,
    commit_number: int,
) -> None:
    """History rows of ``refreshes`` (table id, record, the version it left), in one statement."""
    conn.execute(
        t.dt_refreshes.insert(),
        [
            dict(
                table_id=table_id,
                action=r.action,
                state=r.state,
                trigger=r.trigger,
                data_timestamp=r.data_timestamp,
                started_at=r.started_at,
                ended_at=ended_at,
                rows_inserted=r.rows_inserted,
                rows_deleted=r.rows_deleted,
                rows_updated=r.rows_updated,
                spark_jobs=r.spark_jobs,
                error=r.error,
                reason=r.reason,
                version=version,
                commit_number=commit_number,
            )
            for table_id, r, version in refreshes
        ],
    )
