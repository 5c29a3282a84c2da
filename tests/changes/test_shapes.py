"""Plan shapes (paper 3.2.3, table 3) chosen from catalog metadata, and what each side reads."""

from __future__ import annotations

import re

import pytest
from conftest import rows, spark_settings

from changelake.changes.plan import ChangePlan, Information, Shape

SUMMARY = re.compile(
    r"^CHANGES on (\w+) \((\w+)\) versions \((\d+), (\d+)\]: shape (\w+);"
    r" before side reads (\d+) file\(s\) for (\d+) row\(s\);"
    r" after side reads (\d+) file\(s\) for (\d+) row\(s\)$"
)


def explained(session, query: str) -> list[tuple]:
    """(table, information, start, end, shape, before files, before rows, after files, after
    rows) of each change scan EXPLAIN reports, in order."""
    out = []
    for (line,) in session.sql(f"EXPLAIN {query}").collect():
        found = SUMMARY.match(line)
        if found:
            name, info, *numbers = found.groups()
            s, e, shape, bf, br, af, ar = numbers
            out.append((name, info, int(s), int(e), shape, int(bf), int(br), int(af), int(ar)))
    return out


def sides(plan: ChangePlan) -> tuple:
    """(shape, before files, before rows, after files, after rows) from the Python plan."""
    return (
        plan.shape,
        plan.before_file_count,
        plan.before_rows,
        len(plan.after_files.files),
        plan.after_files.rows,
    )


def current(session, name: str = "t") -> int:
    return session.catalog.table(name).current_version


def file_paths(session, name: str = "t") -> set[str]:
    info = session.catalog.table(name)
    return {
        f.file.path for f in session.catalog.snapshot_files(info.table_id, info.current_version)
    }


@pytest.fixture
def t(session) -> int:
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    return current(session)


def test_empty_interval(session, t):
    plan = session.change_plan("t", start=t)
    assert sides(plan) == (Shape.EMPTY, 0, 0, 0, 0)
    assert (plan.start_version, plan.end_version) == (t, t)
    query = f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => {t})"
    assert explained(session, query) == [("t", "DEFAULT", t, t, "EMPTY", 0, 0, 0, 0)]
    for information in ("append_only", "redo"):
        assert session.change_plan("t", start=t, information=information).shape is Shape.EMPTY


def test_inserts_only_are_added_only(session, t):
    session.sql("INSERT INTO t VALUES (4, 'd')")
    session.sql("INSERT INTO t VALUES (5, 'e'), (6, 'f')")
    for information in ("default", "append_only", "redo"):
        plan = session.change_plan("t", start=t, information=information)
        assert sides(plan) == (Shape.ADDED_ONLY, 0, 0, 2, 3), information
    query = f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => {t})"
    assert explained(session, query) == [("t", "DEFAULT", t, t + 2, "ADDED_ONLY", 0, 0, 2, 3)]


def test_deletes_only_are_removed_only(session, t):
    session.sql("INSERT INTO t VALUES (4, 'd')")
    start = current(session)
    session.sql("DELETE FROM t WHERE id = 2")
    plan = session.change_plan("t", start=start)
    assert sides(plan) == (Shape.REMOVED_ONLY, 1, 1, 0, 0)
    assert plan.before_files.empty and plan.before_deleted.rows == 1
    session.sql("TRUNCATE TABLE t")
    plan = session.change_plan("t", start=start)
    # Files removed whole: the before side reads their live rows at the start.
    assert sides(plan) == (Shape.REMOVED_ONLY, 2, 4, 0, 0)
    assert plan.before_deleted.empty
    query = f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => {start})"
    assert explained(session, query) == [
        ("t", "DEFAULT", start, start + 2, "REMOVED_ONLY", 2, 4, 0, 0)
    ]
    # APPEND_ONLY never reads removed rows.
    assert session.change_plan("t", start=start, information="append_only").shape is Shape.EMPTY


