"""The ingest SDK on one machine: a channel session read back by Spark, the ON_ERROR modes, the
error table, ordering, several channels, fencing, backpressure, token order, compaction keeping row
identity, and a client that never starts a JVM."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pytest
from conftest import rows

from changelake.errors import (
    BackpressureError,
    ChannelClosedError,
    ChannelFencedError,
    IngestTimeoutError,
    InsertRejectedError,
    InvalidStatementError,
)
from changelake.ingest import Client
from changelake.ingest.compact import compact

UTC = dt.timezone.utc


@pytest.fixture
def table(session):
    session.sql(
        "CREATE TABLE orders (id BIGINT NOT NULL, item STRING, amount DECIMAL(10,2),"
        " placed TIMESTAMP)"
    )
    return "orders"


@pytest.fixture
def client(session):
    with Client(session.warehouse.root, max_client_lag=0.05, compact_after_files=None) as c:
        yield c


def _order(i: int) -> dict:
    return {
        "id": i,
        "item": f"item-{i}",
        "amount": decimal.Decimal(f"{i}.25"),
        "placed": dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(minutes=i),
    }


def test_a_channel_session_lands_rows_that_queries_read(session, table, client):
    channel = client.open_channel("orders-0", table=table)
    assert channel.latest_committed_offset_token() is None
    response = channel.insert_rows([_order(i) for i in range(100)], end_offset_token="99")
    assert (response.rows_inserted, response.has_errors) == (100, False)
    channel.insert_row(_order(100), offset_token="100")
    channel.wait_for_commit("100", timeout=30)
    assert channel.latest_committed_offset_token() == "100"
    got = rows(session.sql(f"SELECT id, item, amount, placed FROM {table}"))
    want = [tuple(_order(i).values()) for i in range(101)]
    assert [(i, s, a, p.replace(tzinfo=UTC)) for i, s, a, p in got] == sorted(want)
    history = session.sql(f"DESCRIBE HISTORY {table}").collect()
    assert {r["operation"] for r in history} >= {"INGEST"}
    assert sum(r["rows_inserted"] for r in history if r["operation"] == "INGEST") == 101
    status = channel.status()
    assert (status.rows_inserted, status.rows_buffered, status.committed_offset_token) == (
        101,
        0,
        "100",
    )


def test_on_error_modes(session, table, client):
    bad = [_order(0), {"id": None, "item": "x"}, _order(2), {"id": 3, "amount": "12345678901"}]
    go_on = client.open_channel("continue", table=table, on_error="continue")
    response = go_on.insert_rows(bad, end_offset_token="c")
    assert response.rows_inserted == 2
    assert [(e.row_index, e.column) for e in response.errors] == [(1, "id"), (3, "amount")]
    go_on.wait_for_commit("c", timeout=30)

    abort = client.open_channel("abort", table=table, on_error="abort", offset_token="a0")
    with pytest.raises(InsertRejectedError, match="Row 1") as raised:
        abort.insert_rows([{**r, "id": (r["id"] or 0) + 100} if r["id"] else r for r in bad])
    assert [e.row_index for e in raised.value.errors] == [1, 3]
    abort.insert_row({"id": 200}, offset_token="a1")
    abort.wait_for_commit("a1", timeout=30)

    skip = client.open_channel("skip", table=table, on_error="skip_batch", offset_token="s0")
    response = skip.insert_rows(
        [{**r, "id": 300} for r in bad[:1]] + bad[1:2], end_offset_token="s1"
    )
    assert response.rows_inserted == 0 and response.rows_errored == 1
    client.flush()
    assert skip.latest_committed_offset_token() == "s0"
    assert sorted(r[0] for r in session.sql(f"SELECT id FROM {table}").collect()) == [0, 2, 200]


def test_rejected_rows_go_to_the_error_table_with_the_data(session, table, client):
    channel = client.open_channel("c", table=table, error_table="orders_rejects")
    channel.insert_rows(
        [_order(1), {"id": "not a number", "item": "x"}],
        start_offset_token="7",
        end_offset_token="8",
    )
    channel.wait_for_commit("8", timeout=30)
    (reject,) = session.sql("SELECT * FROM orders_rejects").collect()
    assert (reject["table_name"], reject["channel"], reject["row_index"]) == ("orders", "c", 1)
    assert (reject["column_name"], reject["start_offset_token"], reject["end_offset_token"]) == (
        "id",
        "7",
        "8",
    )
    assert reject["value"] == "not a number" and "'id'" in reject["message"]
    assert json.loads(reject["payload"]) == {"id": "not a number", "item": "x"}
    # The good row and the reject were committed in one transaction (one statement id).
    ingest = [
        r["statement_id"]
        for t in ("orders", "orders_rejects")
        for r in session.sql(f"DESCRIBE HISTORY {t}").collect()
        if r["operation"] == "INGEST"
    ]
    assert len(ingest) == 2 and ingest[0] == ingest[1]


def test_rows_of_a_channel_commit_in_order(session, table, client):
    channel = client.open_channel("ordered", table=table)
    for first in range(0, 300, 10):
        channel.insert_rows(
            [{"id": i} for i in range(first, first + 10)], end_offset_token=str(first + 9)
        )
        time.sleep(0.01)
    channel.wait_for_commit("299", timeout=30)
    versions = [r["version"] for r in session.sql(f"DESCRIBE HISTORY {table}").collect()]
    assert len(versions) > 2  # several flushes
    for version in versions:
        ids = sorted(
            r[0] for r in session.sql(f"SELECT id FROM {table} AT (VERSION => {version})").collect()
        )
        assert ids == list(range(len(ids)))  # every committed state is a prefix of the sequence


def test_channels_of_a_table_commit_together(session, table, session_client_factory=None):
    with Client(session.warehouse.root, max_client_lag=60, compact_after_files=None) as client:
        channels = [client.open_channel(f"c{i}", table=table) for i in range(3)]
        for i, channel in enumerate(channels):
            channel.insert_rows([{"id": 10 * i + k} for k in range(5)], end_offset_token=str(i))
        before = session.catalog.table(table).current_version
        client.flush()
        assert session.catalog.table(table).current_version == before + 1
        assert client.latest_committed_offset_tokens(["c0", "c1", "c2"]) == {
            "c0": "0",
            "c1": "1",
            "c2": "2",
        }


def test_a_reopened_channel_fences_the_earlier_holder(session, table):
    wh = session.warehouse.root
    with Client(wh, max_client_lag=60) as old, Client(wh, max_client_lag=60) as new:
        zombie = old.open_channel("c", table=table)
        zombie.insert_rows([{"id": 1}], end_offset_token="1")
        fresh = new.open_channel("c", table=table)
        assert fresh.epoch == zombie.epoch + 1
        with pytest.raises(ChannelFencedError, match="reopened elsewhere"):
            old.flush()
        assert not zombie.status().valid
        with pytest.raises(ChannelFencedError):
            zombie.insert_row({"id": 2})
        fresh.insert_row({"id": 3}, offset_token="3")
        new.flush()
    assert rows(session.sql(f"SELECT id FROM {table}")) == [(3,)]


def test_a_dropped_channel_cannot_commit_and_forgets_its_token(session, table, client):
    channel = client.open_channel("c", table=table)
    channel.insert_row({"id": 1}, offset_token="1")
    channel.wait_for_commit("1", timeout=30)
    client.drop_channel("c")
    with pytest.raises(ChannelFencedError, match="dropped"):
        channel.insert_row({"id": 2})
    again = client.open_channel("c", table=table)
    assert (again.epoch, again.latest_committed_offset_token()) == (1, None)


def test_a_column_added_while_a_channel_is_open(session, table):
    """An open channel keeps the columns it was opened with: its rows read NULL in a column added
    since, and a value for it is a clear error until the channel is reopened. A NOT NULL column
    cannot be added while channels exist (their rows would hold NULL), even to an empty table."""
    session.sql("CREATE TABLE empty_t (id BIGINT)")
    with Client(session.warehouse.root, max_client_lag=60) as client:
        on_empty = client.open_channel("c", table="empty_t")
        with pytest.raises(InvalidStatementError, match="ingest channel\\(s\\) 'c'"):
            session.sql("ALTER TABLE empty_t ADD COLUMN must INT NOT NULL")
        assert session.sql("SELECT * FROM empty_t").columns == ["id"]
        on_empty.close(drop=True)
        session.sql("ALTER TABLE empty_t ADD COLUMN must INT NOT NULL")

        channel = client.open_channel("c", table=table)
        channel.insert_row({"id": 1}, offset_token="1")
        session.sql(f"ALTER TABLE {table} ADD COLUMN note STRING")
        channel.insert_row({"id": 2}, offset_token="2")
        response = channel.insert_rows([{"id": 3, "note": "new"}], end_offset_token="3")
        assert response.has_errors and "note" in response.errors[0].message
        client.flush()
        reopened = client.open_channel("c", table=table)
        reopened.insert_row({"id": 4, "note": "new"}, offset_token="4")
        client.flush()
    assert rows(session.sql(f"SELECT id, note FROM {table}")) == [(1, None), (2, None), (4, "new")]


def test_full_buffers_push_back_instead_of_growing(session, table):
    with Client(
        session.warehouse.root, max_client_lag=60, max_buffer_bytes=20_000, on_full="raise"
    ) as client:
        channel = client.open_channel("c", table=table)
        batch = [{"id": i, "item": "x" * 100} for i in range(100)]
        channel.insert_rows(batch, end_offset_token="1")
        with pytest.raises(BackpressureError, match="max_buffer_bytes"):
            channel.insert_rows(batch, end_offset_token="2")
        assert channel.status().latest_offset_token == "1"  # the refused call changed nothing
        client.flush()
        assert client.buffered_bytes == 0
        channel.insert_rows(batch, end_offset_token="2")
    with Client(session.warehouse.root, max_client_lag=0.05, max_buffer_bytes=20_000) as client:
        channel = client.open_channel("c", table=table)
        for k in range(10):  # blocks until the flusher frees room, then goes on
            channel.insert_rows(batch, end_offset_token=str(3 + k))
            assert client.buffered_bytes <= 20_000 + 15_000
    assert session.sql(f"SELECT count(*) FROM {table}").collect()[0][0] == 1200


def test_wait_for_commit_is_a_range_check_with_a_pluggable_order(session, table, client):
    channel = client.open_channel("c", table=table)
    channel.insert_rows([{"id": 1}], end_offset_token="10")
    channel.wait_for_commit("9", timeout=30)  # 10 >= 9 as integers (as strings "10" < "9")
    with pytest.raises(IngestTimeoutError, match="'11'"):
        channel.wait_for_commit("11", timeout=0.2)
    by_length = client.open_channel(
        "k", table=table, token_order=lambda a, b: len(a) - len(b), offset_token="x"
    )
    by_length.insert_rows([{"id": 2}], end_offset_token="xxx")
    by_length.wait_for_commit("yy", timeout=30)
    by_length.close()
    with pytest.raises(ChannelClosedError):
        by_length.insert_row({"id": 3})


def test_arrow_batches_go_in_whole(session, table, client):
    channel = client.open_channel("arrow", table=table)
    data = pa.table({"ID": pa.array(range(5), pa.int64()), "item": ["a", "b", "c", "d", "e"]})
    assert channel.insert_arrow(data, end_offset_token="4").rows_inserted == 5
    channel.wait_for_commit("4", timeout=30)
    assert rows(session.sql(f"SELECT id, item FROM {table}")) == [
        (0, "a"),
        (1, "b"),
        (2, "c"),
        (3, "d"),
        (4, "e"),
    ]


def test_compaction_merges_small_files_keeping_row_identity(session, table):
    with Client(session.warehouse.root, max_client_lag=0.02, compact_after_files=5) as client:
        channel = client.open_channel("c", table=table)
        session.sql("CREATE STREAM s ON TABLE orders")
        for i in range(12):
            channel.insert_row({"id": i}, offset_token=str(i))
            channel.wait_for_commit(str(i), timeout=30)
    info = session.catalog.table(table)
    ops = [r["operation"] for r in session.sql(f"DESCRIBE HISTORY {table}").collect()]
    assert "COMPACT" in ops
    files = session.catalog.snapshot_files(info.table_id, info.current_version)
    assert len(files) < 12
    # Identity survives: the stream sees each row once as an INSERT, and a change query over the
    # compaction alone sees nothing.
    seen = rows(session.sql("SELECT id, METADATA$ACTION, METADATA$ISUPDATE FROM s"))
    assert seen == [(i, "INSERT", False) for i in range(12)]
    last = max(
        r["version"]
        for r in session.sql(f"DESCRIBE HISTORY {table}").collect()
        if r["operation"] == "COMPACT"
    )
    assert (
        rows(
            session.sql(
                f"SELECT * FROM {table} CHANGES (INFORMATION => DEFAULT) AT (VERSION => {last - 1}) END (VERSION => {last})"
            )
        )
        == []
    )
    ids = (
        f"SELECT id, METADATA$ROW_ID FROM {table} CHANGES (INFORMATION => APPEND_ONLY)"
        " AT (VERSION => 0) END (VERSION => {})"
    )
    before = rows(session.sql(ids.format(last - 1)))
    assert len({rid for _, rid in before}) == len(before) > 1  # distinct ids
    after = rows(session.sql(ids.format(last)))
    assert after == before  # the same rows keep the same ids across the compaction
    assert (
        compact(session.catalog, session.warehouse, session.clock, info.table_id, min_files=99) == 0
    )


def test_the_client_never_starts_a_jvm(session, table):
    script = f"""
