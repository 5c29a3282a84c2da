"""Running statements through a ``changelake serve`` of the warehouse, over its HTTP API
(``POST /v1/sql``): no Spark to start, so a command answers in a fraction of a second.

A service announces itself in ``_serve.json`` in the (local) warehouse: its URL and process id;
``--server URL`` names one anywhere. Only the standard library and ``output`` are imported here.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

from changelake.cli.output import Result
from changelake.cli.target import Target

ANNOUNCEMENT = "_serve.json"
TIMEOUT_SECONDS = 3600.0
# uvicorn closes a keep-alive connection idle for 5 s; past this a new one is opened.
KEEP_ALIVE_SECONDS = 4.0


class ServiceError(Exception):
    """The service answered with an error (``message``), or could not be reached."""


def announce(warehouse: str, url: str) -> None:
    """Tell commands on ``warehouse`` (when local) that a service at ``url`` runs it."""
    path = _announcement(Target(warehouse))
    if path is None:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w") as f:
        json.dump({"url": url, "pid": os.getpid()}, f)
    os.replace(temporary, path)


def withdraw(warehouse: str) -> None:
    """Remove this process's announcement from ``warehouse``."""
    path = _announcement(Target(warehouse))
    if path is not None and _read(path).get("pid") == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def service_url(target: Target) -> str | None:
    """``--server``, else the URL a live service announced in the warehouse, else None."""
    if target.server:
        return target.server.rstrip("/")
    path = _announcement(target)
    found = _read(path) if path is not None else {}
    pid, url = found.get("pid"), found.get("url")
    if not isinstance(pid, int) or not isinstance(url, str):
        return None
    # Only a service of this user on this machine: the token is not sent where another user's
    # file points (a shared warehouse), nor to a process that is gone.
    assert path is not None
    if os.stat(path).st_uid != os.getuid() or not _loopback(url):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return url


def _loopback(url: str) -> bool:
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    return host in ("localhost", "127.0.0.1", "::1")


def _announcement(target: Target) -> str | None:
    return os.path.join(target.local, ANNOUNCEMENT) if target.local is not None else None


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            found = json.load(f)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


class Service:
    """A connection to one service; ``session()`` holds a transaction across statements."""

    def __init__(self, url: str, token: str | None):
        self._url = url
        self._parts = urllib.parse.urlsplit(url)
        self._token = token
        self._connection: http.client.HTTPConnection | None = None
        self._used = 0.0
        self._session: str | None = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connected(self) -> http.client.HTTPConnection:
        """The connection, new when the last one idled past the server's keep-alive."""
        if self._connection is not None and time.monotonic() - self._used > KEEP_ALIVE_SECONDS:
            self.close()
        if self._connection is None:
            kind = (
                http.client.HTTPSConnection
                if self._parts.scheme == "https"
                else http.client.HTTPConnection
            )
            host = self._parts.hostname or "127.0.0.1"
            self._connection = kind(host, self._parts.port, timeout=TIMEOUT_SECONDS)
        return self._connection

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """A session for the statements run inside (rolled back if they leave a transaction)."""
        self._session = self._call("POST", "/v1/sessions")["session"]
        try:
            yield
        finally:
            session, self._session = self._session, None
            with contextlib.suppress(ServiceError):
                self._call("DELETE", f"/v1/sessions/{session}")

    def run(self, statement: str, *, max_rows: int, request: str | None = None) -> Result:
        """Run ``statement``; ``request`` is an id ``cancel`` (from another thread) can name."""
        body = {"statement": statement, "max_rows": max_rows, "session": self._session}
        if request is not None:
            body["request_id"] = request
        answer = self._call("POST", "/v1/sql", body)
        columns = [c["name"] for c in answer["columns"]]
        return Result(columns, answer["rows"], answer["total_rows"])

    def cancel(self, request: str) -> None:
        """Cancel the statement sent with ``request`` (over a connection of its own)."""
        other = Service(self._url, self._token)
        try:
            other._call("POST", "/v1/sql/cancel", {"request_id": request})
        finally:
            other.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = json.dumps(body).encode() if body is not None else None
        try:
            connection = self._connected()
            connection.request(method, self._parts.path.rstrip("/") + path, data, headers)
            response = connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise ServiceError(f"The service at {self._url} did not answer: {e}.") from e
        finally:
            self._used = time.monotonic()
        try:
            answer = json.loads(payload)
        except ValueError as e:
            raise ServiceError(f"The service at {self._url} answered {response.status}.") from e
        if response.status >= 400:
            error = answer.get("error", {}) if isinstance(answer, dict) else {}
            raise ServiceError(error.get("message") or f"HTTP {response.status}")
        return answer
