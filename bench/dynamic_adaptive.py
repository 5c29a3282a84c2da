"""Adaptive refreshes (issue 52 item 4): where an INCREMENTAL refresh stops being cheaper than a
FULL one, and whether AUTO's per-refresh choice (``dynamic.adaptive``) follows it.

A table of 2M rows at full scale (a fifth of the usual 10M) feeds a GROUP BY with MIN/MAX and a
join with a 1,000-row dimension, each as three dynamic tables: REFRESH_MODE = INCREMENTAL, FULL
and AUTO. Each step updates another share of the rows at random keys (untimed), then times the
three refreshes of the same change in rotating order. The figure is AUTO's time over the faster
of the other two at the largest share (a mass update: <= 1.1x, i.e. AUTO never takes the slower
path by much), with every share's times and AUTO's action in the notes: they are what
``ADAPTIVE_SHARE`` is read from.
"""

from __future__ import annotations

from bench.harness import Context, Result, Sample, compared

NAME = "dynamic_adaptive"
TARGET = 1.1
DIMENSION = 1_000
SHARES = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4)  # of the rows updated (each counts twice)
SHAPES = {
    "group_by": "SELECT g, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi"
    " FROM bench_da_fact GROUP BY g",
    "join": "SELECT f.id, f.v, d.name FROM bench_da_fact f JOIN bench_da_dim d ON f.g = d.g",
}
MODES = ("INCREMENTAL", "FULL", "AUTO")


def run(ctx: Context) -> Result:
    s = ctx.session
    rows = ctx.rows(2_000_000)
    s.sql(
        "CREATE OR REPLACE TABLE bench_da_fact AS SELECT id, CAST(id % 1000 AS INT) AS g,"
        f" id AS v FROM range(0, {rows}, 1, 8)"
    )
    s.sql(
        "CREATE OR REPLACE TABLE bench_da_dim AS SELECT CAST(id AS INT) AS g,"
        f" CONCAT('g', id) AS name FROM range({DIMENSION})"
    )
    names = {
        (shape, mode): f"bench_da_{shape}_{mode.lower()}" for shape in SHAPES for mode in MODES
    }
    for (shape, mode), name in names.items():
        s.sql(f"DROP DYNAMIC TABLE IF EXISTS {name}")
        s.sql(
            f"CREATE DYNAMIC TABLE {name} TARGET_LAG = '1 day' REFRESH_MODE = {mode}"
            f" AS {SHAPES[shape]}"
        )
    times: dict[tuple[str, str, float], float] = {}
    chosen: dict[tuple[str, float], str] = {}
    order = list(names)
    for step, share in enumerate(SHARES):
        # another share of the rows at keys spread over every file, a new offset each step
        modulus = round(1 / share)
        s.sql(f"UPDATE bench_da_fact SET v = v + 1 WHERE (id * 7919 + {step}) % {modulus} = 0")
        turn = order[step % len(order) :] + order[: step % len(order)]
        for shape, mode in turn:
            name = names[(shape, mode)]
            refresh = f"ALTER DYNAMIC TABLE {name} REFRESH"
            sample = ctx.clock.measure(lambda refresh=refresh: s.sql(refresh))
            times[(shape, mode, share)] = sample.wall_s
            if mode == "AUTO":
                record = s.catalog.refresh_history(s.catalog.table(name).table_id, limit=1)[0]
                chosen[(shape, share)] = record.record.action
    for shape in SHAPES:  # the three of a shape hold the same rows
        sums = {
            tuple(
                s.sql(
                    f"SELECT COUNT(*), SUM(CAST(HASH(*) AS BIGINT)) FROM {names[(shape, m)]}"
                ).collect()[0]
            )
            for m in MODES
        }
        assert len(sums) == 1, (shape, sums)
    last = SHARES[-1]
    auto = sum(times[(shape, "AUTO", last)] for shape in SHAPES)
    best = sum(
        min(times[(shape, "INCREMENTAL", last)], times[(shape, "FULL", last)]) for shape in SHAPES
    )
    lines = []
    for shape in SHAPES:
        per_share = ", ".join(
            f"{share:.1%}: inc {times[(shape, 'INCREMENTAL', share)]:.2f} /"
            f" full {times[(shape, 'FULL', share)]:.2f} /"
            f" auto {times[(shape, 'AUTO', share)]:.2f} s ({chosen[(shape, share)]})"
            for share in SHARES
        )
        lines.append(f"{shape}: {per_share}")
    return compared(
        NAME,
        f"INCREMENTAL, FULL and AUTO refreshes of a GROUP BY (MIN/MAX) and a join dynamic table"
        f" over {rows} rows after updates of {', '.join(f'{x:.1%}' for x in SHARES)} of the rows",
        Sample(auto, auto),
        Sample(best, best),
        baseline=f"the faster of INCREMENTAL and FULL at {last:.0%} of the rows updated",
        target=TARGET,
        rows=rows,
        notes="; ".join(lines),
    )
