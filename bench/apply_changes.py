"""APPLY CHANGES of 1M change events (10% deletes, 20% updates, 5% out of order, the rest new
keys) into a 10M-row keyed table vs a hand-written MERGE of the latest event per key (ROW_NUMBER
over the key by sequence) into an identical table. Both targets are rebuilt, untimed, before each
repetition; APPLY also keeps its per-key state table (sequence and tombstones) in the same commit,
which the hand-written MERGE does not."""

from __future__ import annotations

from bench.harness import Context, Result, compared, medians, spark_jobs

NAME = "apply_changes"
TARGET = 1.2
BASE, EVENTS = "bench_apply_base", "bench_apply_events"
OURS, THEIRS = "bench_apply_ours", "bench_apply_theirs"

MERGE = f"""
MERGE INTO {THEIRS} t USING (
  SELECT id, v, s, op FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY seq DESC) AS n FROM {EVENTS}
  ) WHERE n = 1
) e ON t.id = e.id
WHEN MATCHED AND e.op = 'd' THEN DELETE
WHEN MATCHED THEN UPDATE SET v = e.v, s = e.s
WHEN NOT MATCHED AND e.op <> 'd' THEN INSERT (id, v, s) VALUES (e.id, e.v, e.s)
"""
APPLY = (
    f"APPLY CHANGES INTO {OURS} FROM {EVENTS} KEYS (id) SEQUENCE BY seq"
    " APPLY AS DELETE WHEN op = 'd'"
)


def _events(rows: int, events: int) -> str:
    """Event i: i % 100 < 10 deletes an existing key, < 30 updates one, 95..99 repeats the key of
    update event i - 70 with an older sequence (arrives later, out of order), else inserts a new
    key."""
    key = (
        f"CASE WHEN i % 100 < 30 THEN (i * 7919) % {rows}"
        f" WHEN i % 100 >= 95 THEN ((i - 70) * 7919) % {rows}"
        f" ELSE {rows} + i END"
    )
    seq = "CASE WHEN i % 100 >= 95 THEN i - 71 ELSE i END"
    op = "CASE WHEN i % 100 < 10 THEN 'd' ELSE 'u' END"
    return (
        f"SELECT {key} AS id, CAST(i % 1000 AS INT) AS v, concat('e-', CAST(i AS STRING)) AS s,"
        f" CAST({seq} AS BIGINT) AS seq, {op} AS op FROM (SELECT id AS i FROM range(0, {events}, 1, 2))"
    )


def run(ctx: Context) -> Result:
    session = ctx.session
    rows = ctx.rows()
    events = max(100, rows // 10)
    session.sql(f"CREATE OR REPLACE TABLE {BASE} (id BIGINT, v INT, s STRING)")
    session.sql(
        f"INSERT INTO {BASE} SELECT id, CAST(id % 1000 AS INT), concat('row-', CAST(id AS STRING))"
        f" FROM range(0, {rows}, 1, 2)"
    )
    session.sql(
        f"CREATE OR REPLACE TABLE {EVENTS} (id BIGINT, v INT, s STRING, seq BIGINT, op STRING)"
    )
    session.sql(f"INSERT INTO {EVENTS} {_events(rows, events)}")

    def reset() -> None:
        for table in (OURS, THEIRS):
            session.sql(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM {BASE}")

    def ours() -> None:
        session.sql(APPLY)

    def theirs() -> None:
        session.sql(MERGE)

    reset()
    jobs = spark_jobs(ctx.spark, ours)
    theirs()
    expected = sorted(
        tuple(r) for r in session.sql(f"SELECT count(*), sum(v) FROM {THEIRS}").collect()
    )
    got = sorted(tuple(r) for r in session.sql(f"SELECT count(*), sum(v) FROM {OURS}").collect())
    assert got == expected, f"APPLY CHANGES and the MERGE disagree: {got} vs {expected}"
    mine, base = [], []
    for _ in range(ctx.repeat):
        reset()
        mine.append(ctx.clock.measure(ours))
        base.append(ctx.clock.measure(theirs))
    return compared(
        NAME,
        f"APPLY CHANGES of {events} events into a {rows}-row keyed table",
        medians(mine),
        medians(base),
        baseline="hand-written MERGE of the latest event per key (ROW_NUMBER by sequence)",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; targets rebuilt untimed before each repetition; results"
        f" checked equal (count, sum); APPLY runs {jobs} Spark jobs",
    )
