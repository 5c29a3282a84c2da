"""The warehouse-wide commit order: numbers and times taken inside the catalog transaction, the
snapshots built on them, safe start-up of a catalog under concurrent first connections, and the
migration of catalogs written before the order existed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
import sqlalchemy as sa
from catalog.test_catalog import T0, commit, create, data_file

import changelake
from changelake.catalog import Catalog
from changelake.catalog import commit as commit_path
from changelake.catalog.tables import SCHEMA_VERSION
from changelake.clock import ManualClock, SystemClock
from changelake.errors import ConfigurationError


@pytest.fixture
def catalog(catalog_url):
    c = Catalog(catalog_url)
    yield c
    c.close()


def _add(catalog: Catalog, info, sid: str, *, at: float, read_version: int = 0):
    request = commit(info, read_version, sid, added=(data_file(f"data/{sid}.parquet"),))
    return catalog.commit([request], clock=ManualClock(at))


def test_commits_are_numbered_and_stamped_in_one_order_across_tables(catalog):
    a, b = create(catalog, "a"), create(catalog, "b", now=T0 - 50)  # a clock that went back
    made = [_add(catalog, a, "a1", at=T0 + 5), _add(catalog, b, "b1", at=T0 + 5)]
    made.append(_add(catalog, a, "a2", at=T0 + 1))  # the clock went back again
    numbers = [r.commit.commit_number for r in made]
    times = [r.commit.committed_at for r in made]
    assert numbers == [3, 4, 5]  # 1 and 2 created the tables
    assert times == sorted(times) and len(set(times)) == 3  # strictly increasing regardless
    assert catalog.snapshot() == made[-1].commit
    versions = catalog.versions(a.table_id) + catalog.versions(b.table_id)
    assert sorted((v.commit_number, v.committed_at) for v in versions) == [
        (1, T0),
        (2, T0 + 1e-6),
        (3, T0 + 5),
        (4, round(T0 + 5 + 1e-6, 6)),
        (5, round(T0 + 5 + 2e-6, 6)),
    ]
    assert catalog.table("a").current_commit == 5 and catalog.table("b").current_commit == 4


def test_a_snapshot_reads_each_table_at_its_commit_number(catalog):
    a, b = create(catalog, "a"), create(catalog, "b")
    before = catalog.snapshot()
    _add(catalog, a, "a1", at=T0 + 1)
    middle = catalog.snapshot()
    _add(catalog, b, "b1", at=T0 + 2)
    _add(catalog, a, "a2", at=T0 + 3, read_version=1)
    assert [catalog.version_at(a.table_id, s.commit_number) for s in (before, middle)] == [0, 1]
    assert catalog.version_at(b.table_id, middle.commit_number) == 0
    assert catalog.version_at(a.table_id, catalog.snapshot().commit_number) == 2
    assert catalog.version_at(a.table_id, 0) is None  # before the table existed


def test_a_commit_in_flight_is_not_in_a_snapshot_and_a_settled_one_waits_for_it(catalog):
    info = create(catalog)
    holding, release = threading.Event(), threading.Event()

    def hold(point: str) -> None:
        if point == "stamped" and threading.current_thread().name == "slow":
            holding.set()
            release.wait(30)

    commit_path.fault_hook = hold
    try:
        slow = threading.Thread(
            target=lambda: _add(catalog, info, "slow", at=T0 + 1), name="slow", daemon=True
        )
        slow.start()
        assert holding.wait(30)
        assert catalog.snapshot().commit_number == 1  # numbered 2, not yet visible
        settled: list = []
        waiter = threading.Thread(target=lambda: settled.append(catalog.settled_snapshot()))
        waiter.start()
        time.sleep(0.3)
        assert settled == []  # waits for the commit in flight
        release.set()
        waiter.join(30)
        slow.join(30)
        assert settled[0].commit_number == 2
    finally:
        commit_path.fault_hook = None
        release.set()


def test_sqlite_catalogs_sync_every_commit_unless_told_otherwise(tmp_path):
    def synchronous(url: str) -> int:
        c = Catalog(url)
        try:
            with c.engine.connect() as conn:
                return conn.exec_driver_sql("PRAGMA synchronous").scalar()
        finally:
            c.close()

    assert synchronous(f"sqlite:///{tmp_path}/a.db") == 2  # FULL
    assert synchronous(f"sqlite:///{tmp_path}/b.db?synchronous=normal") == 1  # NORMAL
    with pytest.raises(ConfigurationError, match="synchronous='off' is not one of FULL, NORMAL"):
        Catalog(f"sqlite:///{tmp_path}/c.db?synchronous=off")


# -- start-up and migration -----------------------------------------------------------------------

_OPEN = textwrap.dedent(
    """
    import sys, time
    from changelake.catalog import Catalog
    from changelake.catalog.requests import CommitRequest, CreateTable
    from changelake.clock import SystemClock
    from changelake.schema import Column, TableSchema
    url, start, me = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    time.sleep(max(0.0, start - time.time()))
    catalog = Catalog(url)
    schema = TableSchema((Column(1, "id", "int"),))
    done = catalog.commit([CommitRequest(me, "CREATE TABLE", (CreateTable("t" + me, schema),))],
                          clock=SystemClock())
    print("OK", done.commit.commit_number)  # its own number (a later snapshot may be past it)
    """
)


def _open_at_once(url: str, processes: int = 8) -> list[str]:
    """``processes`` processes open the catalog at one moment and each creates a table."""
    start = time.time() + 3.0  # after every interpreter has started
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN, url, str(start), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
        outputs.append(out.strip())
    return outputs


def test_eight_processes_open_a_fresh_catalog_at_once(catalog_url):
    outputs = _open_at_once(catalog_url)
    assert all(o.startswith("OK ") for o in outputs)
    catalog = Catalog(catalog_url)
    try:
        assert len(catalog.list_tables()) == 8
        assert catalog.snapshot().commit_number == 8
    finally:
        catalog.close()


def _back_to_schema_4(catalog: Catalog) -> None:
    """Undo schemas 5 (the commit order), 6 (dynamic tables, leases) and 7 (tasks), as a catalog
    written by an earlier changelake."""
    with catalog.engine.begin() as conn:
        for table in (
            "cl_dynamic_tables",
            "cl_dt_refreshes",
            "cl_leases",
            "cl_tasks",
            "cl_task_runs",
        ):
            conn.execute(sa.text(f"DROP TABLE {table}"))
        conn.execute(sa.text("DROP INDEX cl_versions_commit"))
        conn.execute(sa.text("ALTER TABLE cl_versions DROP COLUMN commit_number"))
        conn.execute(sa.text("ALTER TABLE cl_tables DROP COLUMN current_commit"))
        conn.execute(sa.text("DROP TABLE cl_clock"))
        conn.execute(sa.text("UPDATE cl_meta SET value = '4' WHERE key = 'schema_version'"))


def test_eight_processes_migrate_an_old_catalog_at_once(catalog_url):
    old = Catalog(catalog_url)
    a, b = create(old, "a", now=T0), create(old, "b", now=T0 + 1)
    _add(old, a, "a1", at=T0 + 3)
    _add(old, b, "b1", at=T0 + 2)
    with old.engine.begin() as conn:  # one transaction over both tables, as schema 4 stamped it
        conn.execute(sa.text(f"UPDATE cl_versions SET committed_at = {T0 + 3} WHERE version = 1"))
    _back_to_schema_4(old)
    old.close()

    outputs = _open_at_once(catalog_url)
    numbers = sorted(int(o.split()[1]) for o in outputs)
    catalog = Catalog(catalog_url)
    try:
        # Versions numbered in time order; the two stamped alike share a number.
        found = {
            (catalog.table_by_id(tid).name, v.version): v.commit_number
            for tid in (a.table_id, b.table_id)
            for v in catalog.versions(tid)
        }
        assert found == {("a", 0): 1, ("b", 0): 2, ("a", 1): 3, ("b", 1): 3}
        assert catalog.table("a").current_commit == 3
        assert numbers[-1] == 3 + 8 and len(set(numbers)) == 8
        assert catalog.version_at(b.table_id, 2) == 0
        with catalog.engine.connect() as conn:
            version = conn.execute(
                sa.text("SELECT value FROM cl_meta WHERE key = 'schema_version'")
            ).scalar()
        assert version == str(SCHEMA_VERSION)
        assert catalog.list_dynamic_tables() == []  # schema 6's tables are there
    finally:
        catalog.close()


def test_an_old_catalog_keeps_time_travel_by_time_after_migrating(catalog_url):
    old = Catalog(catalog_url)
    info = create(old, now=T0)
    _add(old, info, "i1", at=T0 + 10)
    _back_to_schema_4(old)
    old.close()
    catalog = Catalog(catalog_url)
    try:
        assert catalog.version_as_of(info.table_id, T0 + 5, inclusive=True) == 0
        later = _add(catalog, catalog.table("people"), "i2", at=T0 + 1, read_version=1)
        assert later.commit.committed_at > T0 + 10  # the migrated clock starts past the history
        assert later.commit.commit_number == 3
    finally:
        catalog.close()


def test_commits_from_many_threads_get_distinct_increasing_numbers(catalog):
    tables = [create(catalog, f"t{i}") for i in range(4)]
    results: list = []

    def append(info) -> None:
        for i in range(5):
            request = commit(info, i, f"{info.name}-{i}", added=(data_file(f"d/{info.name}{i}"),))
            results.append(catalog.commit([request], clock=SystemClock()).commit)

    threads = [threading.Thread(target=append, args=(t,)) for t in tables]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    by_number = sorted(results, key=lambda s: s.commit_number)
    assert [s.commit_number for s in by_number] == list(range(5, 25))
    times = [s.committed_at for s in by_number]
    assert times == sorted(times) and len(set(times)) == len(times)


# -- statements at a snapshot (SQL) ---------------------------------------------------------------


def test_a_statement_reads_every_table_at_the_snapshot_it_started_with(session):
    """A transaction over two tables commits after a statement began: the statement sees neither
    half of it, although it looks both tables up after the commit."""
    from changelake.txn.context import StatementContext

    session.sql("CREATE TABLE a (x INT)")
    session.sql("CREATE TABLE b (x INT)")
    ctx = StatementContext(session.catalog, session.clock)  # a statement starts
    session.sql("BEGIN")
    session.sql("INSERT INTO a VALUES (1)")
    session.sql("INSERT INTO b VALUES (1)")
    session.sql("COMMIT")
    a, b = session.catalog.table("a"), session.catalog.table("b")
    assert (ctx.read_version(a), ctx.read_version(b)) == (0, 0)
    later = StatementContext(session.catalog, session.clock)
    assert (later.read_version(a), later.read_version(b)) == (1, 1)


def test_time_travel_to_a_commit_after_the_snapshot_reads_it(session):
    """Inside a transaction that began before a commit, AT (TIMESTAMP) and AT (STATEMENT) name
    that commit's version and read it (time travel is absolute); plain reads stay at BEGIN."""
    session.sql("CREATE TABLE t (x INT)")
    session.sql("BEGIN")
    assert session.sql("SELECT count(*) FROM t").first()[0] == 0
    other = changelake.connect(session.warehouse.root, spark=session.spark, clock=session.clock)
    done = other.sql("INSERT INTO t VALUES (1), (2)").first()
    stamped = other.catalog.versions(other.catalog.table("t").table_id)[-1].committed_at
    at_time = f"SELECT count(*) FROM t AT (TIMESTAMP => {stamped:.6f})"
    at_statement = f"SELECT count(*) FROM t AT (STATEMENT => '{done['statement_id']}')"
    assert session.sql(at_time).first()[0] == 2
    assert session.sql(at_statement).first()[0] == 2
    assert session.sql("SELECT count(*) FROM t").first()[0] == 0
    changes = f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (TIMESTAMP => {stamped:.6f})"
    assert session.sql(changes).count() == 0  # from that version to it: nothing
    session.sql("COMMIT")
    other.close()
