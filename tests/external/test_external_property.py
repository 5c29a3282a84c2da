"""An external table over random source histories, against the source itself (issue 37).

A PostgreSQL table ``hist (id int PRIMARY KEY, val int, note text)`` gets random transactions:
upserts, deletes, a key deleted and inserted again in one transaction or across refreshes, and
key changes. After each group of transactions the external table follows. Checked:
(a) after every refresh, the table holds the source's rows;
(b) at the end, CHANGES (INFORMATION => DEFAULT) from the first version to every later one equal
    the difference of the source's states at those points, by key: a key deleted and inserted
    again is one ROW_ID, so it is no change or one update pair, never a DELETE and an INSERT;
(c) a stream created at the first version, read at the end, holds that same difference;
(d) every version REDO shows is the difference its refresh applied.
ROW_IDs come from the source key: each key has one ROW_ID, each ROW_ID one key.
"""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from support.delta import minimum_delta as delta
from tests.external.conftest import write

State = dict[int, tuple]  # the source's rows by key

keys = st.integers(1, 4)
vals = st.one_of(st.none(), st.integers(0, 3))
statements = st.one_of(
    st.tuples(st.just("upsert"), keys, vals),
    st.tuples(st.just("delete"), keys),
    st.tuples(st.just("reinsert"), keys, vals),  # delete, then insert the key again
    st.tuples(st.just("rekey"), keys, keys),
)
transactions = st.lists(statements, min_size=1, max_size=3)
steps = st.lists(st.lists(transactions, min_size=1, max_size=2), min_size=2, max_size=4)

# A key deleted by one refresh and inserted again, with its old values, by a later one; another
# key deleted and inserted again with new values inside one transaction.
REBORN = [
    [[("delete", 1)]],
    [[("upsert", 1, 1)], [("reinsert", 2, 3)]],
    [[("delete", 3)], [("reinsert", 3, None)]],
]


def _lit(value) -> str:
    return "NULL" if value is None else str(value)


def _sql(table: str, statement: tuple) -> list[str]:
    kind = statement[0]
    if kind == "upsert":
        _, k, v = statement
        return [
            f"INSERT INTO {table} VALUES ({k}, {_lit(v)}, 'n{k}')"
            f" ON CONFLICT (id) DO UPDATE SET val = EXCLUDED.val"
        ]
    if kind == "delete":
        return [f"DELETE FROM {table} WHERE id = {statement[1]}"]
    if kind == "reinsert":
        _, k, v = statement
        return [
            f"DELETE FROM {table} WHERE id = {k}",
            f"INSERT INTO {table} VALUES ({k}, {_lit(v)}, 'r{k}')",
        ]
    _, old, new = statement
    return [
        f"UPDATE {table} SET id = {new} WHERE id = {old}"
        f" AND NOT EXISTS (SELECT 1 FROM {table} WHERE id = {new})"
    ]


def _source(dsn: str, table: str) -> State:
    with psycopg.connect(dsn) as conn:
        return {r[0]: r for r in conn.execute(f"SELECT id, val, note FROM {table}").fetchall()}


class Keys:
    """The one-to-one map of ROW_IDs to source keys, learnt from every change row read."""

    def __init__(self) -> None:
        self.key_of: dict[str, int] = {}

    def rows(self, df) -> Counter:
        """Change rows (id, val, note, action, isupdate, ROW_ID, ...) with the key for the ROW_ID."""
        out: Counter = Counter()
        for r in df.collect():
            rid, key = r["METADATA$ROW_ID"], r["id"]
            assert self.key_of.setdefault(rid, key) == key, (rid, key, self.key_of)
            values = tuple(r)
            out[(*values[:5], key, *values[6:])] += 1
        assert len(set(self.key_of.values())) == len(self.key_of), self.key_of
        return out


def _run(session, dsn: str, table: str, history: list) -> None:
    write(
        dsn,
        f"CREATE TABLE {table} (id int PRIMARY KEY, val int, note text)",
        f"INSERT INTO {table} VALUES (1, 1, 'a'), (2, NULL, 'b'), (3, 0, 'c')",
    )
    session.sql(f"CREATE EXTERNAL TABLE {table} FROM CONNECTION src TABLE 'public.{table}'")
    session.sql(f"CREATE OR REPLACE STREAM whole ON EXTERNAL TABLE {table}")
    try:
        states = [(session.catalog.table(table).current_version, _source(dsn, table))]
        for group in history:
            for transaction in group:
                write(dsn, *[s for statement in transaction for s in _sql(table, statement)])
            session.sql(f"ALTER EXTERNAL TABLE {table} REFRESH")
            state = _source(dsn, table)
            local = session.sql(f"SELECT id, val, note FROM {table}").collect()
            assert {r[0]: tuple(r) for r in local} == state, (history, state)  # (a)
            states.append((session.catalog.table(table).current_version, state))
        keys = Keys()
        first, start = states[0]
        for version, state in states[1:]:  # (b)
            found = keys.rows(
                session.sql(
                    f"SELECT * FROM {table} CHANGES (INFORMATION => DEFAULT)"
                    f" AT (VERSION => {first}) END (VERSION => {version})"
                )
            )
            assert found == delta(start, state), (first, version, history)
        assert keys.rows(session.sql("SELECT * FROM whole")) == delta(start, states[-1][1])  # (c)
        redo = session.sql(
            f"SELECT * FROM {table} CHANGES (INFORMATION => REDO) AT (VERSION => {first})"
        ).drop("METADATA$COMMIT_TIMESTAMP")
        by_version: dict[int, Counter] = {}
        for row, n in keys.rows(redo).items():
            by_version.setdefault(row[-1], Counter())[row[:-1]] += n
        for (v0, s0), (v1, s1) in zip(states, states[1:], strict=False):  # (d)
            if v1 == v0 + 1:
                assert by_version.get(v1, Counter()) == delta(s0, s1), (v1, history)
            else:
                assert v1 == v0 and s0 == s1, (v0, v1, history)  # nothing to apply, no version
    finally:
        session.sql(f"DROP EXTERNAL TABLE {table}")


@pytest.mark.parametrize(
    "examples", [2, pytest.param(25, marks=pytest.mark.nightly)], ids=["default", "nightly"]
)
def test_an_external_table_follows_random_source_histories(session, source, examples):
    dsn, port, name = source
    session.sql(
        f"CREATE CONNECTION src TYPE = POSTGRES OPTIONS (host => '127.0.0.1', port => {port},"
        f" database => '{name}', user => 'postgres')"
    )
    runs: list[int] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: an example costs seconds
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @example(history=REBORN)
    @given(history=steps)
    def run(history):
        _run(session, dsn, f"hist{len(runs)}", history)
        runs.append(len(history))

    run()
    assert len(runs) >= examples
