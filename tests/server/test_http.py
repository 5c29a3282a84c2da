"""`changelake serve` over real HTTP on 127.0.0.1: rows sent as JSON lines or Arrow IPC are read
back by Spark exactly as sent; errors, limits, auth and fencing answer with the right status; the
command line serves, commits on SIGTERM and refuses an open address without a token."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import uvicorn
from conftest import rows

from changelake.ingest import Client
from changelake.server import create_app

UTC = dt.timezone.utc
NDJSON = "application/x-ndjson"
ARROW = "application/vnd.apache.arrow.stream"


@dataclass
class Answer:
    status: int
    headers: Any
    body: Any


class Http:
    """A tiny HTTP client on urllib: every answer, 2xx or not, as status + parsed JSON."""

    def __init__(self, base: str, token: str | None = None):
        self.base = base
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: Any = None,
        content_type: str | None = None,
        token: str | None = None,
    ) -> Answer:
        headers = {}
        if json_body is not None:
            data, content_type = json.dumps(json_body).encode(), "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        if token or self.token:
            headers["Authorization"] = f"Bearer {token or self.token}"
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return Answer(response.status, response.headers, json.loads(response.read()))
        except urllib.error.HTTPError as e:
            return Answer(e.code, e.headers, json.loads(e.read()))

    def rows(self, table: str, channel: str, lines: list[Any], **tokens: str) -> Answer:
        query = "&".join(f"{k}={v}" for k, v in tokens.items())
        body = "".join(json.dumps(line, default=str) + "\n" for line in lines).encode()
        return self.call(
            "POST",
            f"/v1/tables/{table}/channels/{channel}/rows?{query}",
            data=body,
            content_type=NDJSON,
        )


def _serve(app) -> Iterator[str]:
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture
def table(session) -> str:
    session.sql(
        "CREATE TABLE t (id BIGINT NOT NULL, name STRING, amount DECIMAL(10,2), ts TIMESTAMP)"
    )
    return "t"


@pytest.fixture
def service(session, table):
    """Start a service on the session's warehouse: ``service(token=..., ...)`` -> Http."""
    started = []

    def start(*, token: str | None = None, max_request_bytes: int = 1 << 20, **options: Any):
        options = {"max_client_lag": 60.0, "compact_after_files": None, **options}
        client = Client(session.warehouse.root, **options)
        app = create_app(client, token=token, max_request_bytes=max_request_bytes)
        serving = _serve(app)
        started.append(serving)
        return Http(next(serving), token)

    yield start
    for serving in started:
        next(serving, None)


def _row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": None if i % 7 == 0 else f"näme-{i}",
        "amount": Decimal(f"{i * 1000 + 1}.{i % 100:02d}"),
        "ts": dt.datetime(2026, 3, 1, tzinfo=UTC) + dt.timedelta(seconds=i, microseconds=i),
    }


def _wire(row: dict[str, Any]) -> dict[str, Any]:
    """The row as a producer writes it in JSON: decimals as JSON numbers, timestamps in ISO."""
    return {**row, "amount": row["amount"], "ts": row["ts"].isoformat()}


def _json_lines(rows_: list[dict[str, Any]]) -> bytes:
    # Decimal as a bare JSON number with every digit, as a non-Python producer sends it.
    return "".join(
        json.dumps({**_wire(r), "amount": "@"}).replace('"@"', str(r["amount"])) + "\n"
        for r in rows_
    ).encode()


def _table_rows(session) -> list[tuple]:
    got = rows(session.sql("SELECT id, name, amount, ts FROM t"))
    return [(i, n, a, None if t is None else t.replace(tzinfo=UTC)) for i, n, a, t in got]


def _expected(rows_: list[dict[str, Any]]) -> list[tuple]:
    return sorted(tuple(r.values()) for r in rows_)


