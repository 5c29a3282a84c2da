"""kill -9 of the follower at random moments loses and doubles nothing (issue 24 item 8).

A writer thread runs random transactions on the source (inserts, updates of values and of keys,
deletes, several rows at once, TOASTed values) while follower processes (``follow_worker.py``,
each its own Spark) loop ``ALTER EXTERNAL TABLE orders REFRESH`` and are killed with SIGKILL:
by the test at a random moment, or by themselves at the points that matter (after the catalog
commit and before the slot advance, after the advance, between a step's deletion vectors and its
data files). The next follower is started while the previous one follows, so its JVM start
overlaps. After the writer stops, one refresh in this process, then the oracle: the writer keeps
the source's rows in memory after each of its transactions, and

* the table equals the source (all columns);
* replaying CHANGES (REDO) version by version from the table's first version, each version's
  rows are the source after some prefix of the writer's transactions, the prefixes never going
  back (a lost, torn or doubled transaction matches none), each delete removes a row the table
  held and each insert adds a key it did not hold, and the counts agree with the history;
* CHANGES (DEFAULT) from the first version on top of its rows gives the source's rows;
* the slot is advanced to the table's position, and DESCRIBE EXTERNAL TABLE counts its rows.

A key change sets the note as well: the follow cannot take yet a TOASTed value that a key change
leaves alone (pgoutput sends it as unchanged; the follow looks for it under the new key).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from tests.conftest import rows
from tests.external.follow_worker import FAULT, FAULT_AT
from tests.support.postgres import create_database

import changelake
from changelake.errors import SourceError
from changelake.external.postgresql import replication

WORKER = Path(__file__).with_name("follow_worker.py")
COLUMNS = "id, region, amount, note"
INITIAL_ROWS = 200
START_TIMEOUT_SECONDS = 180
FAULT_TIMEOUT_SECONDS = 120
AHEAD = 2
REGIONS = ("EU", "US", "APAC")
CENT = Decimal("0.01")

Row = tuple[str, Decimal, str | None]  # region, amount, note


@dataclass
class SourceWriter:
    """Random transactions on the source's ``orders``, one at a time, and the source's rows
    after each (``states[k]``: a fingerprint after the first ``k`` transactions)."""

    dsn: str
    seed: int
    rows: dict[int, Row]
    states: list[int] = field(default_factory=list)
    changed: list[dict[int, Row | None]] = field(default_factory=list)  # per transaction
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self.initial = dict(self.rows)
        self._next_id = max(self.rows) + 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="source-writer")
        self.states.append(fingerprint(self.rows))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, options="-c synchronous_commit=on") as conn:
                while not self._stop.is_set():
                    self._transaction(conn)
                    time.sleep(self._random.uniform(0.01, 0.05))
        except BaseException as e:  # noqa: BLE001 - raised again by stop()
            self.error = e

    def _transaction(self, conn: psycopg.Connection) -> None:
        r = self._random
        after = dict(self.rows)
        statements = []
        for _ in range(r.choice((1, 1, 1, 2, 3, 5))):
            statements.append(self._change(after))
        with conn.transaction():
            for statement, params in statements:
                conn.execute(statement, params)
        self.changed.append(
            {
                k: after.get(k)
                for k in self.rows.keys() | after.keys()
                if self.rows.get(k) != after.get(k)
            }
        )
        self.rows = after
        self.states.append(fingerprint(after))

    def closest(self, rows: dict[int, Row], start: int) -> tuple[int, dict]:
        """The prefix from ``start`` on whose rows differ least from ``rows``, and how."""
        at = dict(self.initial)
        best: tuple[int, dict] = (-1, {})
        for k in range(len(self.states)):
            if k:
                for key, row in self.changed[k - 1].items():
                    if row is None:
                        at.pop(key, None)
                    else:
                        at[key] = row
            if k >= start:
                diff = {
                    key: (rows.get(key), at.get(key))
                    for key in rows.keys() | at.keys()
                    if rows.get(key) != at.get(key)
                }
                if best[0] < 0 or len(diff) < len(best[1]):
                    best = (k, diff)
        return best

    def _change(self, rows: dict[int, Row]) -> tuple[str, tuple]:
        """One random statement, applied to ``rows`` as the source will apply it."""
        r = self._random
        kind = r.choices(
            ("insert", "update", "amounts", "key", "delete", "many"), (30, 25, 15, 10, 12, 3)
        )[0]
        if kind == "insert" or len(rows) < 20:
            new = self._fresh_id()
            rows[new] = (r.choice(REGIONS), self._amount(), self._note())
            return "INSERT INTO orders VALUES (%s, %s, %s, %s)", (new, *rows[new])
        old = r.choice(sorted(rows))
        region, amount, note = rows[old]
        if kind == "update":  # a TOASTed note it leaves alone arrives as unchanged
            if r.random() < 0.5:
                rows[old] = (region, self._amount(), note)
                return "UPDATE orders SET amount = %s WHERE id = %s", (rows[old][1], old)
            rows[old] = (r.choice(REGIONS), amount, self._note())
            return "UPDATE orders SET region = %s, note = %s WHERE id = %s", (*rows[old][::2], old)
        if kind == "amounts":
            step = self._amount()
            for k in rows:
                if k % 7 == old % 7:
                    rows[k] = (rows[k][0], rows[k][1] + step, rows[k][2])
            return "UPDATE orders SET amount = amount + %s WHERE id %% 7 = %s", (step, old % 7)
        if kind == "key":  # sets the note too (see the module's docstring)
            new = self._fresh_id()
            rows[new] = (region, self._amount(), self._note())
            del rows[old]
            return "UPDATE orders SET id = %s, amount = %s, note = %s WHERE id = %s", (
                new,
                *rows[new][1:],
                old,
            )
        if kind == "delete":
            del rows[old]
            return "DELETE FROM orders WHERE id = %s", (old,)
        gone = [k for k in rows if k % 50 == old % 50]
        for k in gone:
            del rows[k]
        return "DELETE FROM orders WHERE id %% 50 = %s", (old % 50,)

    def _fresh_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _amount(self) -> Decimal:
        return Decimal(self._random.randint(1, 100_000)) * CENT

    def _note(self) -> str | None:
        r = self._random.random()
        if r < 0.1:
            return None
        if r < 0.2:  # past the TOAST threshold even compressed: stored out of line
            return "".join(self._random.choices("abcdefghijklmnopqrstuvwxyz", k=8000))
        return f"n{self._random.randint(0, 10**6)}"


def fingerprint(rows: dict[int, Row]) -> int:
    return hash(frozenset(rows.items()))


@dataclass
class Follower:
    process: subprocess.Popen[str]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while "READY" not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"a follower did not start:\n{self.output()[-3000:]}")
            time.sleep(0.05)

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group is gone already
            pass
        self.process.wait(timeout=60)


def start_follower(warehouse: Path, log: Path, fault: str | None, at: int) -> Follower:
    env = os.environ | {"CHANGELAKE_SPARK_MASTER": "local[1]", "PYTHONUNBUFFERED": "1"}
    if fault is not None:
        env |= {FAULT: fault, FAULT_AT: str(at)}
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, str(WORKER), str(warehouse), "orders"],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: the JVM dies with it
        )
    return Follower(process, log)


@pytest.fixture
def source(pg_server) -> Iterator[tuple[str, int, str]]:
    """A fresh source database with ``orders``: (its psycopg connection string, port, name)."""
    name = "crash_" + uuid.uuid4().hex[:10]
    url = sa.make_url(create_database(pg_server, name))
    dsn = f"host={url.host} port={url.port} dbname={name} user={url.username}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, region text, amount numeric(10,2), note text)"
        )
        conn.execute(
            "INSERT INTO orders SELECT g, (ARRAY['EU', 'US', 'APAC'])[g % 3 + 1], g * 1.25,"
            f" 'n' || g FROM generate_series(1, {INITIAL_ROWS}) g"
        )
    yield dsn, url.port, name
    with psycopg.connect(dsn, autocommit=True) as conn:  # slots hold the whole server's WAL
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE database = current_database()"
        )


def source_rows(dsn: str) -> dict[int, Row]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(f"SELECT {COLUMNS} FROM orders").fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in found}


def refresh(session: changelake.Session) -> None:
    """REFRESH, waiting while the server process of a killed follower still holds the slot."""
    deadline = time.monotonic() + 30
    while True:
        try:
            session.sql("ALTER EXTERNAL TABLE orders REFRESH")
            return
        except SourceError as e:
            if "is active for PID" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def followers(
    warehouse: Path, logs: Path, kills: list[str | None], rng: random.Random
) -> Iterator[Callable[[], None]]:
    """Starts the first followers, and yields what runs them all, one after the other: one per
    entry of ``kills``, ``None`` killed by the test at a random moment, a fault name killing
    itself there. A follower is started ``AHEAD`` followers before it follows, so that its JVM
    starts while the others follow."""
    started: list[Follower] = []

    def start(until: int) -> None:
        for i in range(len(started), min(until, len(kills))):
            log = logs / f"follower-{i}.log"
            started.append(start_follower(warehouse, log, kills[i], rng.randint(1, 2)))

    def run() -> None:
        for i, kill in enumerate(kills):
            start(i + 1 + AHEAD)
            following = started[i]
            following.wait_ready()
            following.go()
            if kill is None:
                time.sleep(rng.uniform(0.5, 4.0))
                following.kill()
            else:
                try:
                    following.process.wait(timeout=FAULT_TIMEOUT_SECONDS)
                except subprocess.TimeoutExpired:
                    following.kill()
                    pytest.fail(f"{kill} was never reached:\n{following.output()[-3000:]}")
                following.kill()  # what its group left
            output = following.output()
            assert following.process.returncode == -signal.SIGKILL, output[-3000:]
            assert kill is None or f"KILLING at {kill}" in output, output[-3000:]

    start(AHEAD)
    try:
        yield run
    finally:
        for follower in started:
            if follower.process.poll() is None:
                follower.kill()


def _short(row: Row | None) -> object:
    if row is None or row[2] is None or len(row[2]) < 20:
        return row
    return (row[0], row[1], f"{row[2][:8]}...({len(row[2])} chars)")


def table_at(session: changelake.Session, version: int) -> dict[int, Row]:
    found = session.sql(f"SELECT {COLUMNS} FROM orders AT(VERSION => {version})").collect()
    return {r[0]: (r[1], r[2], r[3]) for r in found}


def check_history(
    session: changelake.Session, first: int, initial: dict[int, Row], writer: SourceWriter
) -> None:
    """Replay the table's REDO changes from version ``first`` (rows ``initial``): every version
    is the source after some prefix of the writer's transactions, never an earlier one."""
    info = session.catalog.table("orders")
    state = dict(initial)
    redo = session.sql(
        f"SELECT {COLUMNS}, METADATA$ACTION, METADATA$ISUPDATE, METADATA$COMMIT_VERSION"
        f" FROM orders CHANGES(INFORMATION => REDO) AT(VERSION => {first})"
    ).collect()
    by_version: dict[int, list] = defaultdict(list)
    for r in redo:
        by_version[r[6]].append(r)
    where = {}
    for k, s in enumerate(writer.states):
        where.setdefault(s, []).append(k)
    prefix = 0
    assert fingerprint(state) == writer.states[0]
    history = session.catalog.versions(info.table_id, after_exclusive=first)
    for version in history:
        events = by_version.pop(version.version, [])
        for r in sorted(events, key=lambda r: r[4] != "DELETE"):  # deletes first
            row = (r[1], r[2], r[3])
            if r[4] == "DELETE":
                assert state.pop(r[0], None) == row, (
                    f"version {version.version} deletes {r[0]} it did not hold"
                )
            else:
                assert r[0] not in state, f"version {version.version} inserts {r[0]} twice"
                state[r[0]] = row
        updates = sum(1 for r in events if r[4] == "INSERT" and r[5])
        counts = (
            sum(1 for r in events if r[4] == "INSERT") - updates,
            updates,
            sum(1 for r in events if r[4] == "DELETE") - updates,
        )
        recorded = (version.rows_inserted, version.rows_updated, version.rows_deleted)
        assert counts == recorded, (
            f"version {version.version}: its changes insert, update, delete {counts} rows, its"
            f" history says {recorded}"
        )
        found = [k for k in where.get(fingerprint(state), []) if k >= prefix]
        if not found:
            k, diff = writer.closest(state, prefix)
            shown = {key: tuple(_short(r) for r in pair) for key, pair in sorted(diff.items())[:10]}
            pytest.fail(
                f"version {version.version} ({version.operation}) is the source after none of"
                f" the writer's transactions {prefix}..{len(writer.states) - 1}; closest: after"
                f" {k}, differing in {len(diff)} rows (table, source): {shown}"
            )
        prefix = found[0]
    assert not by_version, f"changes of versions not in the history: {sorted(by_version)}"
    assert prefix == len(writer.states) - 1  # the last version is the source now


