"""Ingest channels: reads, and the updates that open, advance and drop them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, select, update

from changelake.catalog import tables as t
from changelake.catalog.model import ChannelInfo
from changelake.errors import ChannelFencedError, ChannelNotFoundError

_C = t.channels.c


def _info(row: Any) -> ChannelInfo:
    return ChannelInfo(
        table_id=row.table_id,
        name=row.name,
        epoch=row.epoch,
        offset_token=row.offset_token,
        committed_version=row.committed_version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def find(conn: Connection, table_id: int, name: str) -> ChannelInfo | None:
    row = conn.execute(
        select(t.channels).where(_C.table_id == table_id, _C.name == name)
    ).one_or_none()
    return None if row is None else _info(row)


def list_on(conn: Connection, table_id: int) -> list[ChannelInfo]:
    rows = conn.execute(select(t.channels).where(_C.table_id == table_id).order_by(_C.name)).all()
    return [_info(r) for r in rows]


def open_(
    conn: Connection,
    table_id: int,
    name: str,
    *,
    now: float,
    offset_token: str | None,
    reset_token: bool,
) -> ChannelInfo:
    """Create the channel at epoch 1, or bump its epoch (fencing the previous holder)."""
    found = find(conn, table_id, name)
    if found is None:
        conn.execute(
            t.channels.insert().values(
                table_id=table_id,
                name=name,
                epoch=1,
                offset_token=offset_token,
                committed_version=None,
                created_at=now,
                updated_at=now,
            )
        )
    else:
        values: dict[str, Any] = {"epoch": found.epoch + 1, "updated_at": now}
        if reset_token:
            values.update(offset_token=offset_token, committed_version=None)
        conn.execute(
            update(t.channels).where(_C.table_id == table_id, _C.name == name).values(**values)
        )
    info = find(conn, table_id, name)
    assert info is not None
    return info


def check_held(
    conn: Connection, table_id: int, table: str, name: str, epoch: int, token: str | None
) -> None:
    found = find(conn, table_id, name)
    where = f"Ingest channel {name!r} on table {table}"
    if found is None:
        raise ChannelFencedError(
            f"{where} was dropped; its buffered rows were not committed. Open it again and"
            " resend from its committed offset token."
        )
    if found.epoch != epoch:
        raise ChannelFencedError(
            f"{where} was reopened elsewhere (epoch {found.epoch}, this holder has {epoch}); its"
            " buffered rows were not committed. The new holder owns the channel: resend from"
            " latest_committed_offset_token() there."
        )
    if found.offset_token != token:
        raise ChannelFencedError(
            f"{where} committed offset token {found.offset_token!r} while this holder expected"
            f" {token!r}; its buffered rows were not committed."
        )


def advance(
    conn: Connection,
    table_id: int,
    name: str,
    token: str | None,
    *,
    version: int | None,
    now: float,
) -> None:
    values: dict[str, Any] = {"offset_token": token, "updated_at": now}
    if version is not None:
        values["committed_version"] = version
    moved = conn.execute(
        update(t.channels).where(_C.table_id == table_id, _C.name == name).values(**values)
    )
    if moved.rowcount == 0:
        raise ChannelNotFoundError(
            f"Ingest channel {name!r} does not exist (it was dropped, or its table was); open"
            " it again."
        )


def drop(conn: Connection, table_id: int, name: str) -> bool:
    return (
        conn.execute(delete(t.channels).where(_C.table_id == table_id, _C.name == name)).rowcount
        > 0
    )


def drop_on_table(conn: Connection, table_id: int) -> None:
    conn.execute(delete(t.channels).where(_C.table_id == table_id))
