"""A process of the isolation test (``test_isolation.py``), in the style of Jepsen's bank test.

``python bank_worker.py writer WAREHOUSE CATALOG WORKER COUNT SEED STALL_DIR``
    COUNT transactions, each ``BEGIN; UPDATE acct_a (take AMOUNT from one row); UPDATE acct_b
    (give AMOUNT to one row); INSERT INTO lst (WORKER, SEQ, AMOUNT); COMMIT``, retried on a
    conflict; prints ``ACK SEQ`` after each commit returns. Some commits are stalled between the
    statement's start and its catalog write: the writer announces the stall with a file in
    STALL_DIR and holds it until the reader has read inside it (or a timeout); some others stall
    while they hold the commit clock.
``python bank_worker.py reader WAREHOUSE CATALOG STOP_FILE SEED STALL_DIR``
    Until STOP_FILE exists: reads the three tables inside BEGIN ... COMMIT, in one statement, and
    twice AT (TIMESTAMP => t); the transaction and AT readings start inside an announced stall and
    end after it, where a commit stamped before its catalog write shows as skew. Checks the
    invariants: a + b = TOTAL (no lost update), b - B0 = sum(lst.amount) (no torn transaction, no
    read skew), every writer's sequence numbers are 1..k (no lost or doubled append), and the two
    AT answers are equal (repeatable). Prints ``OUTCOME {"checks": n, "anomalies": [...]}``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

import changelake
from changelake.catalog import commit as commit_path
from changelake.errors import ConflictError

ROWS = 4
BALANCE = 1000
TOTAL = 2 * ROWS * BALANCE  # acct_a + acct_b
B0 = ROWS * BALANCE  # acct_b at the start
STALL_PROBABILITY = 0.3
HELD_STALL_SECONDS = 4.0  # at most, waiting for the reader to read inside the stall


def setup(session: changelake.Session) -> None:
    """The three tables of the test (run once, by the test itself)."""
    values = ", ".join(f"({i}, {BALANCE})" for i in range(1, ROWS + 1))
    for table in ("acct_a", "acct_b"):
        session.sql(f"CREATE TABLE {table} (id INT, bal BIGINT)")
        session.sql(f"INSERT INTO {table} VALUES {values}")
    session.sql("CREATE TABLE lst (writer INT, seq INT, amount BIGINT)")


def _stall_commits(session: changelake.Session, rng: random.Random, stall_dir: str) -> None:
    """Stall some commits between the statement's start and its catalog write (where a commit
    used to take its timestamp), and some while they hold the commit clock."""
    real_commit = session.catalog.commit

    def commit(*args: Any, **kwargs: Any) -> Any:
        if rng.random() < STALL_PROBABILITY:
            marker = os.path.join(stall_dir, f"{os.getpid()}-{time.monotonic_ns()}")
            open(marker, "w").close()
            deadline = time.monotonic() + HELD_STALL_SECONDS
            while not os.path.exists(marker + ".seen") and time.monotonic() < deadline:
                time.sleep(0.01)
            os.remove(marker)
        return real_commit(*args, **kwargs)

    session.catalog.commit = commit  # type: ignore[method-assign]

    def stamped(point: str) -> None:
        if point == "stamped" and rng.random() < STALL_PROBABILITY:
            time.sleep(rng.uniform(0.05, 0.3))

    commit_path.fault_hook = stamped


def writer(
    session: changelake.Session, worker: int, count: int, rng: random.Random, stall_dir: str
) -> None:
    _stall_commits(session, rng, stall_dir)
    print("STARTED", flush=True)
    seq = 1
    while seq <= count:
        take, give, amount = rng.randint(1, ROWS), rng.randint(1, ROWS), rng.randint(1, 9)
        try:
            session.sql("BEGIN")
            session.sql(f"UPDATE acct_a SET bal = bal - {amount} WHERE id = {take}")
            session.sql(f"UPDATE acct_b SET bal = bal + {amount} WHERE id = {give}")
            session.sql(f"INSERT INTO lst VALUES ({worker}, {seq}, {amount})")
            session.sql("COMMIT")
        except ConflictError:
            if session.transaction is not None:
                session.sql("ROLLBACK")
            continue
        print(f"ACK {seq}", flush=True)
        seq += 1


def _observation(rows: list[Any]) -> dict[str, Any]:
    return {"a": rows[0], "b": rows[1], "amount": rows[2], "seqs": rows[3]}


def _seqs(session: changelake.Session, at: str = "") -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for row in session.sql(f"SELECT writer, seq FROM lst {at}").collect():
        found.setdefault(str(row["writer"]), []).append(row["seq"])
    return {w: sorted(s) for w, s in sorted(found.items())}


def _one_statement(session: changelake.Session, at: str = "") -> list[Any]:
    row = session.sql(
        "SELECT a.s AS a, b.s AS b, l.s AS l"
        f" FROM (SELECT sum(bal) AS s FROM acct_a {at}) a"
        f" CROSS JOIN (SELECT sum(bal) AS s FROM acct_b {at}) b"
        f" CROSS JOIN (SELECT coalesce(sum(amount), 0) AS s FROM lst {at}) l"
    ).first()
    return [row["a"], row["b"], row["l"]]


def _anomalies(kind: str, seen: dict[str, Any]) -> list[str]:
    found = []
    if seen["a"] + seen["b"] != TOTAL:
        found.append(f"{kind}: lost update: a + b = {seen['a'] + seen['b']} != {TOTAL} {seen}")
    if seen["b"] - B0 != seen["amount"]:
        found.append(f"{kind}: torn or skewed read: b - B0 != sum(lst.amount) {seen}")
    for w, seqs in (seen["seqs"] or {}).items():
        if seqs != list(range(1, len(seqs) + 1)):
            found.append(f"{kind}: writer {w}'s appends are not 1..k: {seqs}")
    return found


class _Stall:
    """A stalled commit the reader found announced: it reads inside it, then lets it go."""

    def __init__(self, stall_dir: str, wait_seconds: float):
        self.marker: str | None = None
        deadline = time.monotonic() + wait_seconds
        while self.marker is None and time.monotonic() < deadline:
            found = [f for f in os.listdir(stall_dir) if not f.endswith(".seen")]
            if found:
                self.marker = os.path.join(stall_dir, found[0])
            else:
                time.sleep(0.01)

    def release_and_wait(self) -> None:
        """Let the stalled commit go, and wait until it has committed (or been refused)."""
        if self.marker is None:
            return
        open(self.marker + ".seen", "w").close()
        deadline = time.monotonic() + 2 * HELD_STALL_SECONDS  # its writer may have been killed
        while os.path.exists(self.marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # its catalog write
        for leftover in (self.marker, self.marker + ".seen"):
            if os.path.exists(leftover):
                os.remove(leftover)


def reader(session: changelake.Session, stop_file: str, rng: random.Random, stall_dir: str) -> None:
    checks, anomalies = 0, []
    deadline = time.monotonic() + 600
    while not os.path.exists(stop_file) and time.monotonic() < deadline:
        mode = checks % 3
        if mode == 0:
            stall = _Stall(stall_dir, 3.0)
            session.sql("BEGIN")
            a = session.sql("SELECT sum(bal) FROM acct_a").first()[0]
            stall.release_and_wait()
            seqs = _seqs(session)
            time.sleep(rng.uniform(0, 0.2))
            b = session.sql("SELECT sum(bal) FROM acct_b").first()[0]
            amount = session.sql("SELECT coalesce(sum(amount), 0) FROM lst").first()[0]
            session.sql("COMMIT")
            anomalies += _anomalies("transaction", _observation([a, b, amount, seqs]))
        elif mode == 1:
            anomalies += _anomalies("one statement", _observation([*_one_statement(session), {}]))
        else:
            stall = _Stall(stall_dir, 3.0)
            t = time.time() - (0.0 if stall.marker else rng.uniform(0.0, 0.5))
            at = f"AT (TIMESTAMP => {t:.6f})"
            first = _observation([*_one_statement(session, at), _seqs(session, at)])
            stall.release_and_wait()
            again = _observation([*_one_statement(session, at), _seqs(session, at)])
            anomalies += _anomalies("AT (TIMESTAMP)", first)
            if again != first:
                anomalies.append(f"AT (TIMESTAMP => {t:.6f}) not repeatable: {first} then {again}")
        checks += 1
    print("OUTCOME " + json.dumps({"checks": checks, "anomalies": anomalies}), flush=True)


def main(mode: str, warehouse: str, catalog: str, *args: str) -> None:
    session = changelake.connect(warehouse, catalog=catalog)
    if mode == "writer":
        worker, count, seed = int(args[0]), int(args[1]), int(args[2])
        writer(session, worker, count, random.Random(seed), args[3])
    else:
        reader(session, args[0], random.Random(int(args[1])), args[2])


if __name__ == "__main__":
    main(*sys.argv[1:])
