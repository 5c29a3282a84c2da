"""The catalog database: engines for SQLite and PostgreSQL, read and write transactions, the
schema's creation and migration, and retries of transient lock failures."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    create_engine,
    event,
    func,
    inspect,
    make_url,
    select,
    text,
)
from sqlalchemy.exc import OperationalError

from changelake.catalog import clock_repo
from changelake.catalog import tables as t
from changelake.errors import CatalogVersionError, ConfigurationError

T = TypeVar("T")
_RETRIES = 8


_SYNCHRONOUS = ("FULL", "NORMAL")


def engine_for(url: str) -> Engine:
    """A SQLAlchemy engine for a catalog URL (``sqlite:///...`` or ``postgresql://...``).

    A SQLite catalog syncs every commit to disk (``synchronous=FULL``): a power loss cannot undo
    an acknowledged commit. ``?synchronous=normal`` on the URL trades that for speed (WAL mode
    then keeps the database consistent, but the last commits before a power loss may be lost).
    """
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite"):
        parsed = make_url(url)
        synchronous = parsed.query.get("synchronous", "FULL")
        if not isinstance(synchronous, str) or synchronous.upper() not in _SYNCHRONOUS:
            raise ConfigurationError(
                f"Catalog URL {url}: synchronous={synchronous!r} is not one of"
                f" {', '.join(_SYNCHRONOUS)} (FULL, the default, survives a power loss)."
            )
        engine = create_engine(
            parsed.difference_update_query(["synchronous"]), connect_args={"timeout": 60}
        )

        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA busy_timeout=60000")
            _set_wal(cursor)
            cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("cl_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine
    return create_engine(url, pool_pre_ping=True)


@contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn, conn.begin():
        yield conn


@contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    """One write transaction: SQLite takes the write lock at BEGIN, PostgreSQL locks rows."""
    with engine.connect() as conn:
        conn = conn.execution_options(cl_write=True)
        with conn.begin():
            yield conn


def _set_wal(cursor: Any) -> None:
    """WAL mode, once the database is free: switching a fresh file to WAL takes an exclusive lock
    that SQLite's busy handler does not wait for, so processes opening a new catalog at once
    (a service and its workers) would see "database is locked"; they retry for up to a minute."""
    deadline = time.monotonic() + 60.0
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.01 + 0.04 * random.random())


def _transient(e: OperationalError) -> bool:
    text_ = str(e.orig).lower()
    return any(
        marker in text_
        for marker in ("database is locked", "deadlock detected", "could not serialize")
    )


def retrying(action: Callable[[], T]) -> T:
    """Run a write transaction, again after a transient lock failure (nothing was written: the
    whole transaction rolled back)."""
    for attempt in range(_RETRIES):
        try:
            return action()
        except OperationalError as e:
            if not _transient(e) or attempt == _RETRIES - 1:
                raise
            time.sleep(0.01 * 2**attempt * (1 + random.random()))
    raise AssertionError("unreachable")


# Any constant: the PostgreSQL advisory lock that serializes creating and migrating a catalog.
_MIGRATION_LOCK = 0x636C_6D69_6772


def migrate(engine: Engine, url: str) -> None:
    """Create the schema, or bring an older one up to date; refuse a newer one. Safe under any
    number of processes opening one catalog at once: an up-to-date catalog is only read; else
    one process at a time creates or migrates it (PostgreSQL: an advisory lock held to the end
    of the transaction; SQLite: the database write lock of BEGIN IMMEDIATE), and the others
    find it done."""
    with reading(engine) as conn:
        if _schema_version(conn) == t.SCHEMA_VERSION:
            return
    with writing(engine) as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
        found = _schema_version(conn)
        if found is not None and found > t.SCHEMA_VERSION:
            raise CatalogVersionError(
                f"The catalog at {url} has schema version {found}, newer than this "
                f"changelake understands ({t.SCHEMA_VERSION}); upgrade changelake."
            )
        if found == t.SCHEMA_VERSION:
            return
        t.metadata.create_all(conn)
        if found is None:
            conn.execute(t.meta.insert().values(key="schema_version", value=str(t.SCHEMA_VERSION)))
            clock_repo.initialize(conn)
            return
        _upgrade(conn, found)
        conn.execute(
            t.meta.update()
            .where(t.meta.c.key == "schema_version")
            .values(value=str(t.SCHEMA_VERSION))
        )


def _schema_version(conn: Connection) -> int | None:
    """The catalog's schema version; None for an empty database."""
    if not inspect(conn).has_table(t.meta.name):
        return None
    found = conn.execute(select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
    return None if found is None else int(found)


def _columns(conn: Connection, table: str) -> set[str]:
    return {c["name"] for c in inspect(conn).get_columns(table)}


def _upgrade(conn: Connection, found: int) -> None:
    if found < 2:
        # Version 2 keeps a stream's frontier per base table (a stream on a view has several).
        conn.execute(
            t.stream_frontiers.insert().from_select(
                ["stream_id", "table_id", "version"],
                select(text("stream_id"), text("table_id"), text("frontier_version")).select_from(
                    text("cl_streams")
                ),
            )
        )
        if "frontier_version" in _columns(conn, "cl_streams"):
            conn.execute(text("ALTER TABLE cl_streams DROP COLUMN frontier_version"))
    if found < 3:
        # Version 3 has streams on views: the view and its definition when the stream was made.
        present = _columns(conn, "cl_streams")
        for column, kind in (("view_name", "VARCHAR(255)"), ("view_definition", "TEXT")):
            if column not in present:
                conn.execute(text(f"ALTER TABLE cl_streams ADD COLUMN {column} {kind}"))
    # Version 4 adds ingest channels (cl_channels), which create_all has made.
    if found < 5:
        _number_commits(conn)
    if found < 9:
        _record_scopes(conn)
    if found < 10:
        _token_definitions(conn)
    if found < 11:
        _moves_and_reasons(conn)
    if found < 12 and "index_path" not in _columns(conn, "cl_files"):
        # Version 12 keeps each data file's key → address index; files before have none.
        conn.execute(text("ALTER TABLE cl_files ADD COLUMN index_path VARCHAR(1024)"))
    # Version 6 adds dynamic tables (cl_dynamic_tables, cl_dt_refreshes) and leases (cl_leases),
    # which create_all has made. Version 7 adds tasks (cl_tasks, cl_task_runs), version 8
    # connections and external tables (cl_connections, cl_external_tables, cl_external_files):
    # the same.


def _moves_and_reasons(conn: Connection) -> None:
    """Version 11 keeps why each refresh took its action (cl_dt_refreshes.reason) and which files
    a compaction wrote or removed (cl_files.moved_in, moved_out): those before are found by their
    versions' operations, the only writes that moved rows."""
    if "reason" not in _columns(conn, "cl_dt_refreshes"):
        conn.execute(text("ALTER TABLE cl_dt_refreshes ADD COLUMN reason TEXT NOT NULL DEFAULT ''"))
    present = _columns(conn, "cl_files")
    for column in ("moved_in", "moved_out"):
        if column not in present:
            conn.execute(
                text(f"ALTER TABLE cl_files ADD COLUMN {column} BOOLEAN NOT NULL DEFAULT false")
            )
    f, v = t.files.c, t.versions.c
    for column, version in (("moved_in", f.begin_version), ("moved_out", f.end_version)):
        moved = (
            select(v.version)
            .where(
                v.table_id == f.table_id,
                v.version == version,
                v.operation.in_(t.MOVING_OPERATIONS),
            )
            .exists()
        )
        conn.execute(t.files.update().where(moved).values({column: True}))


def _token_definitions(conn: Connection) -> None:
    """Version 10 keeps a token of the catalog's definitions (cl_clock.definitions), new with
    every DDL commit: bound views and queries are kept across statements by it."""
    if "definitions" not in _columns(conn, "cl_clock"):
        conn.execute(
            text("ALTER TABLE cl_clock ADD COLUMN definitions VARCHAR(32) NOT NULL DEFAULT ''")
        )
    conn.execute(t.clock.update().values(definitions=clock_repo.new_definitions()))


def _record_scopes(conn: Connection) -> None:
    """Version 9 keeps the scopes external tables have had (cl_external_scopes). Those before
    are not known: each table's current scope is recorded from its current version's commit,
    so that only older versions have none."""
    e, tb = t.external_tables.c, t.tables.c
    conn.execute(
        t.external_scopes.insert().from_select(
            ["table_id", "begin_commit", "scope"],
            select(e.table_id, tb.current_commit, e.scope).join_from(
                t.external_tables, t.tables, tb.table_id == e.table_id
            ),
        )
    )


def _number_commits(conn: Connection) -> None:
    """Version 5 orders all commits of the warehouse (cl_clock, cl_versions.commit_number,
    cl_tables.current_commit). Versions written before it are numbered in timestamp order;
    versions stamped with one time (the tables of one transaction) share a number."""
    for table, column in (("cl_versions", "commit_number"), ("cl_tables", "current_commit")):
        if column not in _columns(conn, table):
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} BIGINT NOT NULL DEFAULT 0"))
    for index in t.versions.indexes:
        index.create(conn, checkfirst=True)
    v = t.versions.c
    rows = conn.execute(
        select(v.table_id, v.version, v.committed_at).order_by(
            v.committed_at, v.table_id, v.version
        )
    ).all()
    numbered, number, last_at = [], 0, None
    for row in rows:
        if row.committed_at != last_at:
            number, last_at = number + 1, row.committed_at
        numbered.append({"t": row.table_id, "v": row.version, "n": number})
    if numbered:
        conn.execute(
            t.versions.update()
            .where(v.table_id == bindparam("t"), v.version == bindparam("v"))
            .values(commit_number=bindparam("n")),
            numbered,
        )
    conn.execute(
        t.tables.update().values(
            current_commit=func.coalesce(
                select(v.commit_number)
                .where(v.table_id == t.tables.c.table_id, v.version == t.tables.c.current_version)
                .scalar_subquery(),
                0,
            )
        )
    )
    clock_repo.initialize(conn)
