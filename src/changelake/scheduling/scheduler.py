"""The scheduler: keeps every dynamic table with a target lag within it, and runs the task
graphs that are due (``changelake.tasks.due``); hosted by ``changelake serve``.

Each round (every ``tick`` seconds) renews the warehouse's ``scheduler`` lease, a catalog write;
without the lease (another ``serve`` holds it) it does nothing. A warehouse with no dynamic
table, external table or task has nothing to schedule: a round then only reads that, and
writes nothing (a lease held lapses); the first such object makes the next round take the
lease (one scheduler wins it, as always) and schedule it. A dynamic table is *due* when its
data timestamp is older than half its target lag (so a refresh that takes less than the other
half keeps it within the lag), or when its lag, plus a tick and the time its last round took
(with a margin), would pass the target lag otherwise (a short lag is kept by rounds back to
back), or it was never refreshed. The due tables and every dynamic table
they read (DOWNSTREAM ones included) are refreshed in one round at one data timestamp, each once:
tables that share upstreams are aligned. A table whose sources did not change gets a NO_DATA
refresh: no Spark job. Every refresh requires the lease's epoch, so a scheduler that lost its
lease (paused, partitioned) cannot commit. A failed refresh is retried after a backoff that
doubles, and the table is suspended after ``suspend_after`` failures in a row, with the error
as the reason (SHOW DYNAMIC TABLES); ALTER DYNAMIC TABLE ... RESUME resumes it. Task runs
require the lease's epoch too; a scheduler that takes the lease over ends the runs its
predecessor left EXECUTING (FAILED: nothing of them was committed).

Every refresh and follow step adds a small file to its table; after ``compact_after_writes`` of
them, a round ends by merging the table's small files (``dml.maintenance.compact_small_files``,
rows keeping their identity, at most ``compact_rows`` rows a round, one table a round), which
change scans of it see through, so a dynamic table's files stay few however long it is kept.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from changelake.catalog import Catalog
from changelake.catalog.model import (
    DynamicTableInfo,
    ExternalTableState,
    RefreshAction,
    SchedulingState,
)
from changelake.catalog.requests import LeaseHeld
from changelake.clock import Clock
from changelake.dml.maintenance import compact_small_files
from changelake.dynamic.dag import Round, refresh_round
from changelake.dynamic.refresh import data_timestamp_now
from changelake.errors import ChangelakeError, ConflictError, SourceChangedError
from changelake.external.objects import follow_once
from changelake.external.postgresql.follow import Followed, mark_failed
from changelake.runtime.env import Context, Env
from changelake.tasks.due import due_graphs, end_orphaned_runs, run_due
from changelake.tasks.run import GraphRun, Runner, RunStatements
from changelake.txn.context import StatementContext

LEASE = "scheduler"
# a round may take this much longer than the last one did (its delta is larger when it starts
# later, the machine busier)
_ROUND_MARGIN = 1.25
_POOL = "spark.scheduler.pool"
_log = logging.getLogger("changelake.scheduler")


@dataclass(frozen=True)
class SchedulerSettings:
    tick: float = 1.0  # seconds between rounds
    lease: float = 15.0  # a dead scheduler's successor takes over within this
    suspend_after: int = 3  # failed refreshes in a row
    backoff: float = 2.0  # seconds before the first retry; doubles, up to max_backoff
    max_backoff: float = 300.0
    # refreshes of a round that do not read each other run this many at once, each thread's
    # Spark jobs in a FAIR scheduler pool of its own (1: one after another). A small refresh's
    # job is one task: with 2 cores, a round of the 10-table dynamic_lag DAG took 3.64 s with
    # 2 workers and 4.68 s one after another (medians of 6 alternating rounds, bench/ANALYSIS.md)
    workers: int = 2
    # a dynamic or external table's small files are merged after this many writes of it (each
    # adds one or two), at least ``compact_files`` of them and at most ``compact_rows`` rows a
    # round; 0 writes: never
    compact_after_writes: int = 16
    compact_files: int = 8
    compact_rows: int = 2_000_000


class Scheduler:
    """Refreshes the warehouse's dynamic tables as their target lags require."""

    def __init__(
        self,
        catalog: Catalog,
        clock: Clock,
        connect: Callable[[], Env],
        run_statements: RunStatements,
        settings: SchedulerSettings | None = None,
    ):
        self.catalog = catalog
        self.clock = clock
        self._connect = connect  # Spark starts only once something is due
        self._run_statements = run_statements  # a task's body, by the SQL layer
        self.settings = settings or SchedulerSettings()
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.epoch: int | None = None
        self._retry_at: dict[int, float] = {}
        self._failures: dict[int, int] = {}
        self._followed: dict[int, float] = {}  # external table id -> when it was last followed
        self._took: dict[int, float] = {}  # dynamic table id -> seconds its last round took
        self._writes: dict[int, int] = {}  # table id -> its writes since its last compaction
        self.graph_runs: list[GraphRun] = []  # the task graphs the last round ran
        self._pool = threading.local()  # per thread: the (Spark, scheduler pool) it set last
        self._workers: ThreadPoolExecutor | None = None  # a round's concurrent refreshes

    # -- rounds -------------------------------------------------------------------------------

    def step(self) -> Round | None:
        """One round: renew the lease, run the task graphs that are due (``graph_runs``), then
        refresh the dynamic tables that are due (their Round; None: none was)."""
        if self.renew() is None:
            self.graph_runs = []
            return None
        self.run_tasks()
        return self.refresh_tables()

    def renew(self) -> int | None:
        """Take or renew the lease: its epoch, or None while another scheduler holds it, or
        while there is nothing to schedule (then no catalog write). The holder ends the runs
        nobody will finish (``end_orphaned_runs``)."""
        if not self.catalog.has_scheduled_objects():
            self.epoch = None
            return None
        epoch = self.catalog.acquire_lease(
            LEASE, self.holder, ttl=self.settings.lease, clock=self.clock
        )
        if epoch is not None:
            end_orphaned_runs(self.catalog, self.holder, self.clock.now())
        self.epoch = epoch
        return epoch

    def run_tasks(self) -> list[GraphRun]:
        """Run the task graphs that are due (under the lease held)."""
        self.graph_runs = []
        epoch = self.epoch
        if epoch is None:
            return []
        ctx = StatementContext(self.catalog, self.clock, None)
        graphs = due_graphs(ctx)
        if graphs:
            env = self._env("tasks")
            held = (LeaseHeld(LEASE, epoch),)
            for graph in graphs:
                runner = Runner(ctx, env, self._run_statements, self.holder, graph.trigger, held)
                try:
                    self.graph_runs.append(run_due(runner, graph))
                except ChangelakeError as e:  # one graph's trouble does not hold up the others
                    _log.warning("changelake scheduler: task %s: %s", graph.root.name, e)
        return self.graph_runs

    def follow_external(self) -> list[Followed]:
        """Follow the active external tables whose FOLLOW_LAG has passed since they were last
        followed (under the lease held); a source that fails marks its table FAILED, with the
        error, until ALTER EXTERNAL TABLE … RESUME."""
        epoch, now = self.epoch, self.clock.now()
        if epoch is None:
            return []
        due = [
            e
            for e in self.catalog.list_external_tables()
            if e.state == ExternalTableState.ACTIVE
            and now - self._followed.get(e.table_id, 0.0) >= e.definition.follow_lag
        ]
        if not due:
            return []
        env = self._env("refreshes")
        done = []
        for ext in due:
            self._followed[ext.table_id] = now
            try:
                step = follow_once(env, ext, requirements=(LeaseHeld(LEASE, epoch),))
                done.append(step)
                if step.version is not None:
                    self._wrote(ext.table_id)
            except SourceChangedError as e:  # needs a person: stop until RESUME
                mark_failed(self.catalog, self.clock, ext, str(e))
                _log.warning("changelake scheduler: external table %s: %s", ext.name, e)
            except ChangelakeError as e:  # unreachable, a race, a lost lease: next round
                _log.info("changelake scheduler: external table %s: %s", ext.name, e)
                _log.info("changelake scheduler: external table %s: %s", ext.name, e)
        return done

    def refresh_tables(self) -> Round | None:
        """Follow the external tables that are due, then refresh the dynamic tables that are
        due (under the lease held)."""
        self.follow_external()
        epoch = self.epoch
        due = self.due() if epoch is not None else []
        if epoch is None:
            return None
        done = None
        if due:
            done = self._refresh(self._env("refreshes").context(), due, (LeaseHeld(LEASE, epoch),))
        self.compact_tables()
        return done

    def _wrote(self, table_id: int) -> None:
        self._writes[table_id] = self._writes.get(table_id, 0) + 1

    def compact_tables(self) -> int | None:
        """Merge the small files of the table written most often since its last compaction,
        if that reached ``compact_after_writes`` (under the lease held): the table's id, or
        None. A compaction that loses a race with a refresh is tried again next round."""
        epoch, every = self.epoch, self.settings.compact_after_writes
        if epoch is None or every <= 0 or not self._writes:
            return None
        table_id, writes = max(self._writes.items(), key=lambda kv: kv[1])
        if writes < every:
            return None
        ctx = self._env("refreshes").context()
        try:
            compact_small_files(
                ctx,
                ctx.catalog.table_by_id(table_id),
                least_files=self.settings.compact_files,
                most_rows=self.settings.compact_rows,
                requirements=(LeaseHeld(LEASE, epoch),),
            )
        except ConflictError as e:  # a race or a lost lease: a later round
            _log.info("changelake scheduler: compacting table %s: %s", table_id, e)
            return None
        except ChangelakeError as e:  # dropped meanwhile, or its files unreadable: not again
            _log.warning("changelake scheduler: compacting table %s: %s", table_id, e)
            self._writes.pop(table_id, None)
            return None
        self._writes.pop(table_id)
        return table_id

    def _env(self, pool: str) -> Env:
        """Spark and the rest (started on first use), this thread's jobs in Spark scheduler
        pool ``pool``: task runs and refreshes share the cores instead of queueing. The pool is
        a property of the thread, set when it changes (a call into the JVM: a round of NO_DATA
        refreshes makes none)."""
        env = self._connect()
        if getattr(self._pool, "set", None) != (env.spark, pool):
            env.spark.sparkContext.setLocalProperty(_POOL, pool)
            self._pool.set = (env.spark, pool)
        return env

    def _refresh_workers(self) -> ThreadPoolExecutor | None:
        """The threads that run a round's independent refreshes at once (None: one after
        another, in the round's thread), each in a Spark scheduler pool of its own; kept from
        round to round (a thread is a JVM thread too, in PySpark's pinned-thread mode)."""
        if self.settings.workers <= 1:
            return None
        if self._workers is None:
            numbers = itertools.count(1)

            def pool() -> None:
                self._env(f"refreshes-{next(numbers)}")

            self._workers = ThreadPoolExecutor(
                self.settings.workers, thread_name_prefix="changelake-refresh", initializer=pool
            )
        return self._workers

    def close(self) -> None:
        """End the threads of concurrent refreshes (after the round in progress)."""
        if self._workers is not None:
            self._workers.shutdown()
            self._workers = None

    def _refresh(
        self,
        ctx: Context,
        due: list[DynamicTableInfo],
        held: tuple[LeaseHeld, ...],
    ) -> Round:
        due_ids = {d.table_id for d in due}
        started = time.monotonic()
        done = refresh_round(
            ctx,
            due,
            data_timestamp_now(ctx),
            trigger=lambda d: "SCHEDULED" if d.table_id in due_ids else "DOWNSTREAM",
            requirements=held,
            suspend_after=self.settings.suspend_after,
            skip_suspended=True,
            workers=self._refresh_workers(),
        )
        now, took = self.clock.now(), time.monotonic() - started
        for outcome in done.refreshed:
            self._took[outcome.table_id] = took
            if outcome.record.action != RefreshAction.NO_DATA:
                self._wrote(outcome.table_id)
            self._failures.pop(outcome.table_id, None)
            self._retry_at.pop(outcome.table_id, None)
        for table_id in done.failed:
            failures = self._failures.get(table_id, 0) + 1
            self._failures[table_id] = failures
            wait = min(self.settings.backoff * 2 ** (failures - 1), self.settings.max_backoff)
            self._retry_at[table_id] = now + wait
        return done

    def due(self) -> list[DynamicTableInfo]:
        """The active dynamic tables with a target lag whose data timestamp is older than half
        of it, or than what keeps it within the lag if its round takes as long as its last one
        did (or that were never refreshed), past their backoff."""
        now, tick = self.clock.now(), self.settings.tick
        found = []
        for dyn in self.catalog.list_dynamic_tables():
            lag = dyn.definition.target_lag
            if dyn.scheduling_state != SchedulingState.ACTIVE or lag is None:
                continue
            if self._retry_at.get(dyn.table_id, 0.0) > now:
                continue
            took = self._took.get(dyn.table_id, 0.0)
            latest = min(lag / 2, lag - tick - _ROUND_MARGIN * took)
            if dyn.data_timestamp is None or now - dyn.data_timestamp >= latest:
                found.append(dyn)
        return found

    # -- running ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: renew the lease every tick (a heartbeat of its own, so a long
        refresh does not let it lapse), refresh dynamic tables and run task graphs (a thread
        each, so neither waits for the other); then give up the lease."""
        workers = [
            threading.Thread(target=self._loop, args=(stop, work), name=name, daemon=True)
            for name, work in (
                ("changelake-refreshes", self.refresh_tables),
                ("changelake-tasks", self.run_tasks),
            )
        ]
        try:
            self._loop(stop, self.renew, workers)
        finally:
            for worker in workers:
                worker.join()
            self.close()
            if self.epoch is not None:
                self.catalog.release_lease(LEASE, self.holder)

    def _loop(
        self,
        stop: threading.Event,
        work: Callable[[], object],
        workers: list[threading.Thread] | None = None,
    ) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                work()
            except ChangelakeError:
                pass  # a lost lease or a catalog hiccup: the next round tries again
            except Exception:  # noqa: BLE001 - the service goes on; the log says why
                _log.exception("changelake scheduler: %s failed; trying again", work.__name__)
            for worker in workers or ():
                if not worker.is_alive() and worker.ident is None:
                    worker.start()  # once the lease was first tried: Spark starts in them
            # a round starts a tick after the last one started (at once if that took longer):
            # a follow taking 1.2 s with FOLLOW_LAG = 1 s runs back to back, not 2.2 s apart
            stop.wait(max(0.0, self.settings.tick - (time.monotonic() - started)))


class HostedScheduler:
    """The scheduler as ``changelake serve`` hosts it: ``connect`` (which starts Spark) runs in
    the scheduler's own thread, so the service listens at once."""

    def __init__(self, connect: Callable[[], Scheduler]):
        self._connect = connect
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="changelake-scheduler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._connect().run(self._stop)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop after the refresh in progress (waiting up to ``timeout`` seconds for it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
