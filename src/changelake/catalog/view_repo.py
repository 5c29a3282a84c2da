"""Views: reads, and the updates that create and drop them."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import Connection, select

from changelake.catalog import tables as t


def sql_of(conn: Connection, name: str) -> str | None:
    return conn.execute(
        select(t.views.c.sql).where(t.views.c.name == name.lower(), t.views.c.dropped_at.is_(None))
    ).scalar()


def live_names(conn: Connection) -> list[str]:
    return list(
        conn.execute(select(t.views.c.name).where(t.views.c.dropped_at.is_(None))).scalars()
    )


def list_live(conn: Connection) -> list[tuple[str, str, float]]:
    rows = conn.execute(
        select(t.views.c.name, t.views.c.sql, t.views.c.created_at)
        .where(t.views.c.dropped_at.is_(None))
        .order_by(t.views.c.name)
    ).all()
    return [(r.name, r.sql, r.created_at) for r in rows]


def insert(conn: Connection, name: str, sql: str, depends_on: Sequence[str], *, now: float) -> None:
    conn.execute(
        t.views.insert().values(
            name=name,
            sql=sql,
            depends_on=json.dumps(sorted({d.lower() for d in depends_on})),
            created_at=now,
        )
    )


def drop_named(conn: Connection, name: str, *, now: float) -> int:
    return conn.execute(
        t.views.update()
        .where(t.views.c.name == name.lower(), t.views.c.dropped_at.is_(None))
        .values(dropped_at=now)
    ).rowcount
