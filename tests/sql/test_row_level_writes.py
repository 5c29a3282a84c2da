"""Row-level writes in one pass or in two phases (matched positions first, full rows only of
files with a match), chosen by cost and shown in EXPLAIN; a Spark job count that does not grow
with the number of files."""

from __future__ import annotations

import dataclasses
import os

import pyarrow.parquet as pq
import pytest
import sqlglot
from conftest import ROW_LEVEL_PLANS, row_level_plan, rows, spark_settings, state_of
from pyspark.sql import functions as F

from changelake.dml import strategy
from changelake.dml.common import Target
from changelake.dml.matches import Matches, matched_rows
from changelake.dml.strategy import ONE_PASS, POSITIONS, TWO_PHASES, choose
from changelake.errors import InvalidStatementError
from changelake.runtime.env import Env
from changelake.spark import native
from changelake.spark.local import INLINE_ROWS
from changelake.storage.deletion import KEY, address_key
from changelake.storage.snapshot import FILE, POS


def _jobs(spark, action) -> int:
    """Spark jobs submitted by ``action`` (the test session runs no other jobs meanwhile)."""
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    action()
    return len(set(tracker.getJobIdsForGroup(None)) - before)


def _table_of_files(session, name: str, files: int, per_file: int = 50) -> None:
    session.sql(f"CREATE TABLE {name} (id INT, v INT, s STRING)")
    for f in range(files):
        session.sql(
            f"INSERT INTO {name} SELECT CAST(id AS INT), CAST(id % 10 AS INT), CONCAT('s', id)"
            f" FROM range({f * per_file}, {(f + 1) * per_file}, 1, 1)"
        )


def test_phase_two_reads_only_the_files_that_have_a_match(session):
    _table_of_files(session, "t", 4)
    info = session.catalog.table("t")
    state = state_of(session, info)
    chosen = state.files[2].file.path
    name = os.path.basename(chosen)
    found = session.spark.createDataFrame([(name, 3), (name, 7)], f"{FILE} string, {POS} bigint")
    size = state.files[2].file.size_bytes
    found = found.withColumn(KEY, F.expr(address_key(str(size), POS)))
    matches = Matches(rows=found, per_file={name: 2}, per_kind={})

    df = matched_rows(session.spark, session.warehouse, Target(info, state), matches)

    assert [os.path.basename(p) for p in df.inputFiles()] == [name]
    # rows 3 and 7 of the third file, i.e. ids 103 and 107, with their identity
    assert rows(df.select("id", "v", "s", "_cl_rid")) == [
        (103, 3, "s103", 103),
        (107, 7, "s107", 107),
    ]


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {t} SET v = v + 100 WHERE id % 50 = 7",
        "DELETE FROM {t} WHERE id % 50 = 7",
        "MERGE INTO {t} USING (SELECT id, 1 AS n FROM range(0, 5000, 50)) s ON {t}.id = s.id + 7"
        " WHEN MATCHED AND {t}.v = 7 THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.n"
        " WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id + 7, 0)",
    ],
    ids=["update", "delete", "merge"],
)
@pytest.mark.parametrize("plan", ROW_LEVEL_PLANS)
@pytest.mark.parametrize(
    ("few_files", "many_files", "expressions"),
    [(2, 2 * INLINE_ROWS + 4, True), (2, INLINE_ROWS, False), (INLINE_ROWS + 1, 20, False)],
    ids=["jvm-expressions", "joins-per-file-lookups-inlined", "joins-per-file-lookups-joined"],
)
def test_spark_jobs_of_a_row_level_write_do_not_grow_with_files(
    session, statement, few_files, many_files, expressions, plan
):
    _table_of_files(session, "few", few_files)
    _table_of_files(session, "many", many_files)
    session.spark.conf.set(native.ENABLED, str(expressions).lower())
    try:
        with row_level_plan(session.spark, plan):
            few = _jobs(session.spark, lambda: session.sql(statement.format(t="few")))
            many = _jobs(session.spark, lambda: session.sql(statement.format(t="many")))
    finally:
        session.spark.conf.unset(native.ENABLED)
    assert few == many
    assert many <= 16  # phase 1 (persist, count), phase 2 (broadcasts), DV and data writes


@pytest.mark.parametrize("plan", ROW_LEVEL_PLANS)
def test_update_keeps_unassigned_columns_and_before_images(session, plan):
    _table_of_files(session, "t", 3)
    with row_level_plan(session.spark, plan):
        session.sql("UPDATE t SET v = -v WHERE id IN (5, 60, 149)")
    assert rows(session.sql("SELECT * FROM t WHERE id IN (5, 60, 149)")) == [
        (5, -5, "s5"),
        (60, 0, "s60"),
        (149, -9, "s149"),
    ]
    info = session.catalog.table("t")
    # one DV file for the statement, holding the positions of all three data files
    (dv,) = {dv for f in state_of(session, info).files for dv in f.dv_paths}
    images = pq.read_table(os.path.join(session.warehouse.root, dv)).to_pylist()
    assert sorted((r["c1"], r["c2"], r["c3"], r["_cl_row_id"]) for r in images) == [
        (5, 5, "s5", 5),
        (60, 0, "s60", 60),
        (149, 9, "s149", 149),
    ]


