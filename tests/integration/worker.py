"""A writer process for the concurrency tests: ``python worker.py MODE WAREHOUSE ARGS...``.

Each run starts its own local[1] Spark (CHANGELAKE_SPARK_MASTER) and prints one parseable line
``OUTCOME <json>`` at the end. Modes:

``append TABLE WORKER COUNT``
    COUNT single-row INSERT ... VALUES (i, 'wWORKER', WORKER) statements, one version each.
``update TABLE WORKER BARRIER_DIR``
    One UPDATE of every row. Its files are written, then the worker waits at a barrier (creates
    ``BARRIER_DIR/WORKER`` and waits until ``BARRIER_DIR`` holds two entries) before committing,
    so both racers commit against the same read version.
``crash TABLE``
    One UPDATE whose files are written; then it prints ``READY`` and blocks before committing,
    waiting to be killed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import changelake
from changelake.errors import ConflictError

BARRIER_TIMEOUT_SECONDS = 120.0


def _hold_commits(session: changelake.Session, before_commit: Callable[[], None]) -> None:
    """Run ``before_commit`` between a statement writing its files and committing them."""
    real_commit = session.catalog.commit

    def commit(*args: Any, **kwargs: Any) -> Any:
        before_commit()
        return real_commit(*args, **kwargs)

    session.catalog.commit = commit  # type: ignore[method-assign]


def _barrier(directory: str, worker: str, parties: int = 2) -> None:
    with open(os.path.join(directory, worker), "w"):
        pass
    deadline = time.monotonic() + BARRIER_TIMEOUT_SECONDS
    while len(os.listdir(directory)) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {directory}: the other worker never arrived")
        time.sleep(0.01)


def _report(**outcome: Any) -> None:
    print("OUTCOME " + json.dumps(outcome), flush=True)


def main(mode: str, warehouse: str, table: str, *args: str) -> None:
    session = changelake.connect(warehouse)
    if mode == "append":
        worker, count = int(args[0]), int(args[1])
        for i in range(count):
            # The result DataFrame is not collected: that would run a Spark job per statement.
            session.sql(f"INSERT INTO {table} VALUES ({worker * 1000 + i}, 'w{worker}', {worker})")
        _report(status="committed")
    elif mode == "update":
        worker, barrier_dir = args[0], args[1]
        _hold_commits(session, lambda: _barrier(barrier_dir, worker))
        try:
            result = session.sql(f"UPDATE {table} SET name = 'by {worker}', n = n + 1").first()
        except ConflictError as e:
            _report(status="conflict", message=str(e))
        else:
            _report(status="committed", version=result["version"])
    elif mode == "crash":

        def block() -> None:
            print("READY", flush=True)
            while True:
                time.sleep(60)

        _hold_commits(session, block)
        session.sql(f"UPDATE {table} SET n = -n")
        _report(status="committed")  # not reached: the test kills the process first
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
