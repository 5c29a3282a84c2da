"""Dynamic tables and tasks as the HTTP service offers them (``/v1/dynamic-tables``,
``/v1/tasks``): JSON-ready answers. Reads use the catalog alone; a refresh or a task run starts
Spark on first use (``connect``)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

from changelake.catalog import Catalog
from changelake.catalog.model import DynamicTableInfo, RefreshInfo, TaskInfo, TaskRun
from changelake.clock import Clock, SystemClock
from changelake.dynamic.create import alter_dynamic_table, change_dynamic_table
from changelake.dynamic.dag import dynamic_table
from changelake.dynamic.spec import describe_lag
from changelake.runtime.env import Env
from changelake.storage.warehouse import Warehouse
from changelake.tasks.define import Resume, Suspend, alter_task, task
from changelake.tasks.run import Runner, RunStatements, run_graph
from changelake.txn.context import StatementContext, new_statement_id


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


class DynamicTableService:
    """What the routes call. ``connect`` gives the service's Env (its session's Spark,
    warehouse, catalog and clock), once, when something needs Spark."""

    def __init__(self, catalog: Catalog, clock: Clock, connect: Callable[[], Env]):
        self.catalog = catalog
        self.clock = clock
        self._connect = connect
        self._env: Env | None = None
        self._lock = threading.Lock()

    def _ctx(self) -> StatementContext:
        return StatementContext(self.catalog, self.clock, None)

    def list(self) -> list[dict[str, Any]]:
        return [self._describe(d) for d in self.catalog.list_dynamic_tables()]

    def detail(self, name: str) -> dict[str, Any]:
        return self._describe(dynamic_table(self._ctx(), name))

    def history(self, name: str, limit: int) -> list[dict[str, Any]]:
        dyn = dynamic_table(self._ctx(), name)
        return [refresh_row(r) for r in self.catalog.refresh_history(dyn.table_id, limit=limit)]

    def refresh(self, name: str) -> dict[str, Any]:
        """ALTER DYNAMIC TABLE name REFRESH, now; answers its history row."""
        env = self.env()
        alter_dynamic_table(env.context(), name, "REFRESH", {})
        dyn = dynamic_table(self._ctx(), name)
        return refresh_row(self.catalog.refresh_history(dyn.table_id, limit=1)[0])

    def set_suspended(self, name: str, suspended: bool) -> dict[str, Any]:
        action = "SUSPEND" if suspended else "RESUME"
        change_dynamic_table(self._ctx(), name, action, {})
        return self.detail(name)

    def env(self) -> Env:
        """The service's Env (Spark starts on the first call)."""
        with self._lock:
            if self._env is None:
                self._env = self._connect()
            return self._env

    def _describe(self, dyn: DynamicTableInfo) -> dict[str, Any]:
        d = dyn.definition
        last = self.catalog.refresh_history(dyn.table_id, limit=1)
        lag = None if dyn.data_timestamp is None else self.clock.now() - dyn.data_timestamp
        return {
            "name": dyn.name,
            "target_lag": describe_lag(d.target_lag),
            "refresh_mode": d.refresh_mode,
            "effective_mode": d.effective_mode,
            "mode_reason": d.mode_reason,
            "scheduling_state": dyn.scheduling_state,
            "suspended_reason": dyn.suspended_reason or None,
            "data_timestamp": _iso(dyn.data_timestamp),
            "lag_seconds": None if lag is None else max(0.0, lag),
            "version": dyn.info.current_version,
            "last_refresh": refresh_row(last[0]) if last else None,
            "text": d.sql,
        }


def refresh_row(r: RefreshInfo) -> dict[str, Any]:
    x = r.record
    return {
        "refresh_id": r.refresh_id,
        "action": x.action,
        "reason": x.reason or None,
        "state": x.state,
        "trigger": x.trigger,
        "data_timestamp": _iso(x.data_timestamp),
        "started_at": _iso(x.started_at),
        "ended_at": _iso(r.ended_at),
        "rows_inserted": x.rows_inserted,
        "rows_deleted": x.rows_deleted,
        "rows_updated": x.rows_updated,
        "spark_jobs": x.spark_jobs,
        "error": x.error or None,
        "version": r.version,
    }


