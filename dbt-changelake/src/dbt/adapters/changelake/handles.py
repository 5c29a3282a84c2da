"""Where a connection's statements run: in this process on a changelake session (``warehouse``),
or on a ``changelake serve`` through ``/v1/sql`` (``server``: no JVM in the dbt process).

Both hand back the same answer (columns with their Spark types, rows), which ``Cursor`` serves
as a DB-API cursor does. Each connection holds one transaction slot: a changelake session here, a
service session (``/v1/sessions``) there, so ``BEGIN … COMMIT`` spans the statements between.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Protocol

import sqlparse

from dbt.adapters.changelake.names import unqualified

# What one statement may bring back to dbt (seeds, tests and `dbt show` fetch a few rows; a
# model's rows stay in the warehouse).
MAX_ROWS = 1_000_000
TIMEOUT_SECONDS = 3600.0


class StatementFailed(Exception):
    """changelake refused or failed a statement: ``message`` is its error as changelake says it."""

    def __init__(self, message: str, statement: str):
        super().__init__(message)
        self.message = message
        self.statement = statement


class ServerUnreachable(Exception):
    """The service did not answer (not running, wrong address, a dropped connection)."""


@dataclass(frozen=True)
class Answer:
    columns: tuple[tuple[str, str], ...]
    rows: list[tuple[Any, ...]]
    operation: str | None = None  # a write's or DDL's operation, from its statement result
    rows_affected: int = 0


class Handle(Protocol):
    def run(self, statement: str) -> Answer: ...

    def close(self) -> None: ...


def _answer(columns: tuple[tuple[str, str], ...], rows: list[tuple[Any, ...]]) -> Answer:
    """An answer; a statement result (write or DDL) also says its operation and rows changed."""
    names = [c[0] for c in columns]
    if names[:2] == ["statement_id", "operation"] and "rows_inserted" in names and rows:
        row = dict(zip(names, rows[0], strict=True))
        changed = sum(
            int(row.get(k) or 0) for k in ("rows_inserted", "rows_updated", "rows_deleted")
        )
        return Answer(columns, rows, str(row["operation"]), changed)
    return Answer(columns, rows)


class LocalHandle:
    """Statements on a changelake session of this process (its Spark shared with the process)."""

    def __init__(self, warehouse: str, catalog: str | None):
        import changelake  # brings PySpark: only the in-process mode needs it

        self._session = changelake.connect(warehouse, catalog=catalog)

    def run(self, statement: str) -> Answer:
        from changelake.errors import ChangelakeError

        try:
            fetched = self._session.fetch(statement, max_rows=MAX_ROWS)
        except ChangelakeError as e:
            raise StatementFailed(str(e), statement) from None
        return _answer(fetched.columns, [tuple(r) for r in fetched.rows])

    def close(self) -> None:
        self._session.close()


class RemoteHandle:
    """Statements on a ``changelake serve`` at ``url``, in a service session of their own."""

    def __init__(self, url: str, token: str | None):
        self._url = url.rstrip("/")
        self._parts = urllib.parse.urlsplit(self._url)
        if self._parts.scheme not in ("http", "https") or not self._parts.hostname:
            raise ServerUnreachable(
                f"server: {url!r} is not an http(s) URL; give the address `changelake serve`"
                " printed, such as http://127.0.0.1:8765."
            )
        self._token = token
        self._connection: http.client.HTTPConnection | None = None
        self._session = self._call("POST", "/v1/sessions")["session"]

    def run(self, statement: str) -> Answer:
        body = {"statement": statement, "max_rows": MAX_ROWS, "session": self._session}
        try:
            answer = self._call("POST", "/v1/sql", body)
        except StatementFailed as e:
            raise StatementFailed(e.message, statement) from None
        columns = tuple((c["name"], c["type"]) for c in answer["columns"])
        return _answer(columns, [tuple(r) for r in answer["rows"]])

    def close(self) -> None:
        try:
            self._call("DELETE", f"/v1/sessions/{self._session}")
        except (StatementFailed, ServerUnreachable):
            pass  # the service ended the session already (idle, or restarted)
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (1, 2):
            try:
                connection = self._connected()
                connection.request(method, self._parts.path + path, data, headers)
                response = connection.getresponse()
                payload = response.read()
                break
            except (OSError, http.client.HTTPException) as e:
                self._connection = None
                # a kept-alive connection the server closed: one new connection, then give up
                if attempt == 2 or not isinstance(e, http.client.RemoteDisconnected):
                    raise ServerUnreachable(
                        f"The changelake service at {self._url} did not answer ({e}); start it"
                        " with `changelake serve <warehouse>`, or fix `server` in profiles.yml."
                    ) from None
        try:
            answer = json.loads(payload)
        except ValueError:
            raise ServerUnreachable(
                f"{self._url} answered HTTP {response.status} without JSON: is it changelake?"
            ) from None
        if response.status >= 400:
            error = answer.get("error", {}) if isinstance(answer, dict) else {}
            raise StatementFailed(error.get("message") or f"HTTP {response.status}", "")
        return answer

    def _connected(self) -> http.client.HTTPConnection:
        if self._connection is None:
            kind = (
                http.client.HTTPSConnection
                if self._parts.scheme == "https"
                else http.client.HTTPConnection
            )
            self._connection = kind(
                self._parts.hostname or "127.0.0.1", self._parts.port, timeout=TIMEOUT_SECONDS
            )
        return self._connection


def statements(sql: str) -> list[str]:
    """The statements of ``sql`` (dbt may send several in one call), without trailing ';'."""
    parts = [p.strip().rstrip(";").strip() for p in sqlparse.split(sql)]
    return [p for p in parts if sqlparse.format(p, strip_comments=True).strip()]


class Cursor:
    """A DB-API-like cursor over a handle: runs each statement of a call in order, names
    qualified by the profile's ``schema`` made the warehouse's (``names.unqualified``)."""

    def __init__(self, handle: Handle, schema: str):
        self._handle = handle
        self._schema = schema
        self._answer: Answer | None = None
        self.elapsed = 0.0

    def execute(self, sql: str, bindings: Any = None) -> None:
        if bindings:
            raise StatementFailed(
                "changelake takes no bound parameters; render the values into the SQL.", sql
            )
        started = time.perf_counter()
        self._answer = None
        opened = False  # a BEGIN of this call, not yet ended
        for statement in statements(sql):
            statement = unqualified(statement, self._schema)
            word = statement.split(maxsplit=1)[0].upper()
            try:
                answer = self._handle.run(statement)
            except StatementFailed:
                if opened:  # the call's own transaction ends with it: nothing it staged commits
                    self._handle.run("ROLLBACK")
                raise
            if word not in ("BEGIN", "COMMIT") or self._answer is None:
                self._answer = answer  # the call's answer: its last statement but COMMIT
            opened = word == "BEGIN" or (opened and word not in ("COMMIT", "ROLLBACK"))
        self.elapsed = time.perf_counter() - started

    @property
    def description(self) -> list[tuple[str, str, None, None, None, None, bool]] | None:
        if self._answer is None or not self._answer.columns:
            return None
        return [(name, kind, None, None, None, None, True) for name, kind in self._answer.columns]

    @property
    def answer(self) -> Answer | None:
        return self._answer

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._answer.rows) if self._answer else []

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._answer.rows[0] if self._answer and self._answer.rows else None

    def fetchmany(self, size: int) -> list[tuple[Any, ...]]:
        return list(self._answer.rows[:size]) if self._answer else []

    def close(self) -> None:
        self._answer = None
