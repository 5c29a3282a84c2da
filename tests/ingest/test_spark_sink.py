"""The Structured Streaming sink: each micro-batch lands exactly once, across restarts, crashes
between the catalog commit and Spark's checkpoint commit, and zombie runs of a query."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import rows
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from changelake.catalog.requests import CommitRequest, OpenChannel
from changelake.clock import ManualClock
from changelake.errors import (
    ChannelFencedError,
    ColumnNotFoundError,
    InvalidStatementError,
    NotNullViolationError,
    TypeMismatchError,
)
from changelake.ingest import spark_sink

TICK = "100 milliseconds"


def _wait_landed(query, sink, batch_id: int, *, timeout: float = 40.0) -> None:
    """Block until ``sink``'s channel has landed ``batch_id`` (the query failing is an error)."""
    deadline = time.monotonic() + timeout
    while (landed := sink.landed_batch_id()) is None or landed < batch_id:
        if not query.isActive:
            raise AssertionError(f"the query stopped: {query.exception()}")
        assert time.monotonic() < deadline, f"batch {batch_id} not landed; got {landed}"
        time.sleep(0.05)


def _recording(sink, seen: dict[int, list[tuple]]):
    """``sink`` behind a wrapper recording each call's (rows, min id, max id): the oracle."""

    def call(df, batch_id):
        stats = df.agg(F.count("*"), F.min("id"), F.max("id")).first()
        seen[batch_id].append(tuple(stats))
        sink(df, batch_id)

    return call


def _expected_ids(seen: dict[int, list[tuple]], *, landed: int) -> list[int]:
    """The ids the source produced in batches up to ``landed``; a replayed batch must have
    brought the same rows as its first run."""
    ids = []
    for batch_id, calls in seen.items():
        assert len(set(calls)) == 1, f"batch {batch_id} replayed with other rows: {calls}"
        n, low, high = calls[0]
        if batch_id <= landed and n:
            ids += range(low, high + 1)
    return sorted(ids)


def _appends(session, sink) -> list:
    return [v for v in session.catalog.versions(sink.table_id) if v.operation == "STREAMING APPEND"]


def _table_ids(session, table: str = "t") -> list[int]:
    return [r.id for r in session.sql(f"SELECT id FROM {table}").collect()]


def _data_files(session) -> list[str]:
    return sorted(str(p) for p in (Path(session.warehouse.root) / "data").rglob("*.parquet"))


@pytest.fixture
def events(session):
    session.sql("CREATE TABLE t (id BIGINT, ts TIMESTAMP)")
    return session


def _rate(spark, *, micro_batch: bool = False):
    if micro_batch:  # exactly rowsPerBatch rows per batch, whatever the clock says
        source = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 7)
    else:
        source = spark.readStream.format("rate").option("rowsPerSecond", 50)
    return source.load().selectExpr("value AS id", "CAST(timestamp AS TIMESTAMP) AS ts")


# -- 1. restarts --------------------------------------------------------------------------------


def test_restart_on_the_same_checkpoint_lands_every_batch_once(events, spark, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    seen: dict[int, list[tuple]] = defaultdict(list)
    sinks = []
    for more_batches in (2, 2):
        sink = events.sink("t", channel="rate-query")
        sinks.append(sink)
        start = sink.landed_batch_id()
        query = (
            _rate(spark)
            .writeStream.foreachBatch(_recording(sink, seen))
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=TICK)
            .start()
        )
        try:
            _wait_landed(query, sink, (start if start is not None else -1) + more_batches)
        finally:
            query.stop()

    assert sinks[1].epoch == sinks[0].epoch + 1
    landed = sinks[1].landed_batch_id()
    ids = _table_ids(events)
    assert sorted(ids) == list(range(len(ids)))  # no duplicates, no gaps
    assert sorted(ids) == _expected_ids(seen, landed=landed)
    assert len(ids) >= 4 * 10
    assert events.sql("SELECT * FROM t WHERE ts IS NULL").count() == 0
    # One version per non-empty batch, counting its rows.
    non_empty = [calls[0][0] for b, calls in sorted(seen.items()) if b <= landed and calls[0][0]]
    assert [v.rows_inserted for v in _appends(events, sinks[1])] == non_empty
    history = events.sql("DESCRIBE HISTORY t").orderBy("version").collect()
    assert [r.operation for r in history] == ["CREATE TABLE"] + ["STREAMING APPEND"] * len(
        non_empty
    )


