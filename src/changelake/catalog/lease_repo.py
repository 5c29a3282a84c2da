"""Leases (``cl_leases``): one holder at a time for a warehouse-wide role, fenced by an epoch."""

from __future__ import annotations

from sqlalchemy import Connection, select

from changelake.catalog import tables as t
from changelake.errors import ConflictError

_L = t.leases.c


def acquire(
    conn: Connection, name: str, holder: str, *, now: float, ttl: float, postgres: bool
) -> int | None:
    """Take or renew lease ``name`` for ``holder`` until ``now + ttl``: its epoch, or None while
    another holder's lease has not expired. A new holder gets a new epoch."""
    query = select(_L.holder, _L.epoch, _L.expires_at).where(_L.name == name)
    if postgres:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        conn.execute(
            t.leases.insert().values(name=name, holder=holder, epoch=1, expires_at=now + ttl)
        )
        return 1
    if row.holder == holder and row.expires_at > now:
        epoch = row.epoch
    elif row.expires_at <= now:
        epoch = row.epoch + 1
    else:
        return None
    conn.execute(
        t.leases.update()
        .where(_L.name == name)
        .values(holder=holder, epoch=epoch, expires_at=now + ttl)
    )
    return epoch


def release(conn: Connection, name: str, holder: str) -> None:
    """End ``holder``'s lease now (the next holder need not wait for it to expire)."""
    conn.execute(
        t.leases.update().where(_L.name == name, _L.holder == holder).values(expires_at=0.0)
    )


def check_held(conn: Connection, name: str, epoch: int, *, postgres: bool) -> None:
    """Refuse a commit made under an epoch of lease ``name`` that is no longer current."""
    query = select(_L.epoch).where(_L.name == name)
    if postgres:
        query = query.with_for_update(read=True)  # a takeover waits for this commit
    current = conn.execute(query).scalar()
    if current != epoch:
        raise ConflictError(
            f"This process no longer holds the {name} lease (epoch {epoch}, now {current}):"
            " another process took over; nothing was written."
        )