def test_updates_are_minimize(session, t):
    session.sql("UPDATE t SET v = 'B' WHERE id = 2")
    plan = session.change_plan("t", start=t)
    assert plan.shape is Shape.MINIMIZE
    assert plan.information is Information.DEFAULT
    query = f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => {t})"
    ((*_, shape, bf, br, af, ar),) = explained(session, query)
    assert (shape, bf, br, af, ar) == ("MINIMIZE", *sides(plan)[1:])
    assert (br, ar) == (1, 1)
    # Inserted rows only in APPEND_ONLY: the update's copy is not an insert.
    assert session.change_plan("t", start=t, information="append_only").shape is Shape.ADDED_ONLY


def test_minimize_reads_only_the_changed_rows(session, spark):
    session.sql("CREATE TABLE t (id BIGINT, v STRING)")
    by_file: list[set[str]] = []
    for i in range(3):
        before = file_paths(session)
        session.append(
            "t",
            spark.range(i * 1000, (i + 1) * 1000, numPartitions=1).selectExpr(
                "id", "CAST(id AS STRING) AS v"
            ),
        )
        by_file.append(file_paths(session) - before)
    assert [len(f) for f in by_file] == [1, 1, 1]
    start = current(session)
    session.sql("UPDATE t SET v = 'x' WHERE id IN (1001, 1002)")

    plan = session.change_plan("t", start=start)
    assert sides(plan) == (Shape.MINIMIZE, 1, 2, 1, 2)
    assert plan.before_files.empty, "no file is rewritten: the before side is DV positions"
    assert plan.before_deleted.rows == 2
    assert {f.path for f in plan.before_deleted.files} == by_file[1]
    read = {
        f.path for f in plan.before_deleted.files + plan.before_files.files + plan.after_files.files
    }
    assert not read & (by_file[0] | by_file[2]), "the unchanged files are never planned"
    assert plan.after_files.rows == 2 and plan.after_files.files[0].row_count == 2

    query = f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => {start})"
    assert explained(session, query) == [("t", "DEFAULT", start, start + 1, "MINIMIZE", 1, 2, 1, 2)]
    assert rows(session.sql(query).select("id", "v", "METADATA$ACTION", "METADATA$ISUPDATE")) == [
        (1001, "1001", "DELETE", True),
        (1001, "x", "INSERT", True),
        (1002, "1002", "DELETE", True),
        (1002, "x", "INSERT", True),
    ]
    # Growing the table does not grow an interval that does not touch the new rows.
    session.append("t", spark.range(3000, 6000).selectExpr("id", "CAST(id AS STRING) AS v"))
    again = session.change_plan("t", start=start, end=start + 1)
    assert sides(again) == sides(plan)


def test_show_initial_rows_stream_first_read(session, t):
    session.sql("INSERT INTO t VALUES (4, 'd'), (5, 'e')")
    session.sql("DELETE FROM t WHERE id = 1")
    session.sql("CREATE STREAM s ON TABLE t SHOW_INITIAL_ROWS = TRUE")
    end = current(session)
    # The first read is the table's rows at the stream's frontier: both files, minus the delete.
    assert explained(session, "SELECT * FROM s") == [
        ("t", "DEFAULT", end, end, "INITIAL_ROWS", 0, 0, 2, 4)
    ]
    assert rows(session.sql("SELECT id, METADATA$ACTION FROM s")) == [
        (2, "INSERT"),
        (3, "INSERT"),
        (4, "INSERT"),
        (5, "INSERT"),
    ]
    session.sql("CREATE TABLE sink (id INT)")
    session.sql("INSERT INTO sink SELECT id FROM s")
    session.sql("UPDATE t SET v = 'x' WHERE id = 2")
    ((*_, shape, _bf, br, _af, ar),) = explained(session, "SELECT * FROM s")
    assert (shape, br, ar) == ("MINIMIZE", 1, 1)


