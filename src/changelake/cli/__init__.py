"""The ``changelake`` command line: run SQL against a warehouse and print the results.

Results go to stdout; progress, notes and errors go to stderr, so the output can be piped.
Spark's own lines (log4j, JVM warnings) go to a log file in the warehouse unless ``--verbose``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

import click
from rich.console import Console
from rich.text import Text

import changelake
from changelake import server
from changelake.cli.output import FORMATS, Result, print_result
from changelake.dialect import split_statements
from changelake.dynamic.scheduler import HostedScheduler, Resources, Scheduler, SchedulerSettings
from changelake.dynamic.service import TaskService, service_for
from changelake.errors import ChangelakeError
from changelake.sql.execute import body_runner
from changelake.storage.spark_errors import spark_errors
from changelake.storage.spark_setup import default_spark

DEFAULT_MAX_ROWS = 100
_Command = TypeVar("_Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class _Target:
    """Where statements run: the warehouse and, optionally, a catalog database URL; whether
    Spark's own output reaches the terminal (``verbose``) or the warehouse's log file."""

    warehouse: str
    catalog: str | None
    verbose: bool = False

    @property
    def log(self) -> str:
        """The file Spark's output goes to: ``_logs/spark.log`` in a local warehouse, else in
        the user's cache directory."""
        if "://" not in self.warehouse or self.warehouse.startswith("file://"):
            root = os.path.abspath(self.warehouse.removeprefix("file://"))
            return os.path.join(root, "_logs", "spark.log")
        cache = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
        return os.path.join(cache, "changelake", "spark.log")

    def connect(
        self, *, warehouse: str | None = None, catalog: str | None = None
    ) -> changelake.Session:
        """A session on the warehouse (or ``warehouse``), its Spark quiet unless verbose."""
        spark = None if self.verbose else default_spark(log=self.log)
        return changelake.connect(
            warehouse or self.warehouse, catalog=catalog or self.catalog, spark=spark
        )


def _max_rows_option(command: _Command) -> _Command:
    return click.option(
        "--max-rows",
        type=click.IntRange(min=0),
        default=DEFAULT_MAX_ROWS,
        show_default=True,
        help="Print at most this many rows of each result.",
    )(command)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--warehouse",
    "-w",
    envvar="CHANGELAKE_WAREHOUSE",
    default="./wh",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Warehouse directory (or URI). Env: CHANGELAKE_WAREHOUSE.",
)
@click.option(
    "--catalog",
    default=None,
    help="Catalog database URL, e.g. postgresql+psycopg://host/db (default: SQLite in warehouse).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Show Spark's own output (log4j lines, JVM warnings); by default it goes to"
    " _logs/spark.log in the warehouse.",
)
@click.version_option(package_name="changelake")
@click.pass_context
def main(ctx: click.Context, warehouse: str, catalog: str | None, verbose: bool) -> None:
    """Change-tracked tables on Apache Spark and Parquet."""
    ctx.obj = _Target(warehouse=warehouse, catalog=catalog, verbose=verbose)


@main.command()
@click.argument("statement", required=False)
@click.option(
    "--file",
    "-f",
    "sql_file",
    type=click.File("r"),
    help="Run the ';'-separated statements of this file, one at a time.",
)
@_max_rows_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table: fits the terminal, a write's result as one line; csv; json: one object per"
    " line; markdown.",
)
@click.pass_obj
def sql(
    target: _Target, statement: str | None, sql_file: TextIO | None, max_rows: int, fmt: str
) -> None:
    """Run STATEMENT (or the statements in --file, or on stdin) and print each result."""
    if statement is not None and sql_file is not None:
        raise click.UsageError("give either STATEMENT or --file, not both")
    if statement is not None:
        text = statement
    elif sql_file is not None:
        text = sql_file.read()
    else:
        text = sys.stdin.read()
    _run(target, text, max_rows=max_rows, fmt=fmt)


@main.command()
@_max_rows_option
@click.pass_obj
def tables(target: _Target, max_rows: int) -> None:
    """List the tables and views of the warehouse."""
    _run(target, "SHOW TABLES", max_rows=max_rows)


@main.command()
@click.argument("table")
@_max_rows_option
@click.pass_obj
def history(target: _Target, table: str, max_rows: int) -> None:
    """Show the versions of TABLE: one row per committed change."""
    _run(target, f"DESCRIBE HISTORY {table}", max_rows=max_rows)


@main.command()
@click.argument("table")
@_max_rows_option
@click.pass_obj
def describe(target: _Target, table: str, max_rows: int) -> None:
    """Show the columns of TABLE."""
    _run(target, f"DESCRIBE TABLE {table}", max_rows=max_rows)


