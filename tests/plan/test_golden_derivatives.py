"""Golden derivatives: a view's SQL in (``golden/*.sql``), the derivative EXPLAIN prints out
(``golden/*.plan``: the view's tree, the formula and the derivative's tree).

Each fixture's header names the tables that change (``-- changed: a, b``) and any views it reads
(``-- view name: SQL``); tables a(k, x), b(k, y), c(k, z) exist in every fixture. A changed rule
shows here as a diff of the plan, reviewed like code. After an intended change, regenerate with
``CHANGELAKE_UPDATE_GOLDEN=1 scripts/test.sh tests/plan/test_golden_derivatives.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).with_name("golden")
CASES = sorted(p.stem for p in GOLDEN.glob("*.sql"))


def _explained(session, clock, source: str) -> list[str]:
    header = [line[3:] for line in source.splitlines() if line.startswith("-- ")]
    query = "\n".join(line for line in source.splitlines() if not line.startswith("-- "))
    for column, table in (("x", "a"), ("y", "b"), ("z", "c")):
        session.sql(f"CREATE TABLE {table} (k INT, {column} INT)")
        session.sql(f"INSERT INTO {table} VALUES (1, 1), (2, 2)")
    for line in header:
        if line.startswith("view "):
            name, sql = line.removeprefix("view ").split(":", 1)
            session.sql(f"CREATE VIEW {name.strip()} AS {sql}")
    session.sql(f"CREATE VIEW v AS {query}")
    clock.advance(seconds=10)
    changed = next(line for line in header if line.startswith("changed:"))
    for table in changed.removeprefix("changed:").split(","):
        column = {"a": "x", "b": "y", "c": "z"}[table.strip()]
        session.sql(f"UPDATE {table.strip()} SET {column} = {column} + 1 WHERE k = 1")
    lines = [
        r[0]
        for r in session.sql(
            "EXPLAIN SELECT * FROM v CHANGES (INFORMATION => DEFAULT) AT (OFFSET => -5)"
        ).collect()
    ]
    start = lines.index("view:")
    end = next(i for i in range(start + 1, len(lines)) if not _ours(lines[i]))
    return lines[start:end]


def _ours(line: str) -> bool:
    return line.startswith(("  ", "derivative:"))


@pytest.mark.parametrize("case", CASES)
def test_the_derivative_of_each_golden_view(session, clock, case):
    got = _explained(session, clock, (GOLDEN / f"{case}.sql").read_text())
    expected = GOLDEN / f"{case}.plan"
    if os.environ.get("CHANGELAKE_UPDATE_GOLDEN"):
        expected.write_text("\n".join(got) + "\n")
    assert got == expected.read_text().splitlines(), f"{case}: the derivative changed"


def test_every_operator_family_has_a_golden_case():
    text = "\n".join((GOLDEN / f"{c}.plan").read_text() for c in CASES)
    for node in (
        "Filter",
        "Project",
        "Join inner",
        "Join cross",
        "Join left",
        "Join full",
        "Join left_semi",
        "Join left_anti",
        "Union all",
        "Aggregate",
        "Window",
        "Regroup",
    ):
        assert node in text, node
