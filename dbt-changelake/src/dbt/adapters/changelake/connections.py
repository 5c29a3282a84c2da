"""Profiles and connections: ``type: changelake`` with ``warehouse`` (in-process) or ``server``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dbt_common.exceptions import DbtDatabaseError, DbtRuntimeError
from dbt_common.exceptions.base import DbtConfigError

from dbt.adapters.changelake.handles import (
    Cursor,
    LocalHandle,
    RemoteHandle,
    ServerUnreachable,
    StatementFailed,
)
from dbt.adapters.changelake.relation import MAIN
from dbt.adapters.contracts.connection import AdapterResponse, Connection, Credentials
from dbt.adapters.sql import SQLConnectionManager

# A warehouse is one database: dbt's `database` names it in manifests and docs, never in SQL.
DATABASE = "changelake"


@dataclass
class ChangelakeCredentials(Credentials):
    """``warehouse`` (+ ``catalog``, a SQLAlchemy URL) runs statements in this process on a
    Spark of its own; ``server`` (+ ``token``) sends them to ``changelake serve``."""

    database: str = DATABASE
    schema: str = MAIN
    warehouse: str | None = None
    catalog: str | None = None
    server: str | None = None
    token: str | None = None

    @property
    def type(self) -> str:
        return "changelake"

    @property
    def unique_field(self) -> str:
        return self.server or self.warehouse or ""

    def _connection_keys(self) -> tuple[str, ...]:
        return ("warehouse", "catalog", "server", "database", "schema")

    def __post_init__(self) -> None:
        if (self.warehouse is None) == (self.server is None):
            raise DbtConfigError(
                "A changelake profile needs exactly one of `warehouse` (a directory: statements"
                " run in dbt's process) or `server` (the URL `changelake serve` printed)."
            )
        if self.catalog is not None and self.server is not None:
            raise DbtConfigError(
                "`catalog` goes with `warehouse`: a server reads the catalog it was started on."
            )


class ChangelakeConnectionManager(SQLConnectionManager):
    TYPE = "changelake"

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == "open":
            return connection
        credentials: ChangelakeCredentials = connection.credentials
        try:
            if credentials.server is not None:
                handle: Any = RemoteHandle(credentials.server, credentials.token)
            else:
                assert credentials.warehouse is not None
                handle = LocalHandle(credentials.warehouse, credentials.catalog)
        except ServerUnreachable as e:
            connection.state = "fail"
            raise DbtRuntimeError(str(e)) from None
        except StatementFailed as e:  # the service refused the session (a bad token)
            connection.state = "fail"
            raise DbtRuntimeError(f"changelake refused the connection: {e.message}") from None
        connection.handle = _Connection(handle, credentials.schema)
        connection.state = "open"
        return connection

    @classmethod
    def close(cls, connection: Connection) -> Connection:
        if connection.state == "open" and connection.handle is not None:
            connection.handle.close()
        connection.state = "closed"
        return connection

    def cancel(self, connection: Connection) -> None:
        pass  # dbt cancels on Ctrl-C; the statement's own process or service stops it

    @contextmanager
    def exception_handler(self, sql: str) -> Iterator[None]:
        try:
            yield
        except StatementFailed as e:
            raise DbtDatabaseError(_described(e)) from None
        except ServerUnreachable as e:
            raise DbtRuntimeError(str(e)) from None

    @classmethod
    def get_response(cls, cursor: Cursor) -> AdapterResponse:
        answer = cursor.answer
        if answer is None or answer.operation is None:
            return AdapterResponse(_message="OK")
        return AdapterResponse(
            _message=f"{answer.operation} {answer.rows_affected}",
            code=answer.operation,
            rows_affected=answer.rows_affected,
        )

    @classmethod
    def data_type_code_to_name(cls, type_code: int | str) -> str:
        return str(type_code)  # a cursor's type code is the Spark type's name already

    # changelake commits every statement; an explicit BEGIN ... COMMIT in a macro makes one
    # atomic commit of several writes (delete+insert). dbt's own transaction calls are no-ops,
    # as DDL cannot run inside a changelake transaction.
    def add_begin_query(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_commit_query(self, *args: Any, **kwargs: Any) -> None:
        pass

    def begin(self) -> Connection:
        connection = self.get_thread_connection()
        connection.transaction_open = True
        return connection

    def commit(self) -> Connection:
        connection = self.get_thread_connection()
        connection.transaction_open = False
        return connection


class _Connection:
    """What dbt holds as a connection's handle: cursors over one changelake handle."""

    def __init__(self, handle: Any, schema: str):
        self._handle = handle
        self._schema = schema

    def cursor(self) -> Cursor:
        return Cursor(self._handle, self._schema)

    def close(self) -> None:
        self._handle.close()


_QUERY_COMMENT = re.compile(r"^/\*.*?\*/\s*", re.S)  # dbt's comment naming the node


def _described(e: StatementFailed) -> str:
    """changelake's message, then the statement it is about (its first lines)."""
    text = _QUERY_COMMENT.sub("", e.statement.strip(), count=1)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return e.message
    shown = "\n    ".join(lines[:6]) + ("\n    ..." if len(lines) > 6 else "")
    return f"{e.message}\n  in statement:\n    {shown}"
