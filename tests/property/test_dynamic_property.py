"""Dynamic tables over random histories and random DAGs, against their queries.

Three base tables a, b, c (k INT, v DECIMAL(6,2), w INT) get random INSERT / UPDATE / DELETE /
MERGE statements with NULLs and duplicates. A random DAG of 2-3 levels of dynamic tables reads
them: every definition is a template that reads (k, v, w) and returns (k, v, w) (filter and
projection, inner / left / full joins, EXISTS and NOT EXISTS, GROUP BY with COUNT, SUM, AVG,
MIN and MAX, a global aggregate, DISTINCT, a window function), and a view may sit between two
levels. Each definition exists three times: an INCREMENTAL dynamic table, a REFRESH_MODE = FULL
one (each reading its own flavour of the upstreams) and a plain view reading the base tables
through the upstreams' views (the oracle). After every refresh of the DAG's sinks:
(a) each dynamic table equals its view read AT its data timestamp, as a multiset;
(b) its ROW_IDs are the view's (both read as every row's INSERT from an empty start);
(c) the INCREMENTAL and FULL tables hold identical rows and ROW_IDs, and their CHANGES over the
    refresh are identical;
(d) a stream on one INCREMENTAL table sees each refresh's delta once;
(e) at the end, each dynamic table's CHANGES over the whole history (DEFAULT, REDO, and a stream
    never consumed) equal the difference of its rows, with ROW_IDs, between the states read after
    each refresh: a group or a DISTINCT row that disappears and comes back keeps its ROW_ID, so
    it is no change, or one update pair, over an interval that holds both (issue 37).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from functools import reduce

import pytest
from conftest import READ_PATHS, read_path
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from support.delta import minimum_delta as delta

import changelake
from changelake.clock import ManualClock
from changelake.dml import keyed

BASE = ("a", "b", "c")
SEED = (
    "INSERT INTO a VALUES (0, 1.50, 1), (1, 3.10, 2), (1, 3.10, 2), (2, NULL, 0), (NULL, 4.00, 3)",
    "INSERT INTO b VALUES (1, 2.25, 3), (2, -1.00, NULL), (NULL, 0.50, 1), (3, 1.50, 2)",
    "INSERT INTO c VALUES (1, 1.00, 1), (2, 0.00, 0), (2, 5.05, 3), (NULL, NULL, 2)",
)

# Every template reads (k, v, w) from {p} (and {q}) and returns (k, v, w), so any composes.
UNARY = {
    "filter": "SELECT k, v * 2 AS v, w + 1 AS w FROM {p} WHERE v > 0 OR w IS NULL",
    "sum": "SELECT k, SUM(v) AS v, COUNT(*) AS w FROM {p} GROUP BY k",
    "avg": "SELECT w AS k, AVG(v) AS v, COUNT(v) AS w FROM {p} GROUP BY w",
    "min_max": "SELECT k, MIN(v) AS v, MAX(w) AS w FROM {p} GROUP BY k",
    "max_min": "SELECT k, MAX(v) AS v, MIN(w) AS w FROM {p} GROUP BY k",
    "global": "SELECT COUNT(*) AS k, SUM(v) AS v, MAX(w) AS w FROM {p}",
    "distinct": "SELECT DISTINCT k, v, w % 2 AS w FROM {p}",
    "window": "SELECT k, SUM(v) OVER (PARTITION BY k) AS v,"
    " CAST(RANK() OVER (PARTITION BY k ORDER BY v, w) AS INT) AS w FROM {p}",
}
BINARY = {
    "join": "SELECT p.k, p.v, q.w FROM {p} p JOIN {q} q ON p.k = q.k",
    "left": "SELECT p.k, q.v, p.w FROM {p} p LEFT JOIN {q} q ON p.k = q.k",
    "full": "SELECT COALESCE(p.k, q.k) AS k, p.v, q.w FROM {p} p FULL OUTER JOIN {q} q"
    " ON p.k = q.k",
    "exists": "SELECT p.k, p.v, p.w FROM {p} p"
    " WHERE EXISTS (SELECT 1 FROM {q} q WHERE q.k = p.k AND q.v > 0)",
    "not_exists": "SELECT p.k, p.v, p.w FROM {p} p"
    " WHERE NOT EXISTS (SELECT 1 FROM {q} q WHERE q.k = p.k)",
}
TEMPLATES = {**UNARY, **BINARY}
BETWEEN = "SELECT k, v - 1 AS v, w FROM {p} WHERE k IS NOT NULL OR w > 1"  # a view between levels


@dataclass(frozen=True)
class Node:
    """A dynamic table (or a view between levels) reading ``sources``: base tables or nodes."""

    name: str
    template: str
    sources: tuple[str, ...]
    dynamic: bool = True

    def sql(self, flavour: str) -> str:
        """The definition over the ``flavour`` copies of the nodes it reads."""
        named = [s if s in BASE else f"{s}_{flavour}" for s in self.sources]
        return self.template.format(**dict(zip("pq", named, strict=False)))


@dataclass(frozen=True)
class Dag:
    nodes: tuple[Node, ...]
    streamed: str

    @property
    def dynamic(self) -> list[Node]:
        return [n for n in self.nodes if n.dynamic]

    @property
    def sinks(self) -> list[str]:
        read = {s for n in self.nodes for s in n.sources}
        return [n.name for n in self.dynamic if n.name not in read]

    def describe(self) -> str:
        return "; ".join(f"{n.name} = {n.sql('x')}" for n in self.nodes)


@st.composite
def dags(draw) -> Dag:
    """One or two dynamic tables over the base tables, then one per level over the last level
    (sometimes through a view) and anything earlier."""
    nodes: list[Node] = []

    def add(first: list[str], others: list[str]) -> str:
        name = f"d{len(nodes) + 1}"
        template = draw(st.sampled_from(sorted(TEMPLATES)))
        sources = [draw(st.sampled_from(first))]
        if template in BINARY:
            sources.append(draw(st.sampled_from(others)))
        nodes.append(Node(name, TEMPLATES[template], tuple(sources)))
        return name

    level = [add(list(BASE), list(BASE)) for _ in range(draw(st.integers(1, 2)))]
    earlier = [*BASE, *level]
    for _ in range(draw(st.integers(1, 2))):
        first = level
        if draw(st.booleans()):
            view = f"m{len(nodes) + 1}"
            nodes.append(Node(view, BETWEEN, (draw(st.sampled_from(level)),), dynamic=False))
            first = [view]
        level = [add(first, earlier)]
        earlier.extend(level)
    streamed = draw(st.sampled_from([n.name for n in nodes if n.dynamic]))
    return Dag(tuple(nodes), streamed)


# A DISTINCT row and a group that disappear and come back (issue 37): from the seed, rows with
# k = 1 go, other ones come, then the seed's come back; d1's row (1, 3.10, 0) and d2's group
# k = 1 leave and return with the same ROW_IDs.
REBORN = Dag(
    (
        Node("d1", TEMPLATES["distinct"], ("a",)),
        Node("d2", TEMPLATES["sum"], ("d1",)),
    ),
    streamed="d1",
)
REBORN_STEPS = [
    [("delete", "a", 1)],
    [("insert", "a", [(1, 150, 3)])],
    [("delete", "a", 1), ("insert", "a", [(1, 310, 2)])],
]

keys = st.one_of(st.none(), st.integers(0, 3))
cents = st.one_of(st.none(), st.sampled_from([-225, 0, 150, 310, 1005]))
counts = st.one_of(st.none(), st.integers(0, 4))
table_rows = st.tuples(keys, cents, counts)
statements = st.one_of(
    st.tuples(
        st.just("insert"), st.sampled_from(BASE), st.lists(table_rows, min_size=1, max_size=3)
    ),
    st.tuples(st.just("update"), st.sampled_from(BASE), keys, st.sampled_from([-100, 25, 150])),
    st.tuples(st.just("to_null"), st.sampled_from(BASE), keys),
    st.tuples(st.just("rekey"), st.sampled_from(BASE), counts, keys),
    st.tuples(st.just("delete"), st.sampled_from(BASE), keys),
    st.tuples(
        st.just("merge"),
        st.sampled_from(BASE),
        st.lists(table_rows, min_size=1, max_size=3, unique_by=lambda r: r[0]),
    ),
)


def _lit(value) -> str:
    return "NULL" if value is None else str(value)


def _dec(value) -> str:
    return "NULL" if value is None else str(Decimal(value).scaleb(-2))


def _is(column: str, value) -> str:
    return f"{column} IS NULL" if value is None else f"{column} = {value}"


def _sql(statement) -> str:
    kind, t = statement[0], statement[1]
    if kind == "insert":
        values = ", ".join(f"({_lit(k)}, {_dec(v)}, {_lit(w)})" for k, v, w in statement[2])
        return f"INSERT INTO {t} VALUES {values}"
    if kind == "update":
        return f"UPDATE {t} SET v = v + {_dec(statement[3])} WHERE {_is('k', statement[2])}"
    if kind == "to_null":
        return f"UPDATE {t} SET v = NULL, w = w + 1 WHERE {_is('k', statement[2])}"
    if kind == "rekey":
        return f"UPDATE {t} SET k = {_lit(statement[3])} WHERE {_is('w', statement[2])}"
    if kind == "delete":
        return f"DELETE FROM {t} WHERE {_is('k', statement[2])}"
    source = " UNION ALL ".join(
        f"SELECT CAST({_lit(k)} AS INT) AS k, CAST({_dec(v)} AS DECIMAL(6,2)) AS v,"
        f" CAST({_lit(w)} AS INT) AS w"
        for k, v, w in statement[2]
    )
    return (
        f"MERGE INTO {t} USING ({source}) s ON {t}.k = s.k"
        " WHEN MATCHED AND s.w IS NULL THEN DELETE"
        " WHEN MATCHED THEN UPDATE SET v = s.v, w = s.w"
        " WHEN NOT MATCHED THEN INSERT (k, v, w) VALUES (s.k, s.v, s.w)"
    )


def _ts(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).isoformat(sep=" ")


def _counters(frames: dict[str, DataFrame]) -> dict[str, Counter]:
    """Each frame's rows as a multiset, all read in one Spark job: frames of one definition,
    which have the same columns and types."""
    tagged = [df.select(F.lit(name).alias("_frame"), "*") for name, df in frames.items()]
    out: dict[str, Counter] = {name: Counter() for name in frames}
    for r in reduce(DataFrame.unionByName, tagged).collect():
        out[r[0]][tuple(r)[1:]] += 1
    return out


State = dict[str, tuple]  # a table's rows by ROW_ID


def _state(ids: Counter) -> State:
    """Rows read with their ROW_IDs (last) as ROW_ID -> values; ROW_IDs are unique."""
    assert all(n == 1 for n in ids.values()), ids
    return {row[-1]: row[:-1] for row in ids}


class Scenario:
    """A fresh warehouse holding one DAG in its three flavours."""

    def __init__(self, session: changelake.Session, clock: ManualClock, dag: Dag):
        self.session, self.clock, self.dag = session, clock, dag
        # per dynamic table: (version, rows by ROW_ID) after its creation and every refresh
        self.history: dict[str, list[tuple[int, State]]] = {}

    def step(self, statement: str) -> None:
        self.clock.advance(seconds=1)
        self.session.sql(statement)

    def create_tables_and_oracles(self) -> float:
        """The base tables, empty, and the oracle views; returns when they were all there."""
        for t in BASE:
            self.session.sql(f"CREATE TABLE {t} (k INT, v DECIMAL(6,2), w INT)")
        self.clock.advance(seconds=1)
        for node in self.dag.nodes:
            self.session.sql(f"CREATE VIEW {node.name}_o AS {node.sql('o')}")
        return self.session.catalog.snapshot().committed_at

    def create_dynamic_tables(self) -> None:
        for flavour, mode in (("i", "INCREMENTAL"), ("f", "FULL")):
            for node in self.dag.nodes:
                self.clock.advance(seconds=1)
                if node.dynamic:
                    self.session.sql(
                        f"CREATE DYNAMIC TABLE {node.name}_{flavour} TARGET_LAG = '1 hour'"
                        f" REFRESH_MODE = {mode} AS {node.sql(flavour)}"
                    )
                else:
                    self.session.sql(f"CREATE VIEW {node.name}_{flavour} AS {node.sql(flavour)}")
        for node in self.dag.dynamic:
            info = self.session.catalog.find_dynamic_table(f"{node.name}_i")
            assert info.definition.effective_mode == "INCREMENTAL", node
        self.session.sql(f"CREATE STREAM s ON DYNAMIC TABLE {self.dag.streamed}_i")
        self.session.sql(f"CREATE STREAM whole ON DYNAMIC TABLE {self.dag.streamed}_i")

    def versions(self) -> dict[str, int]:
        return {
            f"{n.name}_{f}": self.session.catalog.table(f"{n.name}_{f}").current_version
            for n in self.dag.dynamic
            for f in "if"
        }

    def refresh(self) -> None:
        """Refresh the INCREMENTAL sinks, then the FULL ones: no base table changes between."""
        for flavour in "if":
            for sink in self.dag.sinks:
                self.clock.advance(seconds=1)
                self.session.sql(f"ALTER DYNAMIC TABLE {sink}_{flavour} REFRESH")

    def changes_since(self, table: str, version: int, end: int | None = None) -> DataFrame:
        until = "" if end is None else f" END (VERSION => {end})"
        return self.session.sql(
            f"SELECT * FROM {table} CHANGES (INFORMATION => DEFAULT) AT (VERSION => {version})"
            + until
        )

    def with_ids(self, sql: str) -> Counter:
        """Values and ROW_IDs of a CHANGES read from an empty start (INSERTs only)."""
        rows = self.session.sql(sql).collect()
        assert all(r["METADATA$ACTION"] == "INSERT" for r in rows), sql
        hidden = {"METADATA$ACTION", "METADATA$ISUPDATE"}
        return Counter(
            tuple(v for name, v in zip(r.__fields__, r, strict=True) if name not in hidden)
            for r in rows
        )

    def check(self, start: float, before: dict[str, int] | None) -> None:
        s = self.session
        for node in self.dag.dynamic:
            inc, full = f"{node.name}_i", f"{node.name}_f"
            at = s.catalog.find_dynamic_table(inc).data_timestamp
            context = (node.name, self.dag.describe())
            # (a) its rows are the query's at its data timestamp
            read = _counters(
                {
                    "expected": s.sql(f"SELECT * FROM {node.name}_o AT (TIMESTAMP => '{_ts(at)}')"),
                    inc: s.sql(f"SELECT * FROM {inc}"),
                }
            )
            assert read[inc] == read["expected"], context
            # (b) with the query's ROW_IDs (above a GROUP BY or DISTINCT over another dynamic
            # table they are not yet: test_a_group_over_a_dynamic_table_keeps_the_row_ids...)
            ids = self.initial_rows(inc)
            assert ids == self.with_ids(
                f"SELECT * FROM {node.name}_o CHANGES (INFORMATION => DEFAULT)"
                f" AT (TIMESTAMP => '{_ts(start)}') END (TIMESTAMP => '{_ts(at)}')"
            ), context
            # (c) the FULL table holds the same rows with the same ROW_IDs (no base table
            # changed between the two refreshes), and had the same CHANGES over the refresh
            assert self.initial_rows(full) == ids, context
            for table in (inc, full):
                version = s.catalog.table(table).current_version
                self.history.setdefault(table, []).append((version, _state(ids)))
            if before is None:
                continue
            # (d) the stream sees the refresh's delta, and only once
            streamed = node.name == self.dag.streamed
            changes = _counters(
                {t: self.changes_since(t, before[t]) for t in (inc, full)}
                | ({"s": s.sql("SELECT * FROM s")} if streamed else {})
            )
            assert changes[inc] == changes[full], context
            if streamed:
                assert changes["s"] == changes[inc], context
                s.sql("CREATE OR REPLACE TABLE drained AS SELECT k FROM s")

    def check_history(self) -> None:
        """(e): CHANGES over the history against the differences of the states read: DEFAULT
        from the first state to each later one (and a stream never consumed, to the last), and
        REDO's versions, each the delta of the refresh that wrote it."""
        for table, states in self.history.items():
            context = (table, self.dag.describe())
            first, start = states[0]
            frames = {f"to {v}": self.changes_since(table, first, end=v) for v, _ in states[1:]}
            if table == f"{self.dag.streamed}_i":
                frames["whole"] = self.session.sql("SELECT * FROM whole")
            read = _counters(frames)
            for v, state in states[1:]:
                assert read[f"to {v}"] == delta(start, state), (first, v, *context)
            if "whole" in frames:
                assert read["whole"] == delta(start, states[-1][1]), context
            redo = self.session.sql(
                f"SELECT * FROM {table} CHANGES (INFORMATION => REDO) AT (VERSION => {first})"
            ).drop("METADATA$COMMIT_TIMESTAMP")
            by_version: dict[int, Counter] = {}
            for r in redo.collect():
                by_version.setdefault(r["METADATA$COMMIT_VERSION"], Counter())[tuple(r)[:-1]] += 1
            for (v0, s0), (v1, s1) in zip(states, states[1:], strict=False):
                if v1 == v0 + 1:  # a refresh that wrote one version
                    assert by_version.get(v1, Counter()) == delta(s0, s1), (v1, *context)

    def initial_rows(self, table: str) -> Counter:
        """Values and ROW_IDs of the table's rows: version 0 holds the creation's rows, so
        they are read by a SHOW_INITIAL_ROWS stream."""
        self.session.sql(
            f"CREATE OR REPLACE STREAM ids ON DYNAMIC TABLE {table} SHOW_INITIAL_ROWS = TRUE"
        )
        return self.with_ids("SELECT * FROM ids")