import subprocess, os
from changelake.ingest import Client
with Client({session.warehouse.root!r}, max_client_lag=0.05) as client:
    ch = client.open_channel("nojvm", table="orders")
    ch.insert_rows([{{"id": i}} for i in range(10)], end_offset_token="9")
    ch.wait_for_commit("9", timeout=30)
from pyspark import SparkContext
assert SparkContext._active_spark_context is None
children = subprocess.run(["ps", "--ppid", str(os.getpid()), "-o", "comm="], capture_output=True, text=True).stdout
assert "java" not in children, children
print("OK")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "OK", out.stderr
    assert session.sql(f"SELECT count(*) FROM {table}").collect()[0][0] == 10


def test_threads_share_a_client_and_a_channel(session, table, client):
    own = [client.open_channel(f"t{i}", table=table) for i in range(3)]
    shared = client.open_channel("shared", table=table)

    def produce(k: int) -> None:
        for first in range(0, 200, 20):
            ids = [k * 1000 + i for i in range(first, first + 20)]
            own[k].insert_rows([{"id": i} for i in ids], end_offset_token=str(first + 19))
            shared.insert_rows([{"id": -1 - i} for i in ids])

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.flush()
    got = [r[0] for r in session.sql(f"SELECT id FROM {table}").collect()]
    want = [k * 1000 + i for k in range(3) for i in range(200)]
    assert sorted(got) == sorted(want + [-1 - i for i in want])
    shown = {
        r["name"]: r["offset_token"] for r in session.sql("SHOW CHANNELS IN TABLE orders").collect()
    }
    assert shown == {"t0": "199", "t1": "199", "t2": "199", "shared": None}


def test_ingest_files_carry_statistics_that_prune_reads(session, table, client):
    channel = client.open_channel("c", table=table)
    for first in (0, 1000, 2000):
        channel.insert_rows(
            [{"id": i} for i in range(first, first + 100)], end_offset_token=str(first)
        )
        client.flush()
    df = session.sql(f"SELECT id FROM {table} WHERE id BETWEEN 1010 AND 1020")
    assert len(df.inputFiles()) == 1
    assert sorted(r[0] for r in df.collect()) == list(range(1010, 1021))
