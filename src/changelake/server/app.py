"""The HTTP API of ``changelake serve``: the ingest channels of one ``changelake.ingest.Client``,
and the routes of what the caller hands in: SQL with sessions, dynamic tables, tasks and the
web dashboard. Each group of routes is an ``APIRouter`` of its own module; this one assembles
them into the app.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware

from changelake.ingest import Client
from changelake.server import problems
from changelake.server.auth import LOOPBACK_HOSTS, bearer_auth
from changelake.server.channels import OpenChannels, WaitThreads, channel_routes
from changelake.server.dashboard import Dashboard, dashboard_routes
from changelake.server.dynamic_tables import DynamicTables, dynamic_table_routes
from changelake.server.models import Health
from changelake.server.sql import Statements, sql_routes
from changelake.server.tasks import Tasks, task_routes

MiB = 1 << 20
DEFAULT_MAX_REQUEST_BYTES = 64 * MiB
MAX_CONCURRENT_WAITS = 64


def create_app(
    client: Client,
    *,
    token: str | None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    dynamic_tables: DynamicTables | None = None,
    tasks: Tasks | None = None,
    statements: Statements | None = None,
    dashboard: Dashboard | None = None,
) -> FastAPI:
    """The ASGI app serving ``client``'s channels (and ``dynamic_tables``', ``tasks``' and
    ``statements``' routes: ``POST /v1/sql``; ``dashboard``'s web pages at ``/``). The app owns
    the client: it closes it (which commits every buffered row) when the server shuts down. With
    ``token`` every request but ``/v1/health`` and the OpenAPI description must carry
    ``Authorization: Bearer <token>``."""
    channels = OpenChannels()
    waits = WaitThreads(MAX_CONCURRENT_WAITS)
    app = FastAPI(
        title="changelake serve",
        version=importlib.metadata.version("changelake"),
        description=_description(
            statements=statements, dynamic_tables=dynamic_tables, tasks=tasks, dashboard=dashboard
        ),
        lifespan=_lifespan(client, waits=waits),
    )
    problems.install(app, retry_after_seconds=client.max_client_lag)
    if token is None:
        # Without a token the service listens on loopback only (auth.check_exposure); a page
        # of another site that resolves its own host name to 127.0.0.1 (DNS rebinding) must
        # not reach it either: only requests addressed to a loopback name are served.
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(LOOPBACK_HOSTS))
    app.add_api_route(
        "/v1/health", health, methods=["GET"], summary="Whether the service is up (no token needed)"
    )
    auth = [Depends(bearer_auth(token))]
    app.include_router(
        channel_routes(
            client, auth, channels=channels, waits=waits, max_request_bytes=max_request_bytes
        )
    )
    if dynamic_tables is not None:
        app.include_router(dynamic_table_routes(dynamic_tables, auth))
    if tasks is not None:
        app.include_router(task_routes(tasks, auth))
    if statements is not None:
        app.include_router(sql_routes(statements, auth))
    if dashboard is not None:
        app.include_router(dashboard_routes(dashboard, token, "pipeline", live=channels.rates))
    return app


# Named without an underscore: a route's function name is its OpenAPI operation id.
async def health() -> Health:
    return Health()


def _lifespan(
    client: Client, *, waits: WaitThreads
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the wait threads inside the event loop; close the client when the server stops."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        waits.start()
        try:
            yield
        finally:
            await run_in_threadpool(client.close)

    return lifespan


def _description(
    *,
    statements: Statements | None,
    dynamic_tables: DynamicTables | None,
    tasks: Tasks | None,
    dashboard: Dashboard | None,
) -> str:
    served = (
        ("stream rows into tables through ingest channels with offset tokens", True),
        ("run SQL, in sessions that hold a transaction across requests", statements is not None),
        ("list, refresh, suspend and resume dynamic tables", dynamic_tables is not None),
        ("list, execute, suspend and resume tasks", tasks is not None),
        ("browse the warehouse in the read-only web dashboard at `/`", dashboard is not None),
    )
    return "A changelake warehouse over HTTP: " + "; ".join(w for w, here in served if here) + "."
