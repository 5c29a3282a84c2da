"""``POST /v1/sql`` and ``/v1/sessions`` over real HTTP, and the command line through a service."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from test_http import Http, _serve

from changelake.cli import main, remote
from changelake.ingest import Client
from changelake.runtime.env import Env
from changelake.server import create_app
from changelake.sql.service import StatementService


@pytest.fixture
def service(session):
    """Start a service with SQL on the session's warehouse: ``service(token=..., ...)`` -> Http."""
    started = []

    def env() -> Env:
        s = session
        return Env.of(s.catalog, s.clock, s.spark, s.warehouse)

    def start(*, token: str | None = None, idle_seconds: float = 600.0):
        client = Client(session.warehouse.root, max_client_lag=60.0)
        statements = StatementService(env, idle_seconds=idle_seconds)
        serving = _serve(create_app(client, token=token, statements=statements))
        started.append(serving)
        return Http(next(serving), token)

    yield start
    for serving in started:
        next(serving, None)


def _sql(http: Http, statement: str, **options) -> tuple[int, dict]:
    answer = http.call("POST", "/v1/sql", json_body={"statement": statement, **options})
    return answer.status, answer.body


@pytest.fixture
def typed(session) -> None:
    session.sql(
        "CREATE TABLE typed (id BIGINT, name STRING, amount DECIMAL(10,2), day DATE,"
        " at TIMESTAMP, raw BINARY, ok BOOLEAN, ratio DOUBLE)"
    )
    session.sql(
        "INSERT INTO typed VALUES (1, 'a', 12.50, DATE'2026-01-02',"
        " TIMESTAMP'2026-01-02 03:04:05.123456', X'CAFE', true, 0.5),"
        " (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )


def test_a_query_answers_rows_with_column_types(service, typed):
    http = service()
    status, body = _sql(http, "SELECT * FROM typed ORDER BY id")
    assert status == 200, body
    assert body["columns"] == [
        {"name": "id", "type": "bigint"},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "decimal(10,2)"},
        {"name": "day", "type": "date"},
        {"name": "at", "type": "timestamp"},
        {"name": "raw", "type": "binary"},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "double"},
    ]
    assert body["rows"] == [
        [1, "a", "12.50", "2026-01-02", "2026-01-02 03:04:05.123456", "yv4=", True, 0.5],
        [2, None, None, None, None, None, None, None],
    ]
    assert body["truncated"] is False and body["total_rows"] is None

    status, body = _sql(http, "SELECT id FROM range(5)", max_rows=2)
    assert (status, body["rows"], body["truncated"], body["total_rows"]) == (
        200,
        [[0], [1]],
        True,
        5,
    )


def test_arrow_ipc_on_request(service, typed):
    http = service()
    request = urllib.request.Request(
        http.base + "/v1/sql",
        data=json.dumps({"statement": "SELECT id, amount, raw FROM typed ORDER BY id"}).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/vnd.apache.arrow.stream",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"] == "application/vnd.apache.arrow.stream"
        table = pa.ipc.open_stream(response.read()).read_all()
    assert table.column_names == ["id", "amount", "raw"]
    assert table.to_pylist()[0]["raw"] == b"\xca\xfe"
    assert str(table.schema.field("amount").type) == "decimal128(10, 2)"


def test_writes_and_errors_answer_as_json(service, session, typed):
    http = service()
    status, body = _sql(http, "UPDATE typed SET name = 'b' WHERE id = 2")
    assert status == 200
    row = dict(zip([c["name"] for c in body["columns"]], body["rows"][0], strict=True))
    assert (row["operation"], row["object"], row["rows_updated"]) == ("UPDATE", "typed", 1)

    cases = [
        ("SELEC 1", 400, "SqlSyntaxError"),
        ("SELECT * FROM nowhere", 404, "TableNotFoundError"),
        ("UPDATE typed SET id = id / 0", 400, None),
        ("SELECT 1; SELECT 2", 400, None),
    ]
    for statement, expected, kind in cases:
        status, body = _sql(http, statement)
        assert status == expected, (statement, body)
        assert set(body) == {"error"} and body["error"]["message"], body
        if kind:
            assert body["error"]["type"] == kind
        assert "Traceback" not in body["error"]["message"]
        assert "java" not in body["error"]["message"].lower()
    assert session.sql("SELECT id FROM typed WHERE id = 1").collect()  # nothing changed
    status, body = _sql(http, "SELECT 1", max_rows=-1)
    assert status == 400 and body["error"]["type"] == "RequestValidationError"


