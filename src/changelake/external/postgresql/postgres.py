"""A PostgreSQL source: its connection options, the secret they point to, and checks of what
following one of its tables needs (logical WAL, the REPLICATION right, a key).

A connection's options say where the database is and where its password is found: the name of
an environment variable (``password_env``) or of a file (``password_file``). The catalog stores
those names, never the password; it is read when changelake connects.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import sqlglot
from psycopg import sql

from changelake.catalog.model import ConnectionInfo
from changelake.dialect import Changelake
from changelake.errors import ConfigurationError, SourceError

OPTIONS = ("host", "port", "database", "user", "password_env", "password_file", "sslmode")
REQUIRED = ("host", "database", "user")


def check_options(name: str, options: dict[str, str]) -> dict[str, str]:
    """The options of connection ``name`` checked and normalized (lower-case keys, a port)."""
    options = {k.lower(): v for k, v in options.items()}
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"Connection {name}: unknown option(s) {', '.join(unknown)}; the options are"
            f" {', '.join(OPTIONS)}."
        )
    missing = [k for k in REQUIRED if not options.get(k)]
    if missing:
        raise ConfigurationError(
            f"Connection {name}: give {', '.join(missing)} in OPTIONS (host => '…',"
            " database => '…', user => '…')."
        )
    if "password_env" in options and "password_file" in options:
        raise ConfigurationError(
            f"Connection {name}: give password_env or password_file, not both."
        )
    port = options.setdefault("port", "5432")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"Connection {name}: port must be a number, got {port!r}.")
    return options


def password(info: ConnectionInfo) -> str | None:
    """The connection's password, read now from where its options say (None: none given)."""
    options = info.options
    if "password_env" in options:
        variable = options["password_env"]
        value = os.environ.get(variable)
        if value is None:
            raise ConfigurationError(
                f"Connection {info.name}: its password comes from environment variable"
                f" {variable}, which is not set in this process; export {variable}=... before"
                " starting changelake."
            )
        return value
    if "password_file" in options:
        path = Path(options["password_file"]).expanduser()
        try:
            return path.read_text().rstrip("\n")
        except OSError as e:
            raise ConfigurationError(
                f"Connection {info.name}: its password comes from file {path}, which cannot be"
                f" read ({e.strerror}); create it readable by this user only."
            ) from e
    return None


def _where(info: ConnectionInfo) -> str:
    o = info.options
    return f"database {o['database']} on {o['host']}:{o['port']} as user {o['user']}"


@contextmanager
def connect(info: ConnectionInfo, *, replication: bool = False) -> Iterator[psycopg.Connection]:
    """An autocommit connection to the source (``replication``: a logical replication one),
    with the session's time zone UTC so timestamps arrive as changelake stores them."""
    o = info.options
    params = {
        "host": o["host"],
        "port": o["port"],
        "dbname": o["database"],
        "user": o["user"],
        "connect_timeout": "10",
        "application_name": "changelake",
        "options": "-c TimeZone=UTC -c DateStyle=ISO",
    }
    secret = password(info)
    if secret is not None:
        params["password"] = secret
    if "sslmode" in o:
        params["sslmode"] = o["sslmode"]
    if replication:
        params["replication"] = "database"
    try:
        conn = psycopg.connect(autocommit=True, **params)
    except psycopg.OperationalError as e:
        reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise SourceError(
            f"Connection {info.name}: cannot connect to {_where(info)}: {reason}. Check the"
            " host, port, database, user and password (CREATE OR REPLACE CONNECTION changes"
            " them)."
        ) from e
    try:
        yield conn
    finally:
        conn.close()


