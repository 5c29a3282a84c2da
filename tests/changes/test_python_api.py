"""session.changes(...) returns what the SQL CHANGES clause returns (issue 3 item 5)."""

from __future__ import annotations

import datetime as dt

import pytest
from conftest import rows

from changelake.changes.plan import Shape
from changelake.errors import InvalidStatementError, TableNotFoundError, TimeTravelError


@pytest.fixture
def history(session, clock) -> dict[int, dict]:
    """Versions 1-5 of t, a minute apart: version -> (statement_id, committed_at)."""
    session.sql("CREATE TABLE t (id INT, v STRING)")
    out = {}
    for text in (
        "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
        "INSERT INTO t VALUES (3, 'c')",
        "UPDATE t SET v = 'B' WHERE id = 2",
        "DELETE FROM t WHERE id = 1",
        "INSERT INTO t VALUES (1, 'a')",
    ):
        clock.advance(seconds=60)
        result = session.sql(text).first()
        info = session.catalog.version_info(session.catalog.table("t").table_id, result["version"])
        out[result["version"]] = {
            "statement": result["statement_id"],
            "at": dt.datetime.fromtimestamp(info.committed_at),
        }
    clock.advance(seconds=60)
    return out


def sql_point(prefix: str, point) -> str:
    if isinstance(point, int):
        return f"{prefix} (VERSION => {point})"
    if isinstance(point, dt.datetime):
        return f"{prefix} (TIMESTAMP => '{point.isoformat(sep=' ')}')"
    return f"{prefix} (STATEMENT => '{point}')"


def same(session, *, start, end=None, information="default", before=False) -> list[tuple]:
    """Run both forms; assert equal columns and rows (ROW_IDs included); return the rows."""
    text = (
        f"SELECT * FROM t CHANGES (INFORMATION => {information.upper()})"
        f" {sql_point('BEFORE' if before else 'AT', start)}"
        + (f" {sql_point('END', end)}" if end is not None else "")
    )
    by_sql = session.sql(text)
    by_python = session.changes("t", start=start, end=end, information=information, before=before)
    assert by_python.schema == by_sql.schema
    got = rows(by_python)
    assert got == rows(by_sql), text
    return got


@pytest.mark.parametrize("information", ["default", "append_only", "redo"])
def test_points_of_every_kind(session, history, information):
    checked = [
        same(session, start=1, information=information),
        same(session, start=1, end=4, information=information),
        same(session, start=history[2]["at"], end=history[4]["at"], information=information),
        same(session, start=history[3]["statement"], information=information),
        same(session, start=history[3]["statement"], before=True, information=information),
        same(
            session,
            start=history[2]["statement"],
            end=history[5]["statement"],
            information=information,
        ),
    ]
    assert all(checked[:2]), "the intervals hold changes"
    # The forms name the intervals they should: AT version 2 == AT its statement == its time.
    assert checked[3] == same(session, start=3, information=information)
    assert checked[4] == same(session, start=2, information=information)
    assert checked[2] == same(session, start=2, end=4, information=information)


def test_default_result_is_the_minimum_delta(session, history):
    got = same(session, start=1)
    assert [(i, v, a, u) for i, v, a, u, _ in got] == [
        (1, "a", "DELETE", False),
        (1, "a", "INSERT", False),
        (2, "B", "INSERT", True),
        (2, "b", "DELETE", True),
        (3, "c", "INSERT", False),
    ]


def test_change_plan_matches_explain(session, history):
    plan = session.change_plan("t", start=1, end=3)
    assert (plan.start_version, plan.end_version, plan.shape) == (1, 3, Shape.MINIMIZE)
    (line, *_) = [
        r[0]
        for r in session.sql(
            "EXPLAIN SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1) END (VERSION => 3)"
        ).collect()
    ]
    assert line == plan.describe()
    assert session.change_plan("t", start=history[5]["statement"]).shape is Shape.EMPTY


def test_mistakes_are_clear_errors(session, history):
    with pytest.raises(TableNotFoundError):
        session.changes("nope", start=1)
    with pytest.raises(InvalidStatementError, match="DEFAULT, APPEND_ONLY or REDO"):
        session.changes("t", start=1, information="everything")
    with pytest.raises(InvalidStatementError, match="version"):
        session.changes("t", start=True)  # type: ignore[arg-type]
    with pytest.raises(TimeTravelError, match="unknown"):
        session.changes("t", start="no-such-statement")
    with pytest.raises(InvalidStatementError, match="after the end"):
        session.changes("t", start=4, end=2)