def test_a_replayed_or_empty_batch_makes_no_version(events, spark):
    sink = events.sink("t", channel="q")
    assert sink.landed_batch_id() is None
    batch = spark.range(3).selectExpr("id", "current_timestamp() AS ts")
    sink(batch, 0)
    sink(batch, 0)  # a replay after a restart
    sink(batch.limit(0), 1)  # empty: the token moves, the table does not
    assert sink.landed_batch_id() == 1
    assert sorted(_table_ids(events)) == [0, 1, 2]
    assert [v.rows_inserted for v in _appends(events, sink)] == [3]
    assert len(_data_files(events)) == len(events.catalog.registered_paths())
    # A new sink continues from the channel's token; an older batch id means another checkpoint.
    again = events.sink("t", channel="q")
    assert again.landed_batch_id() == 1
    with pytest.raises(InvalidStatementError, match="checkpoint other than the one"):
        again(batch, 0)


def test_a_channel_with_a_foreign_token_is_refused(events, spark):
    info = events.catalog.table("t")
    events.catalog.commit(
        [
            CommitRequest(
                "s",
                "OPEN CHANNEL",
                updates=(OpenChannel(info.table_id, "q", offset_token="kafka-17"),),
            )
        ],
        clock=ManualClock(0.0),
    )
    sink = events.sink("t", channel="q")
    with pytest.raises(InvalidStatementError, match="'kafka-17', not a micro-batch id"):
        sink(spark.range(1).selectExpr("id"), 0)


# -- 2. the crash window ------------------------------------------------------------------------


def test_death_between_the_catalog_commit_and_the_checkpoint_commit(events, spark, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    seen: dict[int, list[tuple]] = defaultdict(list)
    first = events.sink("t", channel="q")
    record = _recording(first, seen)

    def dies_after_committing_batch_2(df, batch_id):
        record(df, batch_id)
        if batch_id == 2:
            raise RuntimeError("the driver died before Spark's checkpoint commit")

    query = (
        _rate(spark, micro_batch=True)
        .writeStream.foreachBatch(dies_after_committing_batch_2)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=TICK)
        .start()
    )
    with pytest.raises(StreamingQueryException, match="the driver died"):
        query.awaitTermination(60)
    assert first.landed_batch_id() == 2

    second = events.sink("t", channel="q")
    calls: list[int] = []
    record = _recording(second, seen)
    query = (
        _rate(spark, micro_batch=True)
        .writeStream.foreachBatch(
            lambda df, batch_id: (calls.append(batch_id), record(df, batch_id))
        )
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=TICK)
        .start()
    )
    try:
        _wait_landed(query, second, 4)
    finally:
        query.stop()

    assert calls[0] == 2  # Spark replayed the batch the catalog already had
    landed = second.landed_batch_id()
    ids = _table_ids(events)
    assert sorted(ids) == list(range(7 * (landed + 1)))
    assert sorted(ids) == _expected_ids(seen, landed=landed)
    assert [v.rows_inserted for v in _appends(events, second)] == [7] * (landed + 1)


# -- 3. zombies ---------------------------------------------------------------------------------


def test_an_older_sink_is_fenced_before_writing(events, spark):
    old = events.sink("t", channel="q")
    new = events.sink("t", channel="q")
    batch = spark.range(3).selectExpr("id")
    with pytest.raises(ChannelFencedError, match=r"epoch 2; this sink holds epoch 1"):
        old(batch, 0)
    assert _table_ids(events) == []
    assert _data_files(events) == []
    new(batch, 0)
    assert sorted(_table_ids(events)) == [0, 1, 2]


def test_an_older_sink_fenced_while_writing_commits_nothing(events, spark, monkeypatch):
    old = events.sink("t", channel="q")
    real_write = spark_sink.write_data
    newer = []

    def write_then_lose_the_channel(*args, **kwargs):
        files = real_write(*args, **kwargs)
        newer.append(events.sink("t", channel="q"))  # another run of the query takes over
        return files

    monkeypatch.setattr(spark_sink, "write_data", write_then_lose_the_channel)
    with pytest.raises(ChannelFencedError, match="Micro-batch 0 was not written"):
        old(spark.range(5).selectExpr("id"), 0)
    monkeypatch.undo()

    assert _table_ids(events) == []
    assert _data_files(events) == []  # the refused files were deleted
    assert newer[0].landed_batch_id() is None
    assert [v.operation for v in events.catalog.versions(old.table_id)] == ["CREATE TABLE"]