def _run(spark, path, dag: Dag, prefix: list, steps: list[list]) -> None:
    clock = ManualClock()
    session = changelake.connect(str(path), spark=spark, clock=clock)
    try:
        wh = Scenario(session, clock, dag)
        start = wh.create_tables_and_oracles()
        for statement in [*SEED, *map(_sql, prefix)]:
            wh.step(statement)
        wh.create_dynamic_tables()
        wh.check(start, None)
        for group in steps:
            for statement in group:
                wh.step(_sql(statement))
            before = wh.versions()
            wh.refresh()
            wh.check(start, before)
        assert session.sql("SELECT * FROM s").count() == 0
        wh.check_history()
    finally:
        session.close()


# Each example creates a warehouse with up to eight dynamic tables and refreshes them a few
# times, checking each with several Spark queries: the default run draws a few, the nightly run
# (README) many more.
@pytest.mark.parametrize(
    "examples", [2, pytest.param(15, marks=pytest.mark.nightly)], ids=["default", "nightly"]
)
@pytest.mark.parametrize("read", READ_PATHS)
def test_dynamic_tables_follow_their_queries(spark, tmp_path_factory, examples, read):
    if read != READ_PATHS[0]:
        examples = 1  # the fallback's share of the suite's time: the first (derandomized) example
    with read_path(spark, read):
        _follow(spark, tmp_path_factory, examples)


