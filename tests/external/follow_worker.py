"""A follower process for the crash tests: ``python follow_worker.py WAREHOUSE TABLE``.

It connects to the warehouse (its own local Spark, CHANGELAKE_SPARK_MASTER), reads TABLE once so
that Spark is up, prints ``READY``, waits for a line on stdin, then runs ``ALTER EXTERNAL TABLE
TABLE REFRESH`` in a loop, printing ``FOLLOWED <version>`` after each, until it is killed. It must
lead its own process group (the test starts it with ``start_new_session``): a kill takes the
Spark JVM with it, as a crash of the machine's follower would.

``CHANGELAKE_TEST_FAULT`` names a point where it kills itself (SIGKILL) the N-th time it gets there
(``CHANGELAKE_TEST_FAULT_AT``, default 1):

``after_commit``
    a follow step has committed, its slot is not advanced yet;
``after_advance``
    the slot is advanced past what that commit applied;
``mid_write``
    a follow step has written its files and committed nothing (a large delta: its data files,
    its deletion vectors not yet; a small one, applied in one pass: both).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import changelake
from changelake.dml import keyed
from changelake.errors import ConflictError, SourceError
from changelake.external.postgresql import replication
from changelake.external.postgresql.follow import OPERATION
from changelake.spark import native

FAULT = "CHANGELAKE_TEST_FAULT"
FAULT_AT = "CHANGELAKE_TEST_FAULT_AT"
FAULTS = ("after_commit", "after_advance", "mid_write")


def _die() -> None:
    sys.stdout.flush()
    os.killpg(0, signal.SIGKILL)  # this process and its Spark JVM


class _Countdown:
    """Kills the process the ``at``-th time it is called."""

    def __init__(self, at: int):
        self.left = at

    def __call__(self) -> None:
        self.left -= 1
        if self.left == 0:
            print(f"KILLING at {os.environ[FAULT]}", flush=True)
            _die()


def _install(session: changelake.Session, fault: str, countdown: Callable[[], None]) -> None:
    """Patch the module attributes the follow step calls, so that ``countdown`` runs at
    ``fault``."""
    committed = False  # a follow step committed and has not advanced its slot yet
    real_commit, real_advance = session.catalog.commit, replication.advance

    def commit(requests: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal committed
        result = real_commit(requests, *args, **kwargs)
        committed = any(r.operation == OPERATION for r in requests)
        return result

    def advance(*args: Any, **kwargs: Any) -> None:
        nonlocal committed
        if fault == "after_commit" and committed:
            countdown()
        real_advance(*args, **kwargs)
        if fault == "after_advance" and committed:
            countdown()
        committed = False

    session.catalog.commit = commit  # type: ignore[method-assign]
    replication.advance = advance
    if fault == "mid_write":  # the inserted rows are written before the deletion vectors
        keyed._write_new_rows = _then(keyed._write_new_rows, countdown)
        native.write_events = _then(native.write_events, countdown, none_is_nothing=True)


def _then(
    write: Callable[..., Any], countdown: Callable[[], None], *, none_is_nothing: bool = False
) -> Callable[..., Any]:
    """``write``, then ``countdown``; with ``none_is_nothing``, not after a write that returned
    None having written nothing (``native.write_events`` of a large delta, whose new rows
    ``_write_new_rows`` writes next)."""

    def written(*args: Any, **kwargs: Any) -> Any:
        result = write(*args, **kwargs)
        if result is not None or not none_is_nothing:
            countdown()
        return result

    return written


def main(warehouse: str, table: str) -> None:
    if os.getpgrp() != os.getpid():
        raise SystemExit("follow_worker.py must lead its process group (start_new_session)")
    session = changelake.connect(warehouse)
    fault = os.environ.get(FAULT)
    if fault:
        if fault not in FAULTS:
            raise SystemExit(f"unknown {FAULT} {fault!r}; expected one of {', '.join(FAULTS)}")
        _install(session, fault, _Countdown(int(os.environ.get(FAULT_AT, "1"))))
    session.sql("SELECT 1").collect()  # the table may not exist yet
    print("READY", flush=True)
    sys.stdin.readline()
    while True:
        try:
            session.sql(f"ALTER EXTERNAL TABLE {table} REFRESH")
        except ConflictError:  # another follower's commit came first
            continue
        except SourceError as e:
            # a killed follower's server process may hold the slot until it notices
            if "is active for PID" not in str(e):
                raise
            time.sleep(0.1)
            continue
        print(f"FOLLOWED {session.catalog.table(table).current_version}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
