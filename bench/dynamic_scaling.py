"""Does a refresh cost what changed, whatever the table holds? (issue 52)

The same delta (1,000 rows changed at random keys: 400 updated, 300 deleted, 300 inserted) on
two facts, one a tenth of the other (1M and 10M rows at full scale), each under two INCREMENTAL
dynamic tables: a GROUP BY with COUNT, SUM, MIN and MAX (ten rows a group) and a join with a
1,000-row dimension. Each round changes both facts (untimed), then times the four refreshes in
rotating order, and the two queries from scratch over the large fact (to no sink).

The figure is the refreshes' time over the large fact over their time over the small one (both
shapes summed; target <= 1.2x: the refresh stays where it was when the table grows tenfold);
the notes give each shape's ratio, each INCREMENTAL refresh over its query from scratch at the
large size (target <= 0.15x) and the rows each refresh read.
"""

from __future__ import annotations

from bench.harness import Context, Result, Sample, compared, medians, rows_read

NAME = "dynamic_scaling"
TARGET = 1.2
DIMENSION = 1_000
UPDATED, DELETED, INSERTED = 400, 300, 300
SHAPES = {
    "group_by": "SELECT g, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi"
    " FROM {fact} GROUP BY g",
    "join": "SELECT f.id, f.v, d.name FROM {fact} f JOIN bench_ds_dim d ON f.k = d.k",
}


def run(ctx: Context) -> Result:
    s = ctx.session
    large = ctx.rows()
    sizes = {"small": max(10_000, large // 10), "large": large}
    s.sql(
        "CREATE OR REPLACE TABLE bench_ds_dim AS SELECT CAST(id AS INT) AS k,"
        f" CONCAT('k', id) AS name FROM range({DIMENSION})"
    )
    names: dict[tuple[str, str], str] = {}
    for size, rows in sizes.items():
        fact = f"bench_ds_{size}"
        s.sql(
            f"CREATE OR REPLACE TABLE {fact} AS SELECT id, id % {rows // 10} AS g,"
            f" CAST(id % {DIMENSION} AS INT) AS k, id AS v FROM range(0, {rows}, 1, 8)"
        )
        for shape, query in SHAPES.items():
            name = names[(size, shape)] = f"bench_ds_{size}_{shape}"
            s.sql(f"DROP DYNAMIC TABLE IF EXISTS {name}")
            s.sql(
                f"CREATE DYNAMIC TABLE {name} TARGET_LAG = '1 day' REFRESH_MODE = INCREMENTAL"
                f" AS {query.format(fact=fact)}"
            )
    samples: dict[tuple[str, str], list[Sample]] = {key: [] for key in names}
    scratch: dict[str, list[Sample]] = {shape: [] for shape in SHAPES}
    read: dict[tuple[str, str], int] = {}
    order = list(names)
    for round_ in range(ctx.repeat + 1):  # the first round is untimed
        for size, rows in sizes.items():
            _change(s, f"bench_ds_{size}", rows, round_)
        turn = order[round_ % len(order) :] + order[: round_ % len(order)]
        for key in turn:
            refresh = f"ALTER DYNAMIC TABLE {names[key]} REFRESH"
            if round_ == 0:
                read[key] = rows_read(ctx.spark, lambda refresh=refresh: s.sql(refresh))
            else:
                samples[key].append(ctx.clock.measure(lambda refresh=refresh: s.sql(refresh)))
        if round_:
            for shape, query in SHAPES.items():
                sql = query.format(fact="bench_ds_large")
                scratch[shape].append(
                    ctx.clock.measure(
                        lambda sql=sql: s.sql(sql).write.format("noop").mode("overwrite").save()
                    )
                )
    for (size, shape), name in names.items():  # each table holds its query's rows
        query = SHAPES[shape].format(fact=f"bench_ds_{size}")
        columns = "g, n, s, lo, hi" if shape == "group_by" else "id, v, name"
        got, want = (
            s.sql(f"SELECT COUNT(*), SUM(CAST(HASH({columns}) AS BIGINT)) FROM ({q})").collect()[0]
            for q in (f"SELECT * FROM {name}", query)
        )
        assert got == want, (name, got, want)
    time = {key: medians(found) for key, found in samples.items()}
    ours, theirs = (
        Sample(
            sum(time[(size, sh)].wall_s for sh in SHAPES),
            sum(time[(size, sh)].cpu_s for sh in SHAPES),
        )
        for size in ("large", "small")
    )
    notes = []
    for shape in SHAPES:
        big, small = time[("large", shape)].wall_s, time[("small", shape)].wall_s
        recompute = medians(scratch[shape]).wall_s
        notes.append(
            f"{shape}: {small:.2f} s at {sizes['small']:,} rows, {big:.2f} s at"
            f" {sizes['large']:,} ({big / small:.2f}x); the query from scratch {recompute:.2f} s"
            f" (INCREMENTAL / it: {big / recompute:.2f}x, target <= 0.15x); rows read"
            f" {read[('small', shape)]:,} / {read[('large', shape)]:,}"
        )
    return compared(
        NAME,
        f"INCREMENTAL refreshes of a GROUP BY (MIN/MAX) and a join dynamic table after the same"
        f" {UPDATED + DELETED + INSERTED:,} rows changed, over {sizes['large']:,} rows vs over"
        f" {sizes['small']:,}",
        ours,
        theirs,
        baseline=f"the same refreshes over {sizes['small']:,} rows",
        target=TARGET,
        rows=large,
        notes="; ".join(notes),
    )


def _change(s, fact: str, rows: int, round_: int) -> None:
    """400 rows updated and 300 deleted at keys spread over the fact, 300 inserted."""
    s.sql(f"UPDATE {fact} SET v = v + 1 WHERE (id * 7919 + {round_}) % {rows // UPDATED} = 0")
    s.sql(f"DELETE FROM {fact} WHERE (id * 104729 + {round_}) % {rows // DELETED} = 1")
    first = rows + round_ * INSERTED
    s.sql(
        f"INSERT INTO {fact} SELECT id, id % {rows // 10} AS g, CAST(id % {DIMENSION} AS INT),"
        f" id FROM range({first}, {first + INSERTED})"
    )
