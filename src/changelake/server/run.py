"""Running the service: one ingest client, the app around it (with the SQL, dynamic table, task
and dashboard routes handed in), its background work (the scheduler) and uvicorn listening."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

import uvicorn

from changelake.errors import ConfigurationError
from changelake.ingest import Client
from changelake.server.app import DEFAULT_MAX_REQUEST_BYTES, create_app
from changelake.server.auth import check_exposure
from changelake.server.dashboard import Dashboard
from changelake.server.dynamic_tables import DynamicTables
from changelake.server.sql import Statements
from changelake.server.tasks import Tasks

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
# An insert waits this long for room in the client's buffers, then answers 503 with Retry-After:
# a blocked insert holds a worker thread, and a producer can retry elsewhere.
BLOCK_SECONDS = 5.0
# Requests still running this long after SIGTERM are cancelled (a /wait may take an hour); the
# client is closed, committing its rows, either way.
GRACE_SECONDS = 30.0


class Background(Protocol):
    """Work the service hosts beside its endpoint (started before it listens, stopped after)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


def url_of(sock: socket.socket) -> str:
    """The http:// URL of a listening socket (its real port when it was bound to port 0)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _announce(url: str) -> None:
    print(f"changelake serve: listening on {url}", file=sys.stderr, flush=True)


class _Server(uvicorn.Server):
    """uvicorn's server, telling ``on_listening`` once it accepts connections."""

    def __init__(self, config: uvicorn.Config, *, on_listening: Callable[[], None]):
        super().__init__(config)
        self._on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            self._on_listening()


def serve(
    warehouse: str,
    *,
    catalog: str | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    max_client_lag: float = 1.0,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    announce: Callable[[str], None] = _announce,
    background: Sequence[Background] = (),
    dynamic_tables: DynamicTables | None = None,
    tasks: Tasks | None = None,
    statements: Statements | None = None,
    dashboard: Dashboard | None = None,
    verbose: bool = False,
) -> None:
    """Serve ``warehouse`` over HTTP until SIGINT or SIGTERM: its ingest channels, and the routes
    of ``statements`` (SQL with sessions), ``dynamic_tables``, ``tasks`` and ``dashboard`` when
    given; then close the client, which commits every buffered row. ``announce`` receives the URL once the service
    accepts connections (by default it is printed to stderr).

    Without ``token`` the service only listens on a loopback address. ``background`` services
    (the scheduler of dynamic tables, tasks and external tables) run while it serves. The web server logs
    warnings only, unless ``verbose`` (then every request too)."""
    check_exposure(host, token)
    if max_request_bytes <= 0:
        raise ConfigurationError(f"max_request_bytes must be positive, not {max_request_bytes}.")
    sock = _listen(host, port)
    try:
        client = Client(
            warehouse,
            catalog=catalog,
            max_client_lag=max_client_lag,
            block_timeout=BLOCK_SECONDS,
        )
    except BaseException:
        sock.close()
        raise
    app = create_app(
        client,
        token=token,
        max_request_bytes=max_request_bytes,
        dynamic_tables=dynamic_tables,
        tasks=tasks,
        statements=statements,
        dashboard=dashboard,
    )
    config = uvicorn.Config(
        app,
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=GRACE_SECONDS,
        log_level="info" if verbose else "warning",
    )
    url = url_of(sock)
    for service in background:
        service.start()
    try:
        _Server(config, on_listening=lambda: announce(url)).run(sockets=[sock])
    finally:
        for service in background:
            service.stop()


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host`` (a name or an IPv4/IPv6 address) and ``port``."""
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        return socket.create_server(address[:2], family=family)
    except OSError as e:
        raise ConfigurationError(f"Cannot listen on {host} port {port}: {e.strerror or e}.") from e
