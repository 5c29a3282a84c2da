"""What the web dashboard of ``changelake serve`` shows (``server/dashboard.py`` renders it): the
warehouse's objects as its SHOW statements list them, the pipeline as a graph (sources -> views
-> dynamic tables -> tasks, streams and external tables), and a dynamic table's refreshes.

Read-only: SHOW statements and the catalog; no statement changes anything.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sqlglot import exp

from changelake.dialect import parse_one
from changelake.dynamic.dag import dynamic_table
from changelake.dynamic.spec import describe_lag
from changelake.errors import ChangelakeError
from changelake.runtime.env import Env
from changelake.scheduling.service import refresh_row
from changelake.sql import tasks
from changelake.sql.execute import execute
from changelake.txn.context import StatementContext
from changelake.txn.transaction import TransactionSlot
from changelake.values import jsonable

SECTIONS = {
    "tables": "SHOW TABLES",
    "views": "SHOW VIEWS",
    "streams": "SHOW STREAMS",
    "dynamic_tables": "SHOW DYNAMIC TABLES",
    "tasks": "SHOW TASKS",
    "channels": "SHOW CHANNELS",
    "external_tables": "SHOW EXTERNAL TABLES",
}
HISTORY_ROWS = 200
TASK_RUNS = 20


class DashboardData:
    """The dashboard's figures, from the service's session (``env``)."""

    def __init__(self, env: Callable[[], Env]):
        self._env = env

    def _show(self, statement: str) -> list[dict[str, Any]]:
        df = execute(self._env(), statement, transactions=TransactionSlot())
        return [{k: jsonable(v) for k, v in row.asDict().items()} for row in df.collect()]

    def overview(self) -> dict[str, Any]:
        """Every section's rows, and the pipeline's nodes and edges."""
        found = {name: self._show(statement) for name, statement in SECTIONS.items()}
        dynamic = {d["name"] for d in found["dynamic_tables"]}
        found["tables"] = [t for t in found["tables"] if t["name"] not in dynamic]
        ctx = self._env().context()
        for stream in found["streams"]:
            stream["pending_rows"] = _pending(ctx, stream)
        names = tasks.HISTORY_COLUMNS.split(", ")
        found["task_runs"] = [
            {column.split()[0]: jsonable(v) for column, v in zip(names, row, strict=True)}
            for row in tasks.history_rows(ctx, None, TASK_RUNS)
        ]
        found["nodes"], found["edges"] = _graph(found)
        found["now"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        return found

    def table(self, name: str) -> dict[str, Any]:
        """A table's row of SHOW TABLES, its versions (oldest first) and its storage now: data
        files and deletion-vector files (which hold the before-images) with their bytes."""
        r = self._env()
        ctx = r.context()
        info = ctx.table(name)
        (shown,) = [t for t in self._show("SHOW TABLES") if t["name"] == info.name]
        state = ctx.state(info)
        dvs = sorted({dv for f in state.files for dv in f.dv_paths})
        dv_bytes = sum(
            i.size or 0 for i in r.warehouse.fs.get_file_info([r.warehouse.fs_path(p) for p in dvs])
        )
        versions = [
            {
                "version": v.version,
                "committed_at": _iso(v.committed_at),
                "operation": v.operation,
                "rows_inserted": v.rows_inserted,
                "rows_updated": v.rows_updated,
                "rows_deleted": v.rows_deleted,
                "files_added": v.files_added,
                "files_removed": v.files_removed,
            }
            for v in r.catalog.versions(info.table_id)
        ]
        storage = {
            "data_files": len(state.files),
            "data_bytes": sum(f.file.size_bytes for f in state.files),
            "live_rows": state.live_rows,
            "deleted_rows": sum(f.deleted_rows for f in state.files),
            "dv_files": len(dvs),
            "dv_bytes": dv_bytes,
            "before_images": info.before_images(),
        }
        return {**shown, "versions": versions, "storage": storage}

    def dynamic_table(self, name: str) -> dict[str, Any]:
        """A dynamic table's row of SHOW DYNAMIC TABLES, its target lag in seconds, and its
        refreshes (newest first) with the lag before and after each."""
        r = self._env()
        dyn = dynamic_table(r.context(), name)
        (shown,) = [d for d in self._show("SHOW DYNAMIC TABLES") if d["name"] == dyn.name]
        refreshes = r.catalog.refresh_history(dyn.table_id, limit=HISTORY_ROWS)
        history = [
            {
                **refresh_row(x),
                "lag_after": None
                if x.record.data_timestamp is None
                else max(0.0, x.ended_at - x.record.data_timestamp),
            }
            for x in refreshes
        ]
        target = dyn.definition.target_lag
        return {
            **shown,
            "target_lag_seconds": target,
            "target_lag": describe_lag(target),
            "history": history,
        }


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


def _pending(ctx: StatementContext, stream: dict[str, Any]) -> int | None:
    """Rows the versions after a table stream's frontier inserted, updated or deleted (an upper
    bound of its pending changes: a row changed twice counts twice); None for a stream on a
    view."""
    if stream.get("source_type") != "TABLE" or stream.get("frontier_version") is None:
        return None
    info = ctx.table(stream["table_name"])
    after = ctx.catalog.versions(info.table_id, after_exclusive=int(stream["frontier_version"]))
    return sum(v.rows_inserted + v.rows_updated + v.rows_deleted for v in after)


def _tree(text: str | None) -> exp.Expression | None:
    if not text:
        return None
    try:
        return parse_one(text)
    except ChangelakeError:
        return None


def _writes(text: str | None) -> str | None:
    """The lower-case name of the table a write statement's text writes."""
    tree = _tree(text)
    written = (
        tree.this if isinstance(tree, exp.Insert | exp.Update | exp.Delete | exp.Merge) else None
    )
    if isinstance(written, exp.Schema):
        written = written.this
    return written.name.lower() if isinstance(written, exp.Table) else None