def test_a_running_query_whose_channel_is_taken_fails(events, spark, tmp_path):
    old = events.sink("t", channel="q")
    query = (
        _rate(spark, micro_batch=True)
        .writeStream.foreachBatch(old)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime=TICK)
        .start()
    )
    try:
        _wait_landed(query, old, 0)
        new = events.sink("t", channel="q")
        with pytest.raises(StreamingQueryException, match="ChannelFencedError"):
            query.awaitTermination(60)
    finally:
        query.stop()
    landed = new.landed_batch_id()
    assert sorted(_table_ids(events)) == list(range(7 * (landed + 1)))


def test_a_sink_whose_table_was_dropped_fails(events, spark):
    sink = events.sink("t", channel="q")
    events.sql("DROP TABLE t")
    with pytest.raises(ChannelFencedError, match="was dropped, or its table was"):
        sink(spark.range(1).selectExpr("id"), 0)
    assert _data_files(events) == []


# -- 4. bad input -------------------------------------------------------------------------------


def test_a_batch_column_matching_no_table_column(events, spark, tmp_path):
    sink = events.sink("t", channel="q")
    with pytest.raises(ColumnNotFoundError, match=r"column 'idd'.*Did you mean id\?"):
        sink(spark.range(2).selectExpr("id AS idd"), 0)
    assert sink.landed_batch_id() is None

    query = (
        _rate(spark, micro_batch=True)
        .withColumnRenamed("id", "idd")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime=TICK)
        .start()
    )
    with pytest.raises(StreamingQueryException, match=r"ColumnNotFoundError: .*'idd'"):
        query.awaitTermination(60)
    assert _table_ids(events) == []


def test_columns_match_by_name_whatever_their_case_and_order(events, spark):
    sink = events.sink("t", channel="q")
    sink(spark.createDataFrame([("2024-01-02 03:04:05", 7)], "TS string, Id int"), 0)
    sink(spark.createDataFrame([(8,)], "ID long"), 1)  # ts missing: NULL
    assert rows(events.sql("SELECT id, CAST(ts AS STRING) FROM t")) == [
        (7, "2024-01-02 03:04:05"),
        (8, None),
    ]
    with pytest.raises(InvalidStatementError, match="'id' and 'ID'"):
        sink(spark.createDataFrame([(1, 2)], "id long, ID long"), 2)
    with pytest.raises(TypeMismatchError, match="BINARY"):
        sink(spark.createDataFrame([(b"x",)], "id binary"), 2)


def test_not_null_violations(session, spark):
    session.sql("CREATE TABLE n (id BIGINT NOT NULL, note STRING)")
    sink = session.sink("n", channel="q")
    with pytest.raises(NotNullViolationError, match="n.id"):
        sink(spark.createDataFrame([(1, "a"), (None, "b")], "id long, note string"), 0)
    with pytest.raises(NotNullViolationError, match="n.id"):
        sink(spark.createDataFrame([("c",)], "note string"), 0)
    assert sink.landed_batch_id() is None
    assert _data_files(session) == []
    sink(spark.createDataFrame([(1, "a")], "id long, note string"), 0)
    assert rows(session.sql("SELECT * FROM n")) == [(1, "a")]


# -- 5. change queries --------------------------------------------------------------------------


def test_landed_batches_are_inserts_to_change_queries(events, spark):
    sink = events.sink("t", channel="q")
    sink(spark.range(0, 3).selectExpr("id"), 0)
    sink(spark.range(3, 5).selectExpr("id"), 1)
    got = events.sql(
        "SELECT id, METADATA$ACTION, METADATA$ISUPDATE, METADATA$ROW_ID"
        " FROM t CHANGES (INFORMATION => APPEND_ONLY) AT (VERSION => 0)"
    ).collect()
    assert sorted((r[0], r[1], r[2]) for r in got) == [(i, "INSERT", False) for i in range(5)]
    assert len({r[3] for r in got}) == 5
    second = events.changes("t", start=1, end=2).collect()
    assert sorted((r["id"], r["METADATA$ACTION"]) for r in second) == [(3, "INSERT"), (4, "INSERT")]
