"""What ``POST /v1/sql`` runs (``server/sql.py``): statements on the service's SparkSession, each
in its own statement context, or in a session's transaction.

A session is a transaction slot a client holds by id across requests; its statements run one at
a time. A session ends by DELETE or after ``idle_seconds`` without a request (the client went
away); an open transaction is then rolled back, which discards what it staged.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from changelake.dialect import parse_one
from changelake.errors import InvalidStatementError, ObjectNotFoundError
from changelake.runtime.env import Env
from changelake.spark.cancel import Cancellable
from changelake.spark.errors import spark_errors
from changelake.sql import statements as s
from changelake.sql.execute import execute
from changelake.txn.transaction import TransactionSlot
from changelake.values import jsonable

SESSION_IDLE_SECONDS = 600.0


@dataclass
class _Session:
    slot: TransactionSlot = field(default_factory=TransactionSlot)
    lock: threading.Lock = field(default_factory=threading.Lock)
    used: float = field(default_factory=time.monotonic)
    closed: bool = False  # set under ``lock``: a statement waiting for the lock must not run


class StatementService:
    """Runs SQL for the service; ``env`` gives its (shared) Env: Spark, warehouse, catalog."""

    def __init__(self, env: Callable[[], Env], *, idle_seconds: float = SESSION_IDLE_SECONDS):
        self._env = env
        self._idle = idle_seconds
        self._sessions: dict[str, _Session] = {}
        self._running: dict[str, Cancellable] = {}  # by the client's request id
        self._lock = threading.Lock()

    def open_session(self) -> str:
        self._end_idle()
        session = uuid.uuid4().hex
        with self._lock:
            self._sessions[session] = _Session()
        return session

    def close_session(self, session: str) -> dict[str, Any]:
        """End ``session``, rolling back its open transaction (once its statement finished)."""
        with self._lock:
            found = self._sessions.pop(session, None)
        if found is None:
            raise _no_session(session)
        with found.lock:
            open_transaction = found.slot.current is not None
            found.slot.current = None
            found.closed = True
        return {"session": session, "transaction": open_transaction}

    def cancel(self, request: str) -> dict[str, Any]:
        """Cancel the running statement the client named ``request``; returns once it ended."""
        with self._lock:
            found = self._running.get(request)
        if found is None:
            raise ObjectNotFoundError(
                f"No statement with request id {request} is running (it may have finished)."
            )
        found.cancel()
        return {"request_id": request, "cancelled": found.stopped}

    def run(
        self,
        text: str,
        *,
        max_rows: int,
        session: str | None,
        arrow: bool,
        request: str | None = None,
    ) -> dict[str, Any] | bytes:
        """Run the statement ``text``; its result as JSON-ready columns and rows (at most
        ``max_rows``), or as Arrow IPC stream bytes if ``arrow``. ``request`` (the client's id
        for this call) lets ``cancel`` stop it."""
        label = text.split(maxsplit=1)[0].upper() if text.strip() else "SQL"
        run = Cancellable(label)  # registered first: a cancel may come while Spark starts
        if request is not None:
            with self._lock:
                if request in self._running:
                    raise InvalidStatementError(f"Request id {request} is already running.")
                self._running[request] = run
        try:
            return self._run(text, run, max_rows=max_rows, session=session, arrow=arrow)
        finally:
            run.finish()
            if request is not None:
                with self._lock:
                    self._running.pop(request, None)

    def _run(
        self, text: str, run: Cancellable, *, max_rows: int, session: str | None, arrow: bool
    ) -> dict[str, Any] | bytes:
        self._end_idle()
        if session is None:
            if isinstance(s.statement_of(parse_one(text)), s.Begin):
                raise InvalidStatementError(
                    "BEGIN needs a session, or its transaction would end with the request: POST"
                    ' /v1/sessions, then pass its id as "session" with every statement.'
                )
            slot, lock = TransactionSlot(), contextlib.nullcontext()
            found = None
        else:
            with self._lock:
                found = self._sessions.get(session)
            if found is None:
                raise _no_session(session)
            found.used = time.monotonic()
            slot, lock = found.slot, found.lock
        env = self._env()
        with lock, run.running(env.spark):
            if found is not None and found.closed:  # ended while this statement waited
                raise _no_session(session or "")
            df = execute(env, text, transactions=slot)
            # A query runs only now: a failing expression in it is translated here.
            with spark_errors(run.label):
                if arrow:
                    return _ipc(df.limit(max_rows).toArrow())
                rows = df.limit(max_rows + 1).collect()
                total = df.count() if len(rows) > max_rows else None
        if found is not None:
            found.used = time.monotonic()
        return {
            "columns": [{"name": f.name, "type": f.dataType.simpleString()} for f in df.schema],
            "rows": [[jsonable(v) for v in row] for row in rows[:max_rows]],
            "truncated": total is not None,
            "total_rows": total,
            "session": session,
        }

    def _end_idle(self) -> None:
        """End the sessions idle past the timeout (not one running a statement)."""
        cutoff = time.monotonic() - self._idle
        with self._lock:
            idle = [k for k, v in self._sessions.items() if v.used < cutoff]
        for session in idle:
            found = self._sessions.get(session)
            if found is not None and found.lock.acquire(blocking=False):
                try:
                    if found.used < cutoff:
                        found.slot.current = None
                        found.closed = True
                        with self._lock:
                            self._sessions.pop(session, None)
                finally:
                    found.lock.release()


def _no_session(session: str) -> ObjectNotFoundError:
    return ObjectNotFoundError(
        f"No session {session}: it ended, or it was idle too long and its transaction was rolled"
        " back. Open a new one with POST /v1/sessions."
    )


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
