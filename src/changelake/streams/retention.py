"""Retention as streams extend it: what VACUUM may remove."""

from __future__ import annotations

from typing import TYPE_CHECKING

from changelake.storage.maintenance import VacuumResult, vacuum

if TYPE_CHECKING:
    from changelake.session import Session


def vacuum_table(session: Session, name: str) -> VacuumResult:
    return vacuum(session, name)