@main.command()
@click.argument("warehouse", type=click.Path(file_okay=False))
@click.option(
    "--catalog",
    "catalog_url",
    default=None,
    help="Catalog database URL (default: the one before the command, else SQLite in WAREHOUSE).",
)
@click.option(
    "--host",
    default=server.DEFAULT_HOST,
    show_default=True,
    help="Address to listen on; any but a loopback address needs --token.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=server.DEFAULT_PORT,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--token",
    envvar=server.TOKEN_ENV,
    default=None,
    help=f"Bearer token every request must carry. Env: {server.TOKEN_ENV}.",
)
@click.option(
    "--max-client-lag",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds a row may wait in a buffer before it is committed.",
)
@click.option(
    "--max-request-bytes",
    type=click.IntRange(min=1),
    default=server.DEFAULT_MAX_REQUEST_BYTES,
    show_default=True,
    help="Largest request body accepted (413 past it).",
)
@click.option(
    "--no-scheduler",
    is_flag=True,
    help="Do not refresh dynamic tables nor run tasks (another serve does; ALTER ... REFRESH"
    " and EXECUTE TASK work without one).",
)
@click.option(
    "--scheduler-lease",
    type=click.FloatRange(min=1.0),
    default=SchedulerSettings.lease,
    show_default=True,
    help="Seconds after which another serve takes over scheduling from one that died.",
)
@click.pass_obj
def serve(
    target: _Target,
    warehouse: str,
    catalog_url: str | None,
    host: str,
    port: int,
    token: str | None,
    max_client_lag: float,
    max_request_bytes: int,
    no_scheduler: bool,
    scheduler_lease: float,
) -> None:
    """Serve the ingest channels of WAREHOUSE over HTTP until Ctrl-C or SIGTERM; buffered rows
    are committed before it exits. The API is described at /openapi.json. Unless
    --no-scheduler, it also keeps the warehouse's dynamic tables within their target lags and runs
    its tasks (one
    serve per warehouse does: the others wait to take over)."""
    err = Console(stderr=True, soft_wrap=True)
    catalog = catalog_url or target.catalog

    lock, sessions = threading.Lock(), []

    def resources() -> Resources:  # one session (one Spark) for the scheduler and the routes
        with lock:
            if not sessions:
                sessions.append(target.connect(warehouse=warehouse, catalog=catalog))
            s = sessions[0]
            runner = body_runner(s.spark, s.warehouse, s.catalog, s.clock)
            return Resources(s.spark, s.warehouse, s.catalog, s.clock, runner)

    service = service_for(warehouse, catalog, resources)

    def scheduler() -> Scheduler:
        settings = SchedulerSettings(lease=scheduler_lease)
        return Scheduler(service.catalog, service.clock, resources, settings)

    try:
        server.serve(
            warehouse,
            catalog=catalog,
            host=host,
            port=port,
            token=token,
            max_client_lag=max_client_lag,
            max_request_bytes=max_request_bytes,
            announce=lambda url: err.print(Text(f"changelake serve: listening on {url}")),
            background=() if no_scheduler else (HostedScheduler(scheduler),),
            dynamic_tables=service,
            tasks=TaskService(service),
        )
    except ChangelakeError as e:
        err.print(Text(f"error: {e}", style="red"))
        raise click.exceptions.Exit(1) from e
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130) from None


def _run(target: _Target, text: str, *, max_rows: int, fmt: str = "table") -> None:
    """Run each statement of ``text`` in order; the first error stops the run with exit code 1."""
    out, err = Console(), Console(stderr=True, soft_wrap=True)
    where = ""  # which statement failed, when there are several
    try:
        statements = split_statements(text)
        if not statements:
            raise click.UsageError("no SQL statement given")
        with err.status("Starting Spark…"):
            session = target.connect()
        for number, statement in enumerate(statements, start=1):
            where = f"statement {number}: " if len(statements) > 1 else ""
            with err.status("Running…"):
                df = session.sql(statement)
                columns = list(df.columns)
                # A query runs only now: a failing expression in it is translated here.
                with spark_errors(statement.split(maxsplit=1)[0].upper()):
                    rows = df.limit(max_rows + 1).collect()
                    total = df.count() if len(rows) > max_rows else None
            print_result(out, err, Result(columns, rows[:max_rows], total), fmt=fmt)
    except ChangelakeError as e:
        err.print(Text(f"error: {where}{e}", style="red"))
        raise click.exceptions.Exit(1) from e
