"""The catalog's writes that are not commits: which process is doing what, now.

Two kinds, each one short write transaction of its own (retried after a transient lock failure,
as a commit is):

* a task run's row when the run starts (EXECUTING, or SKIPPED), claimed in the same transaction
  under the scheduler's lease and the task's schedule, and its end when it committed nothing
  (FAILED, CANCELLED); a run that commits records its end in that commit (``FinishTaskRun``);
* leases (``cl_leases``): one holder at a time of a warehouse-wide role, the scheduler's, taken
  and renewed every round and released on shutdown.

They are deliberately outside the commit order (``Catalog.commit``): they make no version of
anything and change no definition, so nothing reads them at a point (time travel, streams and
refreshes never see them) and numbering them would only lengthen the history with commits that
changed nothing; a lease is renewed every few seconds and must not queue behind the commit clock
that every commit holds. What depends on them checks them where it commits: ``LeaseHeld`` and
``TaskRunExecuting`` are requirements like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, Engine

from changelake.catalog import lease_repo, task_repo
from changelake.catalog.alters import FinishTaskRun
from changelake.catalog.db import retrying, writing
from changelake.catalog.model import RunClaim, TaskRun
from changelake.clock import Clock

T = TypeVar("T")


def add_task_run(
    engine: Engine, run: TaskRun, claim: RunClaim | None, *, postgres: bool
) -> TaskRun | None:
    return _retried(
        engine, lambda conn: task_repo.claim_and_add(conn, run, claim, postgres=postgres)
    )


def end_task_run(engine: Engine, ending: FinishTaskRun, *, completed_at: float) -> bool:
    return _retried(
        engine, lambda conn: task_repo.finish_run(conn, ending, completed_at=completed_at)
    )


def acquire_lease(
    engine: Engine, name: str, holder: str, *, ttl: float, clock: Clock, postgres: bool
) -> int | None:
    def acquire(conn: Connection) -> int | None:
        now = clock.now()  # read in each try
        return lease_repo.acquire(conn, name, holder, now=now, ttl=ttl, postgres=postgres)

    return _retried(engine, acquire)


def release_lease(engine: Engine, name: str, holder: str) -> None:
    with writing(engine) as conn:
        lease_repo.release(conn, name, holder)


def _retried(engine: Engine, write: Callable[[Connection], T]) -> T:
    """``write`` in a write transaction of its own, tried again after a transient lock failure."""

    def attempt() -> T:
        with writing(engine) as conn:
            return write(conn)

    return retrying(attempt)
