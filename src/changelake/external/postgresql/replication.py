"""The source objects changelake owns on a PostgreSQL server to follow one table: a publication
of that table and a logical replication slot (pgoutput) reading it.

The follow reads the slot through the SQL functions (``pg_logical_slot_peek_binary_changes``,
then ``pg_replication_slot_advance`` once the rows are committed in changelake), not the
streaming replication protocol: psycopg 3 has no client for that protocol, and pulling a bounded
batch, committing it, and only then moving the slot is exactly the order exactly-once needs.
Creating the slot is the one step that needs a replication connection: it exports the snapshot
the initial load reads in.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
import sqlglot
from psycopg import sql
from sqlglot import exp

from changelake.catalog.model import ConnectionInfo
from changelake.external.postgresql import postgres
from changelake.external.postgresql.pgoutput import parse_lsn

_SAFE = re.compile(r"[^a-z0-9_]")


def object_name(table: str) -> str:
    """A fresh name for the slot and the publication of external table ``table``."""
    return f"changelake_{_SAFE.sub('_', table.lower())[:30]}_{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Exported:
    """A new slot's consistent point and the snapshot that sees the source exactly there."""

    slot: str
    position: int  # the LSN the slot's changes start after
    snapshot: str


def create_publication(conn: psycopg.Connection, name: str, table: postgres.SourceTable) -> None:
    conn.execute(
        sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(name), table.quoted())
    )


def row_filter(
    conn: psycopg.Connection, table: postgres.SourceTable, scope: str | None
) -> str | None:
    """The publication row filter (PostgreSQL SQL) for ``scope``, when one is safe: PostgreSQL 15
    or later, and every column it reads in the table's replica identity. A filter on another
    column would make the source's own UPDATEs and DELETEs fail, so the follow then filters on
    arrival instead (None)."""
    if scope is None or conn.info.server_version < 150000:
        return None
    tree = sqlglot.parse_one(postgres.to_postgres(scope), read="postgres")
    used = {c.name.lower() for c in tree.find_all(exp.Column)}
    if not used or not used <= {c.lower() for c in table.identity_columns}:
        return None
    return tree.sql(dialect="postgres")


def set_row_filter(
    conn: psycopg.Connection, publication: str, table: postgres.SourceTable, where: str | None
) -> None:
    """Publish the table's changes only for rows satisfying ``where`` (None: every row); an
    UPDATE that moves a row across it arrives as a DELETE or an INSERT."""
    command = sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
        sql.Identifier(publication), table.quoted()
    )
    if where is not None:
        command = sql.SQL("{} WHERE ({})").format(command, sql.SQL(where))
    conn.execute(command)


@contextmanager
def exported_slot(info: ConnectionInfo, slot: str) -> Iterator[Exported]:
    """Create logical slot ``slot`` and keep its exported snapshot alive for the block (the
    replication connection that made it must stay idle until then)."""
    with postgres.connect(info, replication=True) as conn:
        cursor = psycopg.ClientCursor(conn)  # a replication connection takes simple queries only
        cursor.execute(f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL pgoutput EXPORT_SNAPSHOT')
        row = cursor.fetchone()
        assert row is not None
        yield Exported(slot=slot, position=parse_lsn(row[1]), snapshot=row[2])


def drop_objects(conn: psycopg.Connection, slot: str | None, publication: str | None) -> None:
    """Drop the slot and the publication if they exist (the slot first: it holds WAL back)."""
    if slot:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        )
    if publication:
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))


def peek(
    conn: psycopg.Connection, slot: str, publication: str, *, changes: int | None
) -> list[tuple[str, int, bytes]]:
    """The slot's pending messages: whole transactions, stopping after the one that passes
    ``changes`` messages (PostgreSQL checks the limit only at transaction ends; None: all)."""
    return conn.execute(
        "SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_binary_changes("
        "%s, NULL, %s, 'proto_version', '1', 'publication_names', %s)",
        (slot, changes, publication),
    ).fetchall()


def advance(conn: psycopg.Connection, slot: str, position: str) -> None:
    """Let the server forget the slot's changes up to ``position`` (they are committed here)."""
    conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, position))


@dataclass(frozen=True)
class SlotState:
    confirmed: str | None  # the position the server would resend from
    retained_bytes: int  # WAL the slot holds back on the source
    active: bool


def slot_state(conn: psycopg.Connection, slot: str) -> SlotState | None:
    row = conn.execute(
        "SELECT confirmed_flush_lsn::text, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn),"
        " active FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    return None if row is None else SlotState(row[0], int(row[1] or 0), bool(row[2]))


def current_position(conn: psycopg.Connection) -> int:
    return parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def flushed(conn: psycopg.Connection) -> int:
    """The source's flushed WAL position: logical decoding reads up to it."""
    return parse_lsn(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])