def check_server(info: ConnectionInfo, conn: psycopg.Connection) -> None:
    """What following a table needs of the server and the user: logical WAL, the REPLICATION
    right (or superuser), and a free replication slot."""
    wal_level = conn.execute("SHOW wal_level").fetchone()[0]
    if wal_level != "logical":
        raise SourceError(
            f"Connection {info.name}: the server's wal_level is {wal_level!r}; following a table"
            " needs 'logical'. Set wal_level = logical in postgresql.conf (ALTER SYSTEM SET"
            " wal_level = logical) and restart the server."
        )
    can = conn.execute(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if not can or not can[0]:
        user = info.options["user"]
        raise SourceError(
            f"Connection {info.name}: user {user} may not read the server's change stream;"
            f" grant it with ALTER ROLE {user} WITH REPLICATION (as a superuser)."
        )


def jdbc_url(info: ConnectionInfo) -> str:
    o = info.options
    return f"jdbc:postgresql://{o['host']}:{o['port']}/{o['database']}"


def jdbc_properties(info: ConnectionInfo) -> dict[str, str]:
    """Spark JDBC options of the connection (user, password, driver)."""
    props = {"user": info.options["user"], "driver": "org.postgresql.Driver"}
    secret = password(info)
    if secret is not None:
        props["password"] = secret
    if "sslmode" in info.options:
        props["sslmode"] = info.options["sslmode"]
    return props


@dataclass(frozen=True)
class SourceColumn:
    name: str
    pg_type: str  # format_type(): e.g. 'numeric(10,2)', 'timestamp with time zone'
    not_null: bool


@dataclass(frozen=True)
class SourceTable:
    """A source table as its server describes it."""

    schema: str
    name: str
    oid: int
    columns: tuple[SourceColumn, ...]
    primary_key: tuple[str, ...]
    replica_identity: str  # d (default: the primary key) | f (full) | i (an index) | n (nothing)
    identity_columns: tuple[str, ...]  # the columns an UPDATE or DELETE's old row carries

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def quoted(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.name)


def split_name(name: str) -> tuple[str, str]:
    """'schema.table' (or 'table': schema public) as (schema, table)."""
    parts = [p.strip().strip('"') for p in name.split(".")]
    if len(parts) == 1:
        return "public", parts[0]
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    raise ConfigurationError(
        f"Source table {name!r}: expected 'schema.table' (or 'table' in schema public)."
    )


def describe(info: ConnectionInfo, conn: psycopg.Connection, name: str) -> SourceTable:
    """The source table ``name`` ('schema.table'), with its columns, key and replica identity."""
    schema, table = split_name(name)
    found = conn.execute(
        "SELECT c.oid, c.relreplident, c.relkind FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (schema, table),
    ).fetchone()
    if found is None or found[2] not in ("r", "p"):
        raise SourceError(
            f"Connection {info.name}: there is no table {schema}.{table} in {_where(info)}"
            " (or the user may not see it); check the name, and GRANT SELECT on it."
        )
    oid, identity = found[0], found[1]
    readable = conn.execute("SELECT has_table_privilege(%s, 'SELECT')", (oid,)).fetchone()
    if not readable or not readable[0]:
        raise SourceError(
            f"Connection {info.name}: user {info.options['user']} may not read {schema}.{table};"
            f" grant it with GRANT SELECT ON {schema}.{table} TO {info.options['user']}."
        )
    columns = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute"
        " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (oid,),
    ).fetchall()
    key = _index_columns(conn, oid, "indisprimary")
    identity_columns: tuple[str, ...] = ()
    if identity == "d":
        identity_columns = key
    elif identity == "i":
        identity_columns = _index_columns(conn, oid, "indisreplident")
    elif identity == "f":
        identity_columns = tuple(c[0] for c in columns)
    return SourceTable(
        schema=schema,
        name=table,
        oid=oid,
        columns=tuple(SourceColumn(c[0], c[1], bool(c[2])) for c in columns),
        primary_key=key,
        replica_identity=identity,
        identity_columns=identity_columns,
    )


def _index_columns(conn: psycopg.Connection, oid: int, which: str) -> tuple[str, ...]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i"
        " JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
        f" WHERE i.indrelid = %s AND i.{which} ORDER BY k.n",
        (oid,),
    ).fetchall()
    return tuple(r[0] for r in rows)


def to_postgres(predicate: str) -> str:
    """A row predicate of changelake's SQL (a scope) in PostgreSQL's, to run on the source."""
    return sqlglot.transpile(predicate, read=Changelake, write="postgres")[0]
