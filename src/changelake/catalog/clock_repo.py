"""The warehouse's commit clock (``cl_clock``): the one row every commit updates.

A commit takes its number and timestamp here, inside its database transaction and after its other
locks, so a later commit waits for the row until the earlier one has committed: number order,
timestamp order and visibility order are one order. A commit that changes definitions (see
``CommitRequest.redefines``) also writes a new definitions token there.
"""

from __future__ import annotations

import uuid

from sqlalchemy import Connection, select

from changelake.catalog import tables as t
from changelake.catalog.model import Snapshot
from changelake.clock import Clock

_ROW = t.clock.c.clock_id == 1
_POINT = (t.clock.c.commit_number, t.clock.c.committed_at, t.clock.c.definitions)
TICK = 1e-6  # timestamps are kept to the microsecond and strictly increase by at least this


def new_definitions() -> str:
    """A definitions token no catalog has had."""
    return uuid.uuid4().hex


def read(conn: Connection) -> Snapshot:
    """The last committed point (no lock: commits in flight are not part of it)."""
    row = conn.execute(select(*_POINT).where(_ROW)).one()
    return Snapshot(row.commit_number, row.committed_at, row.definitions)


def wait_for_commits_in_flight(conn: Connection, *, postgres: bool) -> Snapshot:
    """The last committed point after every commit that holds the clock now has ended: a commit
    that starts later is stamped after this call returns. (On SQLite the caller's transaction
    holds the write lock already.)"""
    query = select(*_POINT).where(_ROW)
    if postgres:
        query = query.with_for_update(read=True)
    row = conn.execute(query).one()
    return Snapshot(row.commit_number, row.committed_at, row.definitions)


def advance(
    conn: Connection, clock: Clock, *, postgres: bool, definitions: str | None = None
) -> Snapshot:
    """Number and stamp the commit of ``conn``'s transaction: lock the clock row, then read the
    time, so no commit stamped earlier can still be in flight. ``definitions``: the new token of
    a commit that changes definitions (None: it changes none)."""
    query = select(*_POINT).where(_ROW)
    if postgres:
        query = query.with_for_update()
    last = conn.execute(query).one()
    stamp = Snapshot(
        last.commit_number + 1,
        max(round(clock.now(), 6), round(last.committed_at + TICK, 6)),
        last.definitions if definitions is None else definitions,
    )
    conn.execute(
        t.clock.update()
        .where(_ROW)
        .values(
            commit_number=stamp.commit_number,
            committed_at=stamp.committed_at,
            definitions=stamp.definitions,
        )
    )
    return stamp


def initialize(conn: Connection) -> None:
    """The clock of a new catalog, or of one whose versions were numbered by a migration: just
    past the last version recorded."""
    last = conn.execute(
        select(t.versions.c.commit_number, t.versions.c.committed_at)
        .order_by(t.versions.c.commit_number.desc(), t.versions.c.committed_at.desc())
        .limit(1)
    ).first()
    number, at = (last.commit_number, last.committed_at) if last else (0, 0.0)
    conn.execute(t.clock.delete())
    conn.execute(
        t.clock.insert().values(
            clock_id=1, commit_number=number, committed_at=at, definitions=new_definitions()
        )
    )
