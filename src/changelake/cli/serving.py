"""``changelake serve``: the service of one warehouse (ingest channels, SQL over HTTP with
sessions, dynamic tables and tasks, the web dashboard, and the scheduler of dynamic tables, tasks
and external tables). Loaded only when the command runs: it brings Spark and the web framework."""

from __future__ import annotations

import dataclasses
import threading

import click
from rich.console import Console
from rich.text import Text

from changelake import server
from changelake.cli import remote
from changelake.cli.local import connect
from changelake.cli.target import Target
from changelake.errors import ChangelakeError
from changelake.runtime.env import Env
from changelake.scheduling.scheduler import HostedScheduler, Scheduler, SchedulerSettings
from changelake.scheduling.service import TaskService, service_for
from changelake.sql.dashboard import DashboardData
from changelake.sql.execute import run_task_body
from changelake.sql.service import StatementService


@click.command()
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
    help="Do not refresh dynamic tables, run tasks nor follow external tables (another serve"
    " does; ALTER ... REFRESH and EXECUTE TASK work without one).",
)
@click.option(
    "--scheduler-lease",
    type=click.FloatRange(min=1.0),
    default=SchedulerSettings.lease,
    show_default=True,
    help="Seconds after which another serve takes over scheduling from one that died.",
)
@click.option(
    "--refresh-workers",
    type=click.IntRange(min=1),
    default=SchedulerSettings.workers,
    show_default=True,
    help="Refreshes of a scheduler round that do not read each other run this many at once"
    " (1: one after another).",
)
@click.pass_obj
def serve(
    target: Target,
    warehouse: str,
    catalog_url: str | None,
    host: str,
    port: int,
    token: str | None,
    max_client_lag: float,
    max_request_bytes: int,
    no_scheduler: bool,
    scheduler_lease: float,
    refresh_workers: int,
) -> None:
    """Serve WAREHOUSE over HTTP until Ctrl-C or SIGTERM:

    \b
    - ingest: rows streamed into tables through channels with offset
      tokens; buffered rows are committed before it exits;
    - SQL: POST /v1/sql, with sessions (/v1/sessions) that hold a
      transaction across requests; `changelake sql` uses it;
    - dynamic tables and tasks: list, refresh or execute, suspend, resume;
    - the dashboard: a read-only web view of the warehouse at /;
    - the scheduler, unless --no-scheduler: keeps dynamic tables within
      their target lags, runs tasks and follows external tables (one
      serve per warehouse schedules: the others wait to take over).

    The API is described at /openapi.json."""
    err = Console(stderr=True, soft_wrap=True)
    catalog = catalog_url or target.catalog

    lock, sessions = threading.Lock(), []

    def env() -> Env:  # one session (one Spark) for the scheduler and the routes
        with lock:
            if not sessions:
                # Spark's log goes to WAREHOUSE's _logs, not to the group's --warehouse
                served = dataclasses.replace(target, warehouse=warehouse, catalog=catalog)
                sessions.append(connect(served))
            s = sessions[0]
            return Env.of(s.catalog, s.clock, s.spark, s.warehouse)

    service = service_for(warehouse, catalog, env)

    def scheduler() -> Scheduler:
        settings = SchedulerSettings(lease=scheduler_lease, workers=refresh_workers)
        return Scheduler(service.catalog, service.clock, env, run_task_body, settings)

    def warm_up() -> None:  # while the service begins to listen: the first statement is fast
        try:
            spark = env().spark
        except ChangelakeError:
            return  # the first request (or the scheduler) reports it
        for _ in range(3):
            spark.sql("SELECT count(*) FROM range(10)").collect()

    threading.Thread(target=warm_up, name="changelake-spark-start", daemon=True).start()

    def announce(url: str) -> None:
        remote.announce(warehouse, url)  # `changelake sql` on this warehouse finds the service
        err.print(Text(f"changelake serve: listening on {url}"))

    try:
        server.serve(
            warehouse,
            catalog=catalog,
            host=host,
            port=port,
            token=token,
            max_client_lag=max_client_lag,
            max_request_bytes=max_request_bytes,
            announce=announce,
            background=() if no_scheduler else (HostedScheduler(scheduler),),
            dynamic_tables=service,
            tasks=TaskService(service, run_task_body),
            statements=StatementService(env),
            dashboard=DashboardData(env),
            verbose=target.verbose,
        )
    except ChangelakeError as e:
        err.print(Text(f"error: {e}", style="red"))
        raise click.exceptions.Exit(1) from e
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130) from None
    finally:
        remote.withdraw(warehouse)
