"""Dynamic tables as the HTTP service offers them (``/v1/dynamic-tables``): JSON-ready answers.
Reads use the catalog alone; a refresh starts Spark on first use (``connect``)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

from changelake.catalog import Catalog
from changelake.catalog.model import DynamicTableInfo, RefreshInfo
from changelake.clock import Clock, SystemClock
from changelake.dynamic.create import alter_dynamic_table, change_dynamic_table
from changelake.dynamic.dag import dynamic_table
from changelake.dynamic.scheduler import Resources
from changelake.dynamic.spec import describe_lag
from changelake.storage.warehouse import Warehouse
from changelake.txn.context import StatementContext


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


class DynamicTableService:
    """What the routes call. ``connect`` gives Spark, the warehouse, a catalog and a clock (the
    service's session), once, when something needs Spark."""

    def __init__(self, catalog: Catalog, clock: Clock, connect: Callable[[], Resources]):
        self.catalog = catalog
        self.clock = clock
        self._connect = connect
        self._resources: Resources | None = None
        self._lock = threading.Lock()

    def _ctx(self) -> StatementContext:
        return StatementContext(self.catalog, self.clock, None)

    def list(self) -> list[dict[str, Any]]:
        return [self._describe(d) for d in self.catalog.list_dynamic_tables()]

    def detail(self, name: str) -> dict[str, Any]:
        return self._describe(dynamic_table(self._ctx(), name))

    def history(self, name: str, limit: int) -> list[dict[str, Any]]:
        dyn = dynamic_table(self._ctx(), name)
        return [_refresh(r) for r in self.catalog.refresh_history(dyn.table_id, limit=limit)]

    def refresh(self, name: str) -> dict[str, Any]:
        """ALTER DYNAMIC TABLE name REFRESH, now; answers its history row."""
        spark, warehouse, catalog, clock = self._spark()
        ctx = StatementContext(catalog, clock, None)
        alter_dynamic_table(ctx, spark, warehouse, name, "REFRESH", {})
        dyn = dynamic_table(self._ctx(), name)
        return _refresh(self.catalog.refresh_history(dyn.table_id, limit=1)[0])

    def set_suspended(self, name: str, suspended: bool) -> dict[str, Any]:
        action = "SUSPEND" if suspended else "RESUME"
        change_dynamic_table(self._ctx(), name, action, {})
        return self.detail(name)

    def _spark(self) -> Resources:
        with self._lock:
            if self._resources is None:
                self._resources = self._connect()
            return self._resources

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
            "last_refresh": _refresh(last[0]) if last else None,
            "text": d.sql,
        }


def _refresh(r: RefreshInfo) -> dict[str, Any]:
    x = r.record
    return {
        "refresh_id": r.refresh_id,
        "action": x.action,
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
    warehouse: str, catalog: str | None, connect: Callable[[], Resources]
) -> DynamicTableService:
    """The service of the warehouse at ``warehouse`` (catalog URL ``catalog``, default its
    SQLite file), with its own catalog connection for reads."""
    url = Warehouse.at(warehouse).catalog_url(catalog)
    return DynamicTableService(Catalog(url), SystemClock(), connect)
