"""A source database on the tests' PostgreSQL server, and reading and writing it."""

from __future__ import annotations

import uuid

import psycopg
import pytest
import sqlalchemy as sa
from tests.conftest import rows
from tests.support.postgres import create_database

COLUMNS = "id, region, amount, note"


@pytest.fixture
def source(pg_server):
    """A fresh source database: (its psycopg connection string, its port, its name)."""
    name = "src_" + uuid.uuid4().hex[:10]
    url = sa.make_url(create_database(pg_server, name))
    dsn = f"host={url.host} port={url.port} dbname={name} user={url.username}"
    # the test server commits asynchronously; a source that waits for its WAL shows its
    # changes to logical decoding at once, as a production server does
    with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=on") as conn:
        conn.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, region text, amount numeric(10,2), note text)"
        )
        conn.execute(
            "INSERT INTO orders SELECT g, CASE WHEN g % 3 = 0 THEN 'EU' ELSE 'US' END,"
            " g * 1.25, 'n' || g FROM generate_series(1, 200) g"
        )
    yield dsn, url.port, name
    with psycopg.connect(dsn, autocommit=True) as conn:  # slots hold the whole server's WAL
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE database = current_database()"
        )


def write(dsn: str, *statements: str) -> None:
    """Run ``statements`` in one source transaction."""
    with psycopg.connect(dsn, options="-c synchronous_commit=on") as conn:
        for statement in statements:
            conn.execute(statement)


def source_rows(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(f"SELECT {COLUMNS} FROM orders").fetchall()
    return sorted(found, key=lambda r: r[0])


def local_rows(session) -> list[tuple]:
    return rows(session.sql(f"SELECT {COLUMNS} FROM orders"))
