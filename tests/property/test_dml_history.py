"""Random DML histories against a plain-Python model of the table.

After every statement the model is recorded for the version it made; at the end every version,
read back by time travel, must equal the model at that version, and the hidden row identities
must be unique per snapshot and stable: an updated row keeps its identity, OPTIMIZE changes
neither identity nor last-changed version, a new row never reuses an identity.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

import pytest
from conftest import READ_PATHS, read_path, row_level_plan, state_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

import changelake
from changelake.storage.snapshot import RID, VER, state_relation

KEYS = range(8)  # ids drawn from here keep tables at <= 8 rows
MAX_STATEMENTS = 8

Row = tuple[str | None, int | None]  # (name, n) of one id
Model = dict[int, Row]


@dataclass(frozen=True)
class Step:
    """One statement and what it does to the model: new model, ids whose rows it rewrote."""

    sql: str
    model: Model
    touched: frozenset[int]


def _sql(value: object) -> str:
    if value is None:
        return "NULL"
    return f"'{value}'" if isinstance(value, str) else str(value)


names = st.sampled_from(["a", "b", "c", None])
numbers = st.one_of(st.none(), st.integers(-2, 3))


@st.composite
def predicates(draw: st.DrawFn, alias: str = "") -> tuple[str, Callable[[int, Row], bool]]:
    """A WHERE condition as SQL and as a Python function of (id, (name, n)), SQL NULL semantics."""
    p = f"{alias}." if alias else ""
    kind = draw(st.sampled_from(["in", "ge", "n_gt", "n_null", "name_eq", "all"]))
    if kind == "in":
        ids = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
        return f"{p}id IN ({', '.join(map(str, ids))})", lambda i, r: i in ids
    if kind == "ge":
        k = draw(st.sampled_from(KEYS))
        return f"{p}id >= {k}", lambda i, r: i >= k
    if kind == "n_gt":
        k = draw(st.integers(-1, 2))
        return f"{p}n > {k}", lambda i, r: r[1] is not None and r[1] > k
    if kind == "n_null":
        return f"{p}n IS NULL", lambda i, r: r[1] is None
    if kind == "name_eq":
        name = draw(st.sampled_from(["a", "b"]))
        return f"{p}name = '{name}'", lambda i, r: r[0] == name
    return "1 = 1", lambda i, r: True


def _values(rows: dict[int, Row]) -> str:
    return ", ".join(f"({i}, {_sql(name)}, {_sql(n)})" for i, (name, n) in sorted(rows.items()))


def _typed(rows: dict[int, Row], alias: str) -> str:
    return (
        "SELECT CAST(id AS INT) AS id, CAST(name AS STRING) AS name, CAST(n AS INT) AS n"
        f" FROM VALUES {_values(rows)} AS {alias}(id, name, n)"
    )


@st.composite
def inserts(draw: st.DrawFn, model: Model) -> Step:
    free = [k for k in KEYS if k not in model]  # includes keys deleted earlier
    ids = draw(st.lists(st.sampled_from(free), min_size=1, max_size=3, unique=True))
    new = {i: (draw(names), draw(numbers)) for i in ids}
    if draw(st.booleans()):
        sql = f"INSERT INTO t VALUES {_values(new)}"  # literal rows: written by the driver
    else:
        sql = f"INSERT INTO t {_typed(new, 'v')}"  # written by a Spark job
    return Step(sql, model | new, frozenset())


@st.composite
def updates(draw: st.DrawFn, model: Model) -> Step:
    where, matches = draw(predicates())
    kind = draw(st.sampled_from(["same", "plus", "name", "both"]))
    set_sql, change = {
        "same": ("n = n", lambda r: r),
        "plus": ("n = n + 1", lambda r: (r[0], None if r[1] is None else r[1] + 1)),
        "name": ("name = 'z'", lambda r: ("z", r[1])),
        "both": ("name = NULL, n = 3", lambda r: (None, 3)),
    }[kind]
    hit = {i for i, r in model.items() if matches(i, r)}
    new = {i: change(r) if i in hit else r for i, r in model.items()}
    return Step(f"UPDATE t SET {set_sql} WHERE {where}", new, frozenset(hit))


@st.composite
def deletes(draw: st.DrawFn, model: Model) -> Step:
    where, matches = draw(predicates())
    return Step(
        f"DELETE FROM t WHERE {where}",
        {i: r for i, r in model.items() if not matches(i, r)},
        frozenset(),
    )


@st.composite
def merges(draw: st.DrawFn, model: Model) -> Step:
    ids = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True))
    source = {i: (draw(names), draw(numbers)) for i in ids}
    with_delete = draw(st.booleans())
    whens = "WHEN MATCHED AND s.name = 'c' THEN DELETE " if with_delete else ""
    whens += "WHEN MATCHED THEN UPDATE SET n = s.n, name = s.name "
    whens += "WHEN NOT MATCHED THEN INSERT (id, name, n) VALUES (s.id, s.name, s.n)"
    new, touched = dict(model), set()
    for i, row in source.items():
        if i not in model:
            new[i] = row
        elif with_delete and row[0] == "c":
            del new[i]
        else:
            new[i] = row
            touched.add(i)
    sql = f"MERGE INTO t USING ({_typed(source, 'src')}) s ON t.id = s.id {whens}"
    return Step(sql, new, frozenset(touched))


def statements(model: Model) -> st.SearchStrategy[Step]:
    choices = [inserts(model)] if len(model) < len(KEYS) else []
    if model:
        choices += [updates(model), updates(model), deletes(model)]
    choices += [
        merges(model),
        merges(model),
        st.just(Step("OPTIMIZE t", model, frozenset())),
        st.just(Step("TRUNCATE TABLE t", {}, frozenset())),
    ]
    weights = st.integers(0, 19)
    return weights.flatmap(
        lambda w: choices[-1] if w == 0 else st.one_of(choices[:-1])  # TRUNCATE: 1 in 20
    )


@pytest.mark.parametrize(
    ("read", "plan"),
    [(READ_PATHS[0], "one-pass"), (READ_PATHS[0], "two-phase"), (READ_PATHS[1], "auto")],
)
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_histories_match_the_model_at_every_version(spark, read, plan, data):
    with (
        read_path(spark, read),
        row_level_plan(spark, plan),
        tempfile.TemporaryDirectory() as tmp,
    ):
        session = changelake.connect(tmp, spark=spark)
        try:
            _run_history(session, data)
        finally:
            session.close()


def _run_history(session: changelake.Session, data: st.DataObject) -> None:
    session.sql("CREATE TABLE t (id INT, name STRING, n INT)")
    models: dict[int, Model] = {0: {}}
    touched: dict[int, frozenset[int]] = {0: frozenset()}
    operations: dict[int, str] = {0: "CREATE"}
    model: Model = {}
    for _ in range(data.draw(st.integers(1, MAX_STATEMENTS), label="statements")):
        step = data.draw(statements(model), label="statement")
        before = session.catalog.table("t").current_version
        session.sql(step.sql)
        version = session.catalog.table("t").current_version
        if version == before:  # e.g. OPTIMIZE with nothing to compact
            assert step.model == model, f"{step.sql} changed rows without a version"
        else:
            assert version == before + 1, step.sql
            models[version], touched[version] = step.model, step.touched
            operations[version] = step.sql.split()[0]
        model = step.model

    _check_snapshots(session, models)
    _check_identities(session, models, touched, operations)


def _check_snapshots(session: changelake.Session, models: dict[int, Model]) -> None:
    query = " UNION ALL ".join(
        f"SELECT {v} AS v, id, name, n FROM t AT (VERSION => {v})" for v in sorted(models)
    )
    found: dict[int, list[tuple]] = {v: [] for v in models}
    for r in session.sql(query).collect():
        found[r["v"]].append((r["id"], r["name"], r["n"]))
    for v, model in sorted(models.items()):
        expected = sorted((i, name, n) for i, (name, n) in model.items())
        assert sorted(found[v]) == expected, f"version {v}"


def _check_identities(
    session: changelake.Session,
    models: dict[int, Model],
    touched: dict[int, frozenset[int]],
    operations: dict[int, str],
) -> None:
    info = session.catalog.table("t")
    frames = [
        state_relation(session.spark, session.warehouse, state_of(session, info, v), identity=True)
        .frame(session.spark)
        .select(F.lit(v).alias("v"), "id", RID, VER)
        for v in sorted(models)
    ]
    found: dict[int, dict[int, tuple[int, int]]] = {v: {} for v in models}
    rids_per_version: dict[int, list[int]] = {v: [] for v in models}
    for r in reduce(lambda a, b: a.unionByName(b), frames).collect():
        found[r["v"]][r["id"]] = (r[RID], r[VER])
        rids_per_version[r["v"]].append(r[RID])
    seen: set[int] = set()
    versions = sorted(models)
    for previous, v in zip(versions, versions[1:], strict=False):
        rids = rids_per_version[v]
        assert None not in rids and len(set(rids)) == len(rids), f"version {v}: {rids}"
        assert set(found[v]) == set(models[v]), f"version {v}"
        seen |= set(rids_per_version[previous])
        for i, (rid, ver) in found[v].items():
            where = f"version {v} ({operations[v]}), id {i}"
            if i in found[previous]:
                old_rid, old_ver = found[previous][i]
                assert rid == old_rid, f"{where}: identity changed {old_rid} -> {rid}"
                expected_ver = v if i in touched[v] else old_ver
                assert ver == expected_ver, f"{where}: last-changed version {ver}"
            else:
                assert rid not in seen, f"{where}: reused identity {rid}"
                assert ver == v, f"{where}: inserted row has last-changed version {ver}"
