"""A group whose MIN or MAX was deleted is recomputed from the files that may hold it
(``maintain._flagged``: the grouping key's values, the files' statistics), not from every input
row; the table stays equal to its query."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import rows_read

from changelake.dynamic import maintain

QUERY = "SELECT g, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi FROM t GROUP BY g"
PER_FILE = 5000


def _setup(session, query: str = QUERY) -> None:
    """Four files, each the rows of its own range of 50 groups (as loaded by key)."""
    session.sql("CREATE TABLE t (id BIGINT, g BIGINT, v BIGINT)")
    for part in range(4):
        session.sql(
            f"INSERT INTO t SELECT id, CAST(id / 100 AS BIGINT), id % 1000 FROM"
            f" range({part * PER_FILE}, {(part + 1) * PER_FILE})"
        )
    session.sql(
        f"CREATE DYNAMIC TABLE d TARGET_LAG = '1 hour' REFRESH_MODE = INCREMENTAL AS {query}"
    )


def _right(session, query: str = QUERY) -> bool:
    def rows(sql: str) -> Counter:
        return Counter(tuple(r) for r in session.sql(sql).collect())

    return rows("SELECT * FROM d") == rows(query)


def test_a_deleted_extreme_is_recomputed_from_the_file_holding_its_group(session):
    _setup(session)
    # group 3's MIN (v = 300, id 300) and MAX (v = 399, id 399): both in the first file
    session.sql("DELETE FROM t WHERE id IN (300, 399)")
    read = rows_read(session.spark, lambda: session.sql("ALTER DYNAMIC TABLE d REFRESH"))
    assert _right(session)
    assert session.sql("SELECT lo, hi FROM d WHERE g = 3").collect()[0] == (301, 398)
    # the deleted rows' file (twice: its change and the recompute) and the stored groups, not
    # the other three files' 15,000 rows
    assert read < 2 * PER_FILE + 200 + 100, read


def test_groups_past_the_limit_are_recomputed_from_every_row_and_stay_right(session, monkeypatch):
    _setup(session)
    monkeypatch.setattr(maintain, "RECOMPUTE_VALUES", 1)
    session.sql("DELETE FROM t WHERE id IN (300, 5300, 10399)")  # three groups, three files
    read = rows_read(session.spark, lambda: session.sql("ALTER DYNAMIC TABLE d REFRESH"))
    assert _right(session)
    assert read >= 4 * PER_FILE - 3


@pytest.mark.parametrize(
    "query",
    [
        # the key through a renaming projection and a filter
        "SELECT k, MIN(v) AS lo, MAX(v) AS hi FROM (SELECT g AS k, v FROM t WHERE v > 5) GROUP BY k",
        # a key that is an expression: no narrowing, the same rows
        "SELECT g + 1 AS k, MIN(v) AS lo FROM t GROUP BY g + 1",
        # two keys, the second a column
        "SELECT v % 2 AS odd, g, MAX(v) AS hi FROM t GROUP BY v % 2, g",
    ],
)
def test_narrowed_recomputes_of_other_shapes_equal_the_query(session, query):
    _setup(session, query)
    for statement in (
        "DELETE FROM t WHERE id IN (300, 399, 5301, 12000)",
        "UPDATE t SET v = v - 1000 WHERE id IN (17, 9999)",
        "UPDATE t SET g = 7 WHERE id = 14000",
        "INSERT INTO t VALUES (20000, 3, 5000), (20001, NULL, 1)",
        "DELETE FROM t WHERE id = 20001",
    ):
        session.sql(statement)
        session.sql("ALTER DYNAMIC TABLE d REFRESH")
        assert _right(session, query), statement