def test_explain_reports_every_change_scan_of_a_query(session, t):
    session.sql("CREATE TABLE u (id INT)")
    start_u = current(session, "u")
    session.sql("INSERT INTO u VALUES (1)")
    session.sql("DELETE FROM t WHERE id = 3")
    query = (
        f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => {t}) a"
        f" JOIN u CHANGES (INFORMATION => APPEND_ONLY) AT (VERSION => {start_u}) b ON a.id = b.id"
    )
    assert explained(session, query) == [
        ("t", "DEFAULT", t, t + 1, "REMOVED_ONLY", 1, 1, 0, 0),
        ("u", "APPEND_ONLY", start_u, start_u + 1, "ADDED_ONLY", 0, 0, 1, 1),
    ]


def test_minimize_pairs_small_sides_in_one_task_and_large_ones_by_a_shuffle(
    session, spark, monkeypatch
):
    """The pairing is chosen by the rows the two sides read (EXPLAIN says which); both give
    the same changes. In one task there is no exchange: the sides are coalesced into the task
    that reads them and joined by a hash of the deleted rows."""
    session.sql("CREATE TABLE p AS SELECT id, CAST(id AS STRING) AS v FROM range(0, 300, 1, 3)")
    start = current(session, "p")
    session.sql("UPDATE p SET v = 'x' WHERE id % 7 = 1 OR id = 5")
    session.sql("UPDATE p SET v = '5' WHERE id = 5")  # back to its old value: no change
    session.sql("DELETE FROM p WHERE id % 10 = 3")
    session.sql("INSERT INTO p SELECT id, 'new' FROM range(300, 320)")
    query = f"SELECT * FROM p CHANGES (INFORMATION => DEFAULT) AT (VERSION => {start})"
    results = {}
    # a plan of large sides is large: its shuffles stay (a small plan's run as one task)
    large = {"spark.changelake.smallInputBytes": "0"}
    for limit, pairing in ((10_000, "in one task, without a shuffle"), (0, "by a shuffle")):
        monkeypatch.setattr("changelake.changes.plan.ONE_TASK_ROWS", limit)
        with spark_settings(spark, {} if limit else large):
            lines = [line for (line,) in session.sql(f"EXPLAIN {query}").collect()]
        assert any(
            line.startswith(f"MINIMIZE pairs the two sides by identity {pairing}") for line in lines
        )
        spark_plan = "\n".join(lines)
        one_task = limit > 0
        assert ("Exchange" in spark_plan) == (not one_task)
        assert ("ShuffledHashJoin" in spark_plan) == one_task
        results[pairing] = rows(session.sql(query))
    first, second = results.values()
    assert first == second
    actions = sorted((r[0], r[2]) for r in first)
    assert (5, "DELETE") not in actions and (5, "INSERT") not in actions
    assert (8, "DELETE") in actions and (8, "INSERT") in actions
    assert (13, "DELETE") in actions and (310, "INSERT") in actions


def test_minimize_compares_nulls_and_columns_named_like_its_own(session):
    """A value set to NULL again is no change, a row of NULLs is still a row, and columns named
    like the pairing's own (``_bp``, ``_f``, ``_id``, ``_v0``) are the user's."""
    session.sql("CREATE TABLE n (_bp INT, _ap STRING, _f INT, _id INT, _v0 INT)")
    session.sql("INSERT INTO n VALUES (1, 'a', 1, 1, 1), (2, 'b', 2, 2, 2), (3, NULL, NULL, 3, 3)")
    start = current(session, "n")
    session.sql("UPDATE n SET _ap = 'z' WHERE _bp = 1")
    session.sql("UPDATE n SET _f = NULL WHERE _bp IN (2, 3)")
    session.sql("INSERT INTO n VALUES (4, NULL, NULL, NULL, NULL)")
    query = f"SELECT * FROM n CHANGES (INFORMATION => DEFAULT) AT (VERSION => {start})"
    got = sorted((tuple(r)[:7] for r in session.sql(query).collect()), key=lambda r: (r[0], r[5]))
    assert got == [
        (1, "a", 1, 1, 1, "DELETE", True),
        (1, "z", 1, 1, 1, "INSERT", True),
        (2, "b", 2, 2, 2, "DELETE", True),
        (2, "b", None, 2, 2, "INSERT", True),
        (4, None, None, None, None, "INSERT", False),
    ]