def test_json_lines_land_exactly_as_sent(session, service):
    http = service()
    opened = http.call("PUT", "/v1/tables/t/channels/c0", json_body={})
    assert opened.status == 200
    assert opened.body == {
        "table": "t",
        "channel": "c0",
        "epoch": 1,
        "committed_offset_token": None,
    }
    sent = [_row(i) for i in range(1000)]
    answer = http.call(
        "POST",
        "/v1/tables/t/channels/c0/rows?start_offset_token=0&end_offset_token=999",
        data=_json_lines(sent),
        content_type=f"{NDJSON}; charset=utf-8",
    )
    assert (answer.status, answer.body) == (
        200,
        {"rows_inserted": 1000, "rows_errored": 0, "errors": [], "duplicate": False},
    )
    waited = http.call("POST", "/v1/tables/t/channels/c0/wait?offset_token=999&timeout=1")
    assert waited.status == 504 and waited.body["error"]["type"] == "IngestTimeoutError"
    assert http.call("POST", "/v1/flush").body == {"channels": 1}
    waited = http.call("POST", "/v1/tables/t/channels/c0/wait?offset_token=999&timeout=10")
    assert (waited.status, waited.body) == (200, {"committed_offset_token": "999"})
    assert http.call("GET", "/v1/tables/t/channels/c0/offset").body == {
        "committed_offset_token": "999"
    }
    status = http.call("GET", "/v1/tables/T/channels/c0/status").body
    assert {k: status[k] for k in ("table", "channel", "epoch", "valid", "rows_inserted")} == {
        "table": "t",
        "channel": "c0",
        "epoch": 1,
        "valid": True,
        "rows_inserted": 1000,
    }
    assert (status["rows_buffered"], status["committed_offset_token"]) == (0, "999")
    assert _table_rows(session) == _expected(sent)
    # Reopening continues from the committed token.
    assert http.call("PUT", "/v1/tables/t/channels/c0").body["committed_offset_token"] == "999"


def test_a_resent_request_is_answered_as_a_duplicate_and_lands_once(session, service):
    http = service()
    assert http.call("PUT", "/v1/tables/t/channels/retry", json_body={}).status == 200
    first, second = [_row(i) for i in range(3)], [_row(i) for i in range(3, 5)]

    def send(rows_: list[dict[str, Any]], **tokens: str) -> dict[str, Any]:
        answer = http.rows("t", "retry", [_wire(r) for r in rows_], **tokens)
        assert answer.status == 200, answer.body
        return answer.body

    assert send(first, end_offset_token="2")["duplicate"] is False
    resent = send(first, end_offset_token="2")  # the client got no answer and retried
    assert (resent["duplicate"], resent["rows_inserted"]) == (True, 0)
    assert http.call("POST", "/v1/flush").status == 200
    assert send(first, end_offset_token="2")["duplicate"] is True  # also once committed
    assert send(second, end_offset_token="4")["rows_inserted"] == 2
    status = http.call("GET", "/v1/tables/t/channels/retry/status").body
    assert (status["rows_inserted"], status["latest_offset_token"]) == (5, "4")
    # without an end token there is nothing to recognise a resend by: each request is new
    assert send(first[:1])["duplicate"] is False
    assert send(first[:1])["duplicate"] is False
    assert http.call("POST", "/v1/flush").status == 200
    assert _table_rows(session) == _expected(first + second + first[:1] + first[:1])