def _reads(text: str | None) -> list[str]:
    """The lower-case names a statement's text reads (tables, views, streams)."""
    tree = _tree(text)
    if tree is None:
        return []
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names = {t.name.lower() for t in tree.find_all(exp.Table) if t.name}
    return sorted(names - ctes - {_writes(text)})


def _graph(found: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Nodes (name, kind, label details) and edges (from, to) of the pipeline: what each view,
    stream, dynamic table and task reads, and the table a task writes."""
    nodes: dict[str, dict[str, Any]] = {}
    for kind, rows in (
        ("table", found["tables"]),
        ("external", found["external_tables"]),
        ("view", found["views"]),
        ("stream", found["streams"]),
        ("dynamic", found["dynamic_tables"]),
        ("task", found["tasks"]),
    ):
        for row in rows:
            nodes[row["name"].lower()] = {"name": row["name"], "kind": kind, "row": row}
    edges: list[dict[str, str]] = []

    def link(source: str, target: str | None) -> None:
        if source in nodes and target in nodes and {"from": source, "to": target} not in edges:
            edges.append({"from": source, "to": target})

    for view in found["views"]:
        for name in _reads(view["text"]):
            link(name, view["name"].lower())
    for stream in found["streams"]:
        for name in str(stream.get("base_tables") or stream["table_name"] or "").split(","):
            link(name.strip().lower(), stream["name"].lower())
    for dyn in found["dynamic_tables"]:
        for name in _reads(dyn["text"]):
            link(name, dyn["name"].lower())
    for task in found["tasks"]:
        for name in _reads(task["definition"]) + _reads(task.get("condition")):
            link(name, task["name"].lower())
        for name in str(task.get("predecessors") or "").split(","):
            link(name.strip().lower(), task["name"].lower())
        link(task["name"].lower(), _writes(task["definition"]))
    return list(nodes.values()), edges