# joins, filters and an outer join, whose deltas are a view's changes (no stored state)
LOOKED_UP = Dag(
    (
        Node("j1", TEMPLATES["join"], ("a", "b")),
        Node("f2", TEMPLATES["filter"], ("j1",)),
        Node("l3", TEMPLATES["left"], ("f2", "c")),
    ),
    streamed="j1",
)
LOOKED_UP_STEPS = [
    [("update", "a", 1, 25), ("insert", "b", [(1, 150, 3)])],
    [("rekey", "b", 3, 2), ("delete", "c", 2)],
    [("merge", "a", [(1, 310, 2), (3, 0, None)]), ("to_null", "b", 1)],
]


def test_dynamic_tables_follow_their_queries_with_stored_rows_looked_up(
    spark, tmp_path, monkeypatch
):
    """Every table taken for one too large for one task: a view's delta finds its stored rows
    by the lookup (its keys broadcast to a scan of the stored keys, the rows found broadcast
    back) that large tables use, and the tables still follow their queries."""
    looked_up = []
    addressed = keyed._addressed

    def counted(*args, lookup: bool):
        looked_up.append(lookup)
        return addressed(*args, lookup=lookup)

    monkeypatch.setattr(keyed, "small_input", lambda target: False)
    monkeypatch.setattr(keyed, "_addressed", counted)
    _run(spark, tmp_path, LOOKED_UP, [], LOOKED_UP_STEPS)
    assert looked_up and all(looked_up)


