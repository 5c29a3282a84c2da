"""A real, throwaway PostgreSQL server for tests.

``running_postgres()`` runs ``initdb`` and ``pg_ctl`` from the newest
``/usr/lib/postgresql/*/bin`` on a temporary data directory, listening on 127.0.0.1 at a free port
with trust authentication, and yields the SQLAlchemy URL of a fresh database on it.
``create_database`` adds more databases (one per test keeps tests independent). PostgreSQL refuses
to run as root, so under root the server runs as the ``postgres`` OS user through ``runuser``.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

OS_USER = "postgres"
DATABASE_USER = "postgres"
DEFAULT_DATABASE = "changelake"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# Durability buys nothing for a server that is thrown away after the tests.
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    # external tables follow a source through logical replication slots
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
}


def find_bin_dir() -> Path:
    """The ``bin`` directory of the newest PostgreSQL server installed under /usr/lib/postgresql."""
    candidates = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    numbered = [c for c in candidates if c.parent.name.replace(".", "").isdigit()]
    if numbered:
        return max(numbered, key=lambda c: tuple(int(n) for n in c.parent.name.split(".")))
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise RuntimeError(
        "expected the PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin "
        "but found none; install them with: apt-get install -y postgresql"
    )


def create_database(url_base: str, name: str) -> str:
    """Create database ``name`` on the server of ``url_base`` and return that database's URL."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"expected a plain database name (letters, digits, _), got {name!r}")
    base = sa.make_url(url_base)
    engine = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


@contextmanager
def running_postgres(*, database: str = DEFAULT_DATABASE) -> Iterator[str]:
    """Run a PostgreSQL server for the duration of the block; yields the URL of ``database`` on it.

    The URL has the form ``postgresql+psycopg://postgres@127.0.0.1:PORT/DATABASE``. On exit the
    server is stopped (``pg_ctl stop -m immediate``) and its directory removed.
    """
    bin_dir, prefix = find_bin_dir(), _run_as_prefix()
    root = Path(tempfile.mkdtemp(prefix="changelake-pg-"))
    tools = _Tools(bin_dir=bin_dir, prefix=prefix, cwd=root)
    data_dir = str(root / "data")
    started = False
    try:
        if tools.prefix:
            entry = pwd.getpwnam(OS_USER)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        where = ("--pgdata", data_dir, "--username", DATABASE_USER)
        tools.run(
            "initdb", *where, "--auth", "trust", "--encoding", "UTF8", "--locale", "C", "--no-sync"
        )
        with (root / "data" / "postgresql.conf").open("a") as conf:
            conf.write(f"unix_socket_directories = '{root}'\n")
            conf.writelines(f"{key} = {value}\n" for key, value in _SETTINGS.items())
        port = _start(tools, data_dir=data_dir, log_file=root / "server.log")
        started = True
        base = f"postgresql+psycopg://{DATABASE_USER}@127.0.0.1:{port}/postgres"
        yield create_database(base, database)
    finally:
        if started:
            tools.run("pg_ctl", "stop", "--pgdata", data_dir, "--mode", "immediate", check=False)
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class _Tools:
    """The server's command-line tools, run as the OS user that may run them."""

    bin_dir: Path
    prefix: tuple[str, ...]
    cwd: Path  # must be readable by that user: initdb changes back to it

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [*self.prefix, str(self.bin_dir / tool), *args]
        result = subprocess.run(command, cwd=self.cwd, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} failed with exit {result.returncode}:\n"
                f"{result.stdout}{result.stderr}"
            )
        return result


def _start(tools: _Tools, *, data_dir: str, log_file: Path) -> int:
    """Start the server on a free port; another process may take the port first, so retry."""
    attempts = 3
    for attempt in range(attempts):
        port = _free_port()
        start = ("start", "--pgdata", data_dir, "--log", str(log_file), "--wait", "--timeout", "60")
        result = tools.run("pg_ctl", *start, "-o", f"-p {port}", check=False)
        if result.returncode == 0:
            return port
        if attempt == attempts - 1:
            log = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
            raise RuntimeError(
                f"PostgreSQL did not start (pg_ctl exit {result.returncode}): "
                f"{result.stderr.strip()}\n{log}"
            )
    raise AssertionError("unreachable")


def _run_as_prefix() -> tuple[str, ...]:
    """``runuser -u postgres --`` under root (initdb and postgres refuse root), else nothing."""
    if os.geteuid() != 0:
        return ()
    try:
        pwd.getpwnam(OS_USER)
    except KeyError as e:
        raise RuntimeError(
            f"running as root, PostgreSQL must run as the '{OS_USER}' OS user, which does not "
            "exist; install the server with: apt-get install -y postgresql"
        ) from e
    return ("runuser", "-u", OS_USER, "--")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