def test_merge_clauses_keep_what_they_do_not_assign(session):
    _table_of_files(session, "t", 2)
    session.sql(
        "MERGE INTO t USING (SELECT * FROM VALUES (1, 'x'), (2, 'y'), (500, 'z') AS x(k, w)) src"
        " ON t.id = src.k"
        " WHEN MATCHED AND src.k = 1 THEN UPDATE SET s = src.w"
        " WHEN MATCHED THEN UPDATE SET v = 42"
        " WHEN NOT MATCHED THEN INSERT (id, s) VALUES (src.k, src.w)"
    )
    assert rows(session.sql("SELECT * FROM t WHERE id IN (1, 2, 500)")) == [
        (1, 1, "x"),
        (2, 42, "s2"),
        (500, None, "z"),
    ]
    assert session.sql("SELECT count(*) FROM t").first()[0] == 101


def _explained(session, statement: str) -> list[str]:
    return [r[0] for r in session.sql(f"EXPLAIN {statement}").collect()]


def test_explain_shows_how_a_write_reads_its_target_and_changes_nothing(session):
    _table_of_files(session, "t", 3)
    session.sql("CREATE TABLE bare (id INT, v INT) BEFORE_IMAGES = FALSE")
    session.sql("INSERT INTO bare VALUES (1, 1), (2, 2)")
    version = session.catalog.table("t").current_version

    update = _explained(session, "UPDATE t SET v = 0 WHERE id % 7 = 1")
    assert update[0] == "UPDATE t: one pass (3 candidate files, 0.0 MiB: one read)"
    assert any("Scan changelake" in line or "FileScan" in line for line in update[1:])
    with row_level_plan(session.spark, "two-phase"):
        forced = _explained(session, "DELETE FROM t WHERE id = 3")
    assert forced[0] == "DELETE t: two phases (spark.changelake.rowLevelPlan = two-phase)"
    joined = _explained(session, "UPDATE t SET v = s.v FROM bare s WHERE t.id = s.id")
    assert joined[0].startswith("UPDATE t: two phases (it joins a source")
    sub = _explained(session, "DELETE FROM t WHERE id IN (SELECT id FROM bare)")
    assert sub[0] == "DELETE t: two phases (the condition has a subquery)"
    assert _explained(session, "DELETE FROM bare WHERE id = 1")[0] == (
        "DELETE bare: positions only (the table keeps no before-images)"
    )
    assert _explained(session, "DELETE FROM t") == ["DELETE t: removes every file (no Spark job)"]

    assert session.catalog.table("t").current_version == version
    assert session.sql("SELECT count(*) FROM t").first()[0] == 150


MERGE = (
    "MERGE INTO t USING (SELECT * FROM VALUES (1, 'x'), (2, 'y'), (500, 'z') AS x(k, w)) src"
    " ON t.id = src.k"
    " WHEN MATCHED AND src.k = 1 THEN DELETE"
    " WHEN MATCHED THEN UPDATE SET s = src.w"
    " WHEN NOT MATCHED THEN INSERT (id, s) VALUES (src.k, src.w)"
)


def test_explain_merge_shows_how_it_reads_its_target_small_or_large(session, monkeypatch):
    _table_of_files(session, "t", 3)
    version = session.catalog.table("t").current_version

    small = _explained(session, MERGE)
    assert small[0] == (
        "MERGE t: one pass (150 target rows, at most 1000000: the join also reads the matched rows)"
    )
    assert any("Scan changelake" in line or "FileScan" in line for line in small[1:])
    with row_level_plan(session.spark, "two-phase"):
        forced = _explained(session, MERGE)
    assert forced[0] == "MERGE t: two phases (spark.changelake.rowLevelPlan = two-phase)"
    assert session.catalog.table("t").current_version == version

    monkeypatch.setattr(strategy, "SMALL_INPUT_ROWS", 100)  # as if the target were large
    large = _explained(session, MERGE)
    assert large[0] == (
        "MERGE t: two phases (150 target rows, over 100: the join finds the matches first)"
    )
    assert session.catalog.table("t").current_version == version

    session.sql(MERGE)  # in two phases, as explained
    assert rows(session.sql("SELECT * FROM t WHERE id IN (1, 2, 500)")) == [
        (2, 2, "y"),
        (500, None, "z"),
    ]
    assert session.sql("SELECT count(*) FROM t").first()[0] == 150


def test_an_unknown_row_level_plan_is_refused_and_changes_nothing(session):
    _table_of_files(session, "t", 1)
    with row_level_plan(session.spark, "sideways"), pytest.raises(InvalidStatementError) as e:
        session.sql("UPDATE t SET v = 0 WHERE id = 3")
    assert "spark.changelake.rowLevelPlan is 'sideways'" in str(e.value)
    assert "auto, one-pass, two-phase" in str(e.value)
    assert rows(session.sql("SELECT v FROM t WHERE id = 3")) == [(3,)]