def service_for(
    warehouse: str, catalog: str | None, connect: Callable[[], Env]
) -> DynamicTableService:
    """The service of the warehouse at ``warehouse`` (catalog URL ``catalog``, default its
    SQLite file), with its own catalog connection for reads."""
    url = Warehouse.at(warehouse).catalog_url(catalog)
    return DynamicTableService(Catalog(url), SystemClock(), connect)


class TaskService:
    """What the ``/v1/tasks`` routes call; shares the dynamic tables' Env; a task's statements
    run by ``run_statements`` (the SQL layer's)."""

    def __init__(self, tables: DynamicTableService, run_statements: RunStatements):
        self.catalog, self.clock, self._tables = tables.catalog, tables.clock, tables
        self._run_statements = run_statements

    def _ctx(self) -> StatementContext:
        return StatementContext(self.catalog, self.clock, None)

    def list(self) -> list[dict[str, Any]]:
        tasks = self.catalog.list_tasks()
        names = {t.task_id: t.name for t in tasks}
        return [_task(t, names) for t in tasks]

    def detail(self, name: str) -> dict[str, Any]:
        found = task(self._ctx(), name)
        names = {t.task_id: t.name for t in self.catalog.list_tasks()}
        return _task(found, names)

    def history(self, name: str, limit: int) -> list[dict[str, Any]]:
        found = task(self._ctx(), name)
        return [
            _run(r, found.name) for r in self.catalog.task_runs(task_id=found.task_id, limit=limit)
        ]

    def execute(self, name: str) -> list[dict[str, Any]]:
        """EXECUTE TASK name, now: the graph run's rows, in the order they ran."""
        env = self._tables.env()
        ctx = env.context()
        found = task(ctx, name)
        holder = f"service:{new_statement_id()[:8]}"
        done = run_graph(
            Runner(ctx, env, self._run_statements, holder, "MANUAL"), found, scheduled_at=ctx.now()
        )
        names = {t.task_id: t.name for t in self.catalog.list_tasks()}
        runs = self.catalog.task_runs(graph_run_id=done.graph_run_id)
        return [_run(x, names.get(x.task_id, "")) for x in reversed(runs)]

    def set_suspended(self, name: str, suspended: bool) -> dict[str, Any]:
        alter_task(self._ctx(), name, Suspend() if suspended else Resume())
        return self.detail(name)


def _task(t: TaskInfo, names: dict[int, str]) -> dict[str, Any]:
    d = t.definition
    return {
        "name": t.name,
        "state": t.state,
        "schedule": d.schedule,
        "predecessors": [names.get(i) for i in d.after],
        "condition": d.condition,
        "definition": d.sql,
        "next_scheduled_time": _iso(t.next_at),
        "failures": t.failures,
        "suspended_reason": t.suspended_reason or None,
        "options": {
            "suspend_task_after_num_failures": d.options.suspend_after_failures,
            "task_auto_retry_attempts": d.options.auto_retry_attempts,
            "allow_overlapping_execution": d.options.allow_overlapping,
            "user_task_timeout_ms": d.options.timeout_ms,
            "user_task_minimum_trigger_interval_in_seconds": d.options.min_trigger_interval,
            "comment": d.options.comment,
        },
    }


def _run(r: TaskRun, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "run_id": r.run_id,
        "graph_run_id": r.graph_run_id,
        "attempt": r.attempt,
        "state": r.state,
        "trigger": r.trigger,
        "reason": r.reason or None,
        "scheduled_at": _iso(r.scheduled_at),
        "started_at": _iso(r.started_at),
        "completed_at": _iso(r.completed_at),
        "statement_id": r.statement_id,
        "error": r.error or None,
        "spark_jobs": r.spark_jobs,
    }