def test_arrow_ipc_lands_exactly_as_sent(session, service):
    http = service()
    http.call("PUT", "/v1/tables/t/channels/arrow", json_body={"on_error": "ABORT"})
    sent = [_row(i) for i in range(500)]
    data = pa.table(
        {
            "ID": pa.array([r["id"] for r in sent], pa.int64()),
            "name": pa.array([r["name"] for r in sent], pa.string()),
            "amount": pa.array([r["amount"] for r in sent], pa.decimal128(10, 2)),
            "ts": pa.array([r["ts"] for r in sent], pa.timestamp("us", tz="UTC")),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        for batch in data.to_batches(max_chunksize=128):
            writer.write_batch(batch)
    answer = http.call(
        "POST",
        "/v1/tables/t/channels/arrow/rows?end_offset_token=499",
        data=sink.getvalue().to_pybytes(),
        content_type=ARROW,
    )
    assert answer.body == {
        "rows_inserted": 500,
        "rows_errored": 0,
        "errors": [],
        "duplicate": False,
    }
    garbage = http.call(
        "POST", "/v1/tables/t/channels/arrow/rows", data=b"not arrow", content_type=ARROW
    )
    assert garbage.status == 400 and "Arrow IPC stream" in garbage.body["error"]["message"]
    assert http.call("POST", "/v1/flush").status == 200
    assert _table_rows(session) == _expected(sent)


def test_bad_rows_are_reported_or_reject_the_request(session, service):
    http = service()
    http.call("PUT", "/v1/tables/t/channels/go-on", json_body={"on_error": "continue"})
    http.call("PUT", "/v1/tables/t/channels/strict", json_body={"on_error": "abort"})
    lines = [
        _wire(_row(1)),
        {"id": None, "name": "no id"},
        {"id": 3, "amount": Decimal("123456789.5")},
        {"id": 4, "nmae": "typo"},
        {"id": 5, "ts": "yesterday"},
        _wire(_row(6)),
    ]
    answer = http.rows("t", "go-on", lines, end_offset_token="6")
    assert answer.status == 200
    assert (answer.body["rows_inserted"], answer.body["rows_errored"]) == (2, 4)
    errors = {(e["row_index"], e["column"]): e for e in answer.body["errors"]}
    assert set(errors) == {(1, "id"), (2, "amount"), (3, None), (4, "ts")}
    assert errors[(2, "amount")]["value"] == "123456789.5"
    assert errors[(4, "ts")]["value"] == "yesterday"
    assert "Did you mean name?" in errors[(3, None)]["message"]
    assert json.loads(errors[(3, None)]["value"]) == {"nmae": "typo"}

    rejected = http.rows("t", "strict", lines, end_offset_token="6")
    assert rejected.status == 422
    assert rejected.body["error"]["type"] == "InsertRejectedError"
    assert len(rejected.body["error"]["errors"]) == 4
    assert http.call("GET", "/v1/tables/t/channels/strict/status").body["rows_inserted"] == 0

    http.call("POST", "/v1/flush")
    assert _table_rows(session) == _expected([_row(1), _row(6)])
    assert http.call("GET", "/v1/tables/t/channels/go-on/offset").body == {
        "committed_offset_token": "6"
    }
    assert http.call("GET", "/v1/tables/t/channels/strict/offset").body == {
        "committed_offset_token": None
    }


def test_malformed_bodies_and_unknown_targets(service):
    http = service(max_request_bytes=2000)
    missing = http.call("PUT", "/v1/tables/nope/channels/c")
    assert (missing.status, missing.body["error"]["type"]) == (404, "TableNotFoundError")
    bad_mode = http.call("PUT", "/v1/tables/t/channels/c", json_body={"on_error": "later"})
    assert bad_mode.status == 400 and "on_error" in bad_mode.body["error"]["message"]
    not_open = http.rows("t", "c", [_wire(_row(1))])
    assert not_open.status == 404
    assert "PUT /v1/tables/t/channels/c" in not_open.body["error"]["message"]

    http.call("PUT", "/v1/tables/t/channels/c")
    body = b'{"id": 1}\n\n{"id": 2}\n{"id": 3,\n{"id": 4}\n'
    malformed = http.call("POST", "/v1/tables/t/channels/c/rows", data=body, content_type=NDJSON)
    assert malformed.status == 400
    assert malformed.body["error"]["message"].startswith("Line 4 of the body is not valid JSON")
    assert "Traceback" not in json.dumps(malformed.body)

    wrong_type = http.call(
        "POST", "/v1/tables/t/channels/c/rows", data=b"{}", content_type="text/csv"
    )
    assert (wrong_type.status, wrong_type.body["error"]["type"]) == (415, "UnsupportedMediaType")

    large = b"".join(b'{"id": %d, "name": "xxxxxxxxxx"}\n' % i for i in range(200))
    assert len(large) > 2000
    too_large = http.call("POST", "/v1/tables/t/channels/c/rows", data=large, content_type=NDJSON)
    assert (too_large.status, too_large.body["error"]["type"]) == (413, "PayloadTooLarge")
    # Without a Content-Length (chunked), the limit holds while the body streams in.
    chunked = http.call(
        "POST",
        "/v1/tables/t/channels/c/rows",
        data=iter([large[:1500], large[1500:]]),
        content_type=NDJSON,
    )
    assert chunked.status == 413
    status = http.call("GET", "/v1/tables/t/channels/c/status").body
    assert (status["rows_inserted"], status["rows_errored"]) == (0, 0)
    unknown_route = http.call("GET", "/v1/nothing")
    assert (unknown_route.status, unknown_route.body["error"]["type"]) == (404, "NotFound")


def test_a_token_is_required_when_set(service):
    http = service(token="s3cret")
    assert http.call("GET", "/v1/health").status == 200
    no_token = Http(http.base).call("PUT", "/v1/tables/t/channels/c")
    assert (no_token.status, no_token.body["error"]["type"]) == (401, "Unauthorized")
    assert no_token.headers["WWW-Authenticate"] == "Bearer"
    wrong = http.call("PUT", "/v1/tables/t/channels/c", token="s3cre")
    assert wrong.status == 401
    assert http.call("PUT", "/v1/tables/t/channels/c").status == 200
    assert Http(http.base).call("POST", "/v1/flush").status == 401


def test_a_reopen_elsewhere_fences_the_service_channel(session, service):
    http = service()
    http.call("PUT", "/v1/tables/t/channels/c")
    assert http.rows("t", "c", [_wire(_row(1))], end_offset_token="1").body["rows_inserted"] == 1
    with Client(session.warehouse.root, compact_after_files=None) as other:
        taken = other.open_channel("c", table="t")
        assert taken.epoch == 2
        flushed = http.call("POST", "/v1/flush")
        assert (flushed.status, flushed.body["error"]["type"]) == (409, "ChannelFencedError")
        again = http.rows("t", "c", [_wire(_row(2))], end_offset_token="2")
        assert (again.status, again.body["error"]["type"]) == (409, "ChannelFencedError")
        status = http.call("GET", "/v1/tables/t/channels/c/status").body
        assert (status["valid"], status["epoch"]) == (False, 1)
        taken.insert_rows([_row(3)], end_offset_token="3")
        taken.wait_for_commit("3", timeout=30)
    assert http.call("GET", "/v1/tables/t/channels/c/offset").body == {
        "committed_offset_token": "3"
    }
    assert _table_rows(session) == _expected([_row(3)])
    # The service takes the channel back with a new epoch.
    assert http.call("PUT", "/v1/tables/t/channels/c").body["epoch"] == 3


def test_full_buffers_answer_503_with_retry_after(service):
    http = service(max_buffer_bytes=1, on_full="raise", max_client_lag=2.5)
    http.call("PUT", "/v1/tables/t/channels/c")
    assert http.rows("t", "c", [_wire(_row(1))], end_offset_token="1").status == 200
    full = http.rows("t", "c", [_wire(_row(2))], end_offset_token="2")
    assert (full.status, full.body["error"]["type"]) == (503, "BackpressureError")
    assert full.headers["Retry-After"] == "3"
    assert http.call("POST", "/v1/flush").status == 200
    assert http.rows("t", "c", [_wire(_row(2))], end_offset_token="2").status == 200


def test_close_and_drop(service):
    http = service()
    http.call("PUT", "/v1/tables/t/channels/c")
    http.rows("t", "c", [_wire(_row(1))], end_offset_token="1")
    closed = http.call("DELETE", "/v1/tables/t/channels/c")
    assert closed.body == {"table": "t", "channel": "c", "dropped": False}
    assert http.call("GET", "/v1/tables/t/channels/c/status").status == 404
    assert http.call("GET", "/v1/tables/t/channels/c/offset").body == {
        "committed_offset_token": "1"
    }
    assert http.call("DELETE", "/v1/tables/t/channels/c?drop=true").body["dropped"] is True
    gone = http.call("GET", "/v1/tables/t/channels/c/offset")
    assert (gone.status, gone.body["error"]["type"]) == (404, "ChannelNotFoundError")


def test_openapi_names_the_service_by_what_it_serves(session):
    client = Client(session.warehouse.root, max_client_lag=60.0)
    serving = _serve(create_app(client, token=None))
    try:
        info = Http(next(serving)).call("GET", "/openapi.json").body["info"]
    finally:
        next(serving, None)
    assert info["title"] == "changelake serve"
    assert "ingest channels" in info["description"] and "SQL" not in info["description"]


def test_openapi_describes_the_routes(service):
    http = service(token="t0k")
    spec = Http(http.base).call("GET", "/openapi.json").body
    paths = spec["paths"]
    channel = "/v1/tables/{table}/channels/{channel}"
    assert set(paths) == {
        "/v1/health",
        "/v1/flush",
        channel,
        f"{channel}/rows",
        f"{channel}/offset",
        f"{channel}/status",
        f"{channel}/wait",
    }
    assert set(paths[channel]) == {"put", "delete"}
    assert all(op.get("summary") for ops in paths.values() for op in ops.values())
    assert set(paths[f"{channel}/rows"]["post"]["requestBody"]["content"]) == {NDJSON, ARROW}
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


def _cli(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if k != "CHANGELAKE_SERVE_TOKEN"}
    return subprocess.Popen(
        [sys.executable, "-m", "changelake.cli", "serve", *args],
        env={**environment, **(env or {})},
        **kwargs,
    )


def test_the_command_line_serves_and_commits_on_sigterm(session, table, tmp_path: Path):
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        process = _cli(
            session.warehouse.root,
            "--port",
            "0",
            "--max-client-lag",
            "600",
            env={"CHANGELAKE_SERVE_TOKEN": "from-env"},
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while "listening on http://" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        url = log.read_text().split("listening on ", 1)[1].split()[0]
        http = Http(url, "from-env")
        assert http.call("PUT", "/v1/tables/t/channels/cli").status == 200
        sent = [_row(i) for i in range(10)]
        assert http.rows("t", "cli", [_wire(r) for r in sent], end_offset_token="9").status == 200
        assert http.call("GET", "/v1/tables/t/channels/cli/status").body["rows_buffered"] == 10
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert process.returncode in (0, -signal.SIGTERM), log.read_text()
    assert _table_rows(session) == _expected(sent)


def test_the_command_line_refuses_an_open_address_without_a_token(tmp_path: Path):
    process = _cli(
        str(tmp_path / "wh"), "--host", "0.0.0.0", stderr=subprocess.PIPE, stdout=subprocess.PIPE
    )
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "Refusing to listen on 0.0.0.0 without a token" in err.decode()