def _scaled(files, *, rows: int, size: int):
    """``files`` as if each held ``rows`` rows in ``size`` bytes (their footers stay real)."""
    return [
        dataclasses.replace(f, file=dataclasses.replace(f.file, row_count=rows, size_bytes=size))
        for f in files
    ]


def _choose(session, files, condition, probe, *, joined=False, needs_rows=True):
    """The strategy of a write over ``files`` whose condition (SQL text or None) reads c1."""
    where = sqlglot.parse_one(f"SELECT * FROM t WHERE {condition}") if condition else None
    return choose(
        Env.of(session.catalog, session.clock, session.spark, session.warehouse),
        files,
        condition=where.args["where"].this if where else None,
        phase_one_columns={"c1"},
        joined=joined,
        needs_rows=needs_rows,
        probe=probe,
    )


@pytest.mark.parametrize(
    ("matches_in_probe", "expected"),
    [
        ((0, 1_000_000), TWO_PHASES),
        ((64, 64_000), ONE_PASS),
        ((64, 64), ONE_PASS),
        ((1, 1_000_000), TWO_PHASES),
        ((10, 1_000_000), ONE_PASS),  # every file holds a match: phase 2 reads them all again
    ],
    ids=["none", "spread-0.1%", "every-row", "one-row", "1e-5"],
)
def test_the_cost_model_probes_the_largest_file_and_expects_matches_per_file(
    session, matches_in_probe, expected
):
    _table_of_files(session, "t", 4)
    state = state_of(session, session.catalog.table("t"))
    files = _scaled(state.files, rows=1_000_000, size=64 << 20)
    probed = []

    def probe(file):
        probed.append(file)
        return matches_in_probe

    chosen = _choose(session, files, "id % 1000 = 3", probe)
    assert len(probed) == 1
    assert chosen.how == expected, chosen.reason
    matched, examined = matches_in_probe
    assert f"a probe found {matched} matches in {examined} rows" in chosen.reason
    # one row in a million: each file holds a match with probability 1 - 1/e
    if matches_in_probe == (1, 1_000_000):
        assert "about 3 of 4 files hold a match" in chosen.reason


def test_the_cost_model_needs_no_probe_when_the_answer_is_plain(session):
    _table_of_files(session, "t", 2)
    files = state_of(session, session.catalog.table("t")).files

    def no_probe(file):
        raise AssertionError("probed")

    def chosen(files=files, condition="id = 3", joined=False, needs_rows=True):
        return _choose(
            session, files, condition, no_probe, joined=joined, needs_rows=needs_rows
        ).how

    assert chosen() == ONE_PASS  # small
    assert chosen(files=_scaled(files, rows=10**6, size=1 << 30), condition=None) == ONE_PASS
    assert chosen(joined=True) == TWO_PHASES
    assert chosen(files=()) == ONE_PASS  # statistics ruled out every file
    assert chosen(needs_rows=False) == POSITIONS


def test_a_probe_of_the_largest_file_chooses_and_the_write_is_right(session, monkeypatch):
    monkeypatch.setattr(strategy, "SMALL_BYTES", 0)  # the probe, as on a large table
    _table_of_files(session, "t", 3)
    monkeypatch.setattr(strategy, "PROBE_MATCHES", 3)
    # the reader evaluates a row predicate itself: one pass reads the other columns of the
    # matches only, no probe needed
    late = _explained(session, "DELETE FROM t WHERE id % 10 = 3")[0]
    assert late.startswith("DELETE t: one pass (changelake's reader evaluates the condition"), late
    with spark_settings(session.spark, {native.READER: "false"}):  # Spark's reader: the cost model
        spread = _explained(session, "DELETE FROM t WHERE id % 10 = 3")[0]
        none = _explained(session, "UPDATE t SET v = 0 WHERE id % 1000 = 999")[0]
    # matches at positions 3, 13, 23 of the probed file: the scan stopped after 24 rows
    assert spread.startswith("DELETE t: one pass (a probe found 3 matches in 24 rows"), spread
    assert "about 3 of 3 files hold a match" in spread
    assert none.startswith("UPDATE t: two phases (a probe found 0 matches in 50 rows"), none
    # a function that is not the row's alone: probed, with the reader too
    unknown = _explained(session, "UPDATE t SET v = 0 WHERE id % 1000 = 999 AND rand() < 2")[0]
    assert unknown.startswith("UPDATE t: two phases (a probe found 0 matches"), unknown

    session.sql("DELETE FROM t WHERE id % 10 = 3")
    session.sql("UPDATE t SET s = 'x' WHERE id % 10 = 4")
    assert session.sql("SELECT count(*) FROM t").first()[0] == 135
    assert rows(session.sql("SELECT id, s FROM t WHERE id IN (3, 4, 5)")) == [(4, "x"), (5, "s5")]
