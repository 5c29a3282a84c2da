"""STREAM objects and their frontiers (per base table): reads, and the updates that create, drop
and advance them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, select

from changelake.catalog import tables as t
from changelake.catalog.model import StreamInfo
from changelake.errors import StreamConsumedError


def _frontiers(conn: Connection, stream_ids: list[int]) -> dict[int, tuple[tuple[int, int], ...]]:
    rows = (
        conn.execute(
            select(t.stream_frontiers)
            .where(t.stream_frontiers.c.stream_id.in_(stream_ids))
            .order_by(t.stream_frontiers.c.table_id)
        ).all()
        if stream_ids
        else []
    )
    found: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        found[r.stream_id].append((r.table_id, r.version))
    return {k: tuple(v) for k, v in found.items()}


def _infos(conn: Connection, rows: list[Any]) -> list[StreamInfo]:
    frontiers = _frontiers(conn, [r.stream_id for r in rows])
    return [
        StreamInfo(
            stream_id=r.stream_id,
            name=r.name,
            table_id=r.table_id,
            frontiers=frontiers.get(r.stream_id, ()),
            append_only=r.append_only,
            show_initial_rows=r.show_initial_rows,
            initial_consumed=r.initial_consumed,
            comment=r.comment,
            created_at=r.created_at,
            consumed_at=r.consumed_at,
            view=r.view_name,
            view_definition=r.view_definition,
        )
        for r in rows
    ]


def _live(name: str) -> Any:
    return select(t.streams).where(
        t.streams.c.name == name.lower(), t.streams.c.dropped_at.is_(None)
    )


# -- reads ----------------------------------------------------------------------------------------


def find_live(conn: Connection, name: str) -> StreamInfo | None:
    row = conn.execute(_live(name)).first()
    return None if row is None else _infos(conn, [row])[0]


def live_names(conn: Connection) -> list[str]:
    return list(
        conn.execute(select(t.streams.c.name).where(t.streams.c.dropped_at.is_(None))).scalars()
    )


def list_live(conn: Connection, *, table_id: int | None) -> list[StreamInfo]:
    query = select(t.streams).where(t.streams.c.dropped_at.is_(None))
    if table_id is not None:  # streams on the table, and on views that read it
        on_table = select(t.stream_frontiers.c.stream_id).where(
            t.stream_frontiers.c.table_id == table_id
        )
        query = query.where(t.streams.c.stream_id.in_(on_table))
    return _infos(conn, conn.execute(query.order_by(t.streams.c.name)).all())


# -- checks ---------------------------------------------------------------------------------------


def lock(conn: Connection, stream_id: int, *, for_update: bool) -> None:
    """Hold the stream's row for the rest of the transaction (PostgreSQL; SQLite holds the database
    write lock already), so that its frontiers cannot move between the check and the advance."""
    query = select(t.streams.c.stream_id).where(t.streams.c.stream_id == stream_id)
    if for_update:
        query = query.with_for_update()
    conn.execute(query).first()


def check_frontier(
    conn: Connection,
    stream_id: int,
    name: str,
    frontiers: tuple[tuple[int, int], ...],
    *,
    initial_consumed: bool,
) -> None:
    """StreamConsumedError unless the stream is live with exactly these frontiers."""
    row = conn.execute(
        select(t.streams).where(
            t.streams.c.stream_id == stream_id, t.streams.c.dropped_at.is_(None)
        )
    ).first()
    current = _frontiers(conn, [stream_id]).get(stream_id, ())
    if row is None or row.initial_consumed != initial_consumed or current != tuple(frontiers):
        raise StreamConsumedError(
            f"Stream {name} was consumed concurrently by another transaction (or dropped) after"
            " this statement read it; this statement changed nothing. Run it again to consume"
            " the changes that remain."
        )


# -- updates --------------------------------------------------------------------------------------


def insert(
    conn: Connection,
    *,
    table_id: int,
    frontiers: tuple[tuple[int, int], ...],
    now: float,
    **values: Any,
) -> None:
    stream_id = conn.execute(
        t.streams.insert().values(
            table_id=table_id, initial_consumed=False, created_at=now, **values
        )
    ).inserted_primary_key[0]
    for base, version in frontiers:
        conn.execute(
            t.stream_frontiers.insert().values(stream_id=stream_id, table_id=base, version=version)
        )


def drop_named(conn: Connection, name: str, *, now: float) -> int:
    return conn.execute(
        t.streams.update()
        .where(t.streams.c.name == name.lower(), t.streams.c.dropped_at.is_(None))
        .values(dropped_at=now)
    ).rowcount


def drop_on_table(conn: Connection, table_id: int, *, now: float) -> None:
    conn.execute(
        t.streams.update()
        .where(t.streams.c.table_id == table_id, t.streams.c.dropped_at.is_(None))
        .values(dropped_at=now)
    )


def advance(conn: Connection, stream_id: int, frontiers: tuple[tuple[int, int], ...]) -> None:
    """Move the frontiers (the caller locked and checked them first); ``mark_consumed`` stamps
    the stream once the commit has its time."""
    for table_id, version in frontiers:
        conn.execute(
            t.stream_frontiers.update()
            .where(
                t.stream_frontiers.c.stream_id == stream_id,
                t.stream_frontiers.c.table_id == table_id,
            )
            .values(version=version)
        )


def mark_consumed(conn: Connection, stream_ids: Iterable[int], *, now: float) -> None:
    """Record that the streams were consumed by the commit stamped ``now``."""
    ids = list(stream_ids)
    if ids:
        conn.execute(
            t.streams.update()
            .where(t.streams.c.stream_id.in_(ids))
            .values(initial_consumed=True, consumed_at=now)
        )
