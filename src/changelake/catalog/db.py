"""The catalog database: engines for SQLite and PostgreSQL, read and write transactions, the
schema's creation and migration, and retries of transient lock failures."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, inspect, select, text
from sqlalchemy.exc import IntegrityError, OperationalError

from changelake.catalog import tables as t
from changelake.errors import CatalogVersionError

T = TypeVar("T")
_RETRIES = 8


def engine_for(url: str) -> Engine:
    """A SQLAlchemy engine for a catalog URL (``sqlite:///...`` or ``postgresql://...``)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=60000")
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


def migrate(engine: Engine, url: str) -> None:
    """Create the schema, or bring an older one up to date; refuse a newer one."""
    try:
        with writing(engine) as conn:
            t.metadata.create_all(conn)
            found = conn.execute(
                select(t.meta.c.value).where(t.meta.c.key == "schema_version")
            ).scalar()
            if found is None:
                conn.execute(
                    t.meta.insert().values(key="schema_version", value=str(t.SCHEMA_VERSION))
                )
            elif int(found) > t.SCHEMA_VERSION:
                raise CatalogVersionError(
                    f"The catalog at {url} has schema version {found}, newer than this "
                    f"changelake understands ({t.SCHEMA_VERSION}); upgrade changelake."
                )
            elif int(found) < t.SCHEMA_VERSION:
                _upgrade(conn, int(found))
    except IntegrityError:  # another process created the schema at the same moment
        pass


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
        if "frontier_version" in {c["name"] for c in inspect(conn).get_columns("cl_streams")}:
            conn.execute(text("ALTER TABLE cl_streams DROP COLUMN frontier_version"))
    if found < 3:
        # Version 3 has streams on views: the view and its definition when the stream was made.
        present = {c["name"] for c in inspect(conn).get_columns("cl_streams")}
        for column, kind in (("view_name", "VARCHAR(255)"), ("view_definition", "TEXT")):
            if column not in present:
                conn.execute(text(f"ALTER TABLE cl_streams ADD COLUMN {column} {kind}"))
    # Version 4 adds ingest channels (cl_channels), which create_all has made.
    conn.execute(
        t.meta.update().where(t.meta.c.key == "schema_version").values(value=str(t.SCHEMA_VERSION))
    )