def _follow(spark, tmp_path_factory, examples: int) -> None:
    runs = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: an example costs Spark minutes
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @example(dag=REBORN, prefix=[], steps=REBORN_STEPS)
    @given(
        dag=dags(),
        prefix=st.lists(statements, max_size=2),
        steps=st.lists(st.lists(statements, min_size=1, max_size=2), min_size=1, max_size=3),
    )
    def run(dag, prefix, steps):
        _run(spark, tmp_path_factory.mktemp("wh"), dag, prefix, steps)
        runs.append(dag)

    run()
    assert len(runs) >= examples


def _initial_ids(session, table: str) -> Counter:
    session.sql(f"CREATE OR REPLACE STREAM ids ON DYNAMIC TABLE {table} SHOW_INITIAL_ROWS = TRUE")
    return Counter((r.w, r["METADATA$ROW_ID"]) for r in session.sql("SELECT * FROM ids").collect())


def test_a_group_over_a_dynamic_table_keeps_the_row_ids_of_its_query(session, clock):
    session.sql("CREATE TABLE a (k INT, w INT)")
    clock.advance(seconds=1)
    session.sql("CREATE VIEW v1 AS SELECT k, w FROM a")
    session.sql("CREATE VIEW v2 AS SELECT w, COUNT(*) AS n FROM v1 GROUP BY w")
    start = session.catalog.snapshot().committed_at
    clock.advance(seconds=1)
    session.sql("INSERT INTO a VALUES (1, 1), (2, 1), (3, 2)")
    clock.advance(seconds=1)
    session.sql("CREATE DYNAMIC TABLE d1 TARGET_LAG = '1 hour' AS SELECT k, w FROM a")
    clock.advance(seconds=1)
    session.sql(
        "CREATE DYNAMIC TABLE d2 TARGET_LAG = '1 hour' AS"
        " SELECT w, COUNT(*) AS n FROM d1 GROUP BY w"
    )
    at = session.catalog.find_dynamic_table("d2").data_timestamp
    view = Counter(
        (r.w, r["METADATA$ROW_ID"])
        for r in session.sql(
            f"SELECT * FROM v2 CHANGES (INFORMATION => DEFAULT)"
            f" AT (TIMESTAMP => '{_ts(start)}') END (TIMESTAMP => '{_ts(at)}')"
        ).collect()
    )
    assert _initial_ids(session, "d1") == Counter(
        (r.w, r["METADATA$ROW_ID"])
        for r in session.sql(
            f"SELECT * FROM v1 CHANGES (INFORMATION => DEFAULT)"
            f" AT (TIMESTAMP => '{_ts(start)}') END (TIMESTAMP => '{_ts(at)}')"
        ).collect()
    )
    assert _initial_ids(session, "d2") == view