def run_crashes(tmp_path: Path, spark, source, kills: list[str | None], seed: int) -> None:
    dsn, port, name = source
    warehouse = tmp_path / "wh"
    session = changelake.connect(str(warehouse), spark=spark)
    try:
        with followers(warehouse, tmp_path, kills, random.Random(seed)) as follow_and_kill:
            session.sql(
                f"CREATE CONNECTION shop TYPE = POSTGRES OPTIONS (host => '127.0.0.1',"
                f" port => {port}, database => '{name}', user => 'postgres')"
            )
            session.sql("CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'")
            first = session.catalog.table("orders").current_version
            writer = SourceWriter(dsn, seed, source_rows(dsn))
            writer.start()
            try:
                follow_and_kill()
            finally:
                writer.stop()
        refresh(session)

        expected = source_rows(dsn)
        assert writer.rows == expected  # the oracle is right about the source
        assert rows(session.sql(f"SELECT {COLUMNS} FROM orders")) == sorted(
            (k, *v) for k, v in expected.items()
        )
        initial = table_at(session, first)
        check_history(session, first, initial, writer)

        state = dict(initial)
        net = session.sql(
            f"SELECT {COLUMNS}, METADATA$ACTION FROM orders"
            f" CHANGES(INFORMATION => DEFAULT) AT(VERSION => {first})"
        ).collect()
        for r in sorted(net, key=lambda r: r[4] != "DELETE"):
            if r[4] == "DELETE":
                assert state.pop(r[0], None) == (r[1], r[2], r[3]), r
            else:
                assert r[0] not in state, r
                state[r[0]] = (r[1], r[2], r[3])
        assert state == expected

        ext = session.catalog.find_external_table("orders")
        assert ext is not None and ext.definition.slot is not None
        with psycopg.connect(dsn) as conn:
            slot = replication.slot_state(conn, ext.definition.slot)
        assert slot is not None and slot.confirmed == ext.position  # the slot caught up
        described = dict(session.sql("DESCRIBE EXTERNAL TABLE orders").collect())
        assert described["rows"] == str(len(expected))
    finally:
        session.close()


def test_killed_followers_lose_and_double_nothing(tmp_path, spark, source):
    run_crashes(tmp_path, spark, source, ["after_commit", "mid_write", None, "after_advance"], 24)


@pytest.mark.nightly
def test_many_killed_followers_lose_and_double_nothing(tmp_path, spark, source):
    kills: list[str | None] = ["after_commit", "mid_write", "after_advance", None] * 3
    run_crashes(tmp_path, spark, source, kills, 2408)