def test_a_session_holds_a_transaction_other_requests_do_not_see(service, session):
    session.sql("CREATE TABLE acct (id INT, balance INT)")
    http = service()
    status, body = _sql(http, "BEGIN")
    assert status == 400 and "POST /v1/sessions" in body["error"]["message"]

    opened = http.call("POST", "/v1/sessions").body["session"]
    assert _sql(http, "BEGIN", session=opened)[0] == 200
    assert _sql(http, "INSERT INTO acct VALUES (1, 100)", session=opened)[0] == 200
    assert _sql(http, "SELECT count(*) FROM acct", session=opened)[1]["rows"] == [[1]]
    assert _sql(http, "SELECT count(*) FROM acct")[1]["rows"] == [[0]]  # another statement
    assert _sql(http, "COMMIT", session=opened)[0] == 200
    assert _sql(http, "SELECT count(*) FROM acct")[1]["rows"] == [[1]]

    # ending a session rolls its transaction back
    assert _sql(http, "BEGIN", session=opened)[0] == 200
    assert _sql(http, "INSERT INTO acct VALUES (2, 5)", session=opened)[0] == 200
    closed = http.call("DELETE", f"/v1/sessions/{opened}")
    assert (closed.status, closed.body["transaction"]) == (200, True)
    assert _sql(http, "SELECT count(*) FROM acct")[1]["rows"] == [[1]]
    status, body = _sql(http, "COMMIT", session=opened)
    assert status == 404 and "No session" in body["error"]["message"]


def test_an_idle_session_ends_and_its_transaction_rolls_back(service, session):
    session.sql("CREATE TABLE acct (id INT)")
    http = service(idle_seconds=0.5)
    gone = http.call("POST", "/v1/sessions").body["session"]
    assert _sql(http, "BEGIN", session=gone)[0] == 200
    assert _sql(http, "INSERT INTO acct VALUES (1)", session=gone)[0] == 200
    time.sleep(1.0)  # the client went away
    assert _sql(http, "SELECT count(*) FROM acct")[1]["rows"] == [[0]]
    status, body = _sql(http, "COMMIT", session=gone)
    assert status == 404 and "idle too long" in body["error"]["message"]
    assert session.sql("SELECT count(*) FROM acct").first()[0] == 0


def test_sql_needs_the_token_when_one_is_set(service):
    http = service(token="s3cret")
    assert (
        http.call("POST", "/v1/sql", json_body={"statement": "SELECT 1"}, token="x").status == 401
    )
    assert _sql(http, "SELECT 1 AS one")[1]["rows"] == [[1]]


def test_the_command_line_runs_statements_through_the_warehouse_service(
    service, session, monkeypatch
):
    http = service(token="s3cret")
    warehouse = session.warehouse.root
    remote.announce(warehouse, http.base)
    try:
        announced = json.loads((Path(warehouse) / remote.ANNOUNCEMENT).read_text())
        assert announced == {"url": http.base, "pid": os.getpid()}
        runner = CliRunner(env={"COLUMNS": "200", "CHANGELAKE_SERVE_TOKEN": "s3cret"})
        script = (
            "CREATE TABLE viahttp (id INT, s STRING); BEGIN; INSERT INTO viahttp VALUES (1, 'x');"
            " COMMIT; SELECT * FROM viahttp"
        )
        result = runner.invoke(main, ["-w", warehouse, "sql", "--format", "csv", script])
        assert result.exit_code == 0, result.output
        assert result.stdout.endswith("id,s\n1,x\n"), result.stdout
        # what the service did is in the warehouse
        assert session.sql("SELECT s FROM viahttp").first()[0] == "x"

        failed = runner.invoke(main, ["-w", warehouse, "sql", "SELECT * FROM missing"])
        assert failed.exit_code == 1
        assert "error: Table, view or stream 'missing' does not exist" in failed.stderr
        wrong = CliRunner(env={"CHANGELAKE_SERVE_TOKEN": "nope"}).invoke(
            main, ["-w", warehouse, "sql", "SELECT 1"]
        )
        assert wrong.exit_code == 1 and "Wrong token" in wrong.stderr
    finally:
        remote.withdraw(warehouse)
    assert not (Path(warehouse) / remote.ANNOUNCEMENT).exists()
