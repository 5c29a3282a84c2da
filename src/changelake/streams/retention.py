"""Retention as streams extend it (paper 2.3): VACUUM keeps what live streams still need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from changelake.storage.maintenance import VacuumResult, vacuum
from changelake.streams.frontier import is_stale

if TYPE_CHECKING:
    from changelake.session import Session


def vacuum_table(session: Session, name: str) -> VacuumResult:
    """VACUUM that keeps the history live streams on the table still need.

    A stream protects the versions after its frontier until it goes stale, i.e. at most
    MAX_DATA_EXTENSION_TIME_IN_DAYS (or the retention, if longer) after its first unconsumed
    change; a stale stream protects nothing.
    """
    info = session.catalog.table(name)
    live = [
        s.frontier_version
        for s in session.catalog.list_streams(table_id=info.table_id)
        if not is_stale(session, s, info)
    ]
    return vacuum(session, name, keep_from_version=min(live) if live else None)
