"""The web dashboard of ``changelake serve`` at ``/``: the pipeline as a graph (Graphviz), the
warehouse's tables, streams, dynamic tables, tasks, ingest channels and external tables, and per
dynamic table its lag chart (plotly.js, served from the plotly wheel) and refresh history.

Read-only. Pages update themselves while open: a small script fetches the page's content again
every ``POLL_SECONDS`` and swaps it in. The same token rule as the API: with a token, a browser
passes it once as ``?token=`` (kept in a cookie for the session) or sends the header.

The markup is in Jinja templates (``templates/``, autoescaped); this module gives them values:
each table as a ``Grid`` of cells already formatted as text.
"""

from __future__ import annotations

import datetime as dt
import functools
import hmac
import importlib.resources
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jinja2
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from changelake.server.pipeline_graph import draw, page_url
from changelake.server.problems import HttpProblem

POLL_SECONDS = 5
COOKIE = "changelake_token"


class Dashboard(Protocol):
    def overview(self) -> dict[str, Any]: ...

    def dynamic_table(self, name: str) -> dict[str, Any]: ...

    def table(self, name: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Cell:
    """A table cell: its text, and the page it links to."""

    text: str
    href: str | None = None


@dataclass(frozen=True)
class Grid:
    """A table of a page: its header, its rows of cells, and what it says when it has none."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    empty: str = ""


@dataclass(frozen=True)
class Section:
    """A titled table of the overview."""

    title: str
    grid: Grid


_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("changelake.server", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    finalize=lambda value: "" if value is None else value,
    trim_blocks=True,
    lstrip_blocks=True,
)


def dashboard_routes(
    source: Dashboard,
    token: str | None,
    title: str,
    *,
    live: Callable[[], dict[tuple[str, str], dict[str, Any]]] = dict,
) -> APIRouter:
    """The pages; ``live`` gives the figures of the ingest channels open in this service (by
    lower-case table and channel name), which the catalog does not keep."""
    api = APIRouter(include_in_schema=False, dependencies=[Depends(_browser_auth(token))])

    @api.get("/")
    def overview(request: Request, fragment: bool = False) -> Response:
        data = source.overview()
        rates = live()
        for channel in data["channels"]:
            key = (str(channel["table_name"]).lower(), channel["name"])
            channel.update(rates.get(key, {}))
        return _page(request, "overview.html", title, _overview(data), fragment=fragment)

    @api.get("/ui/dynamic-tables/{name}")
    def dynamic_table(request: Request, name: str, fragment: bool = False) -> Response:
        values = _dynamic(source.dynamic_table(name))
        return _page(request, "dynamic_table.html", f"{name} · {title}", values, fragment=fragment)

    @api.get("/ui/tables/{name}")
    def table(request: Request, name: str, fragment: bool = False) -> Response:
        values = _table_page(source.table(name))
        return _page(request, "table.html", f"{name} · {title}", values, fragment=fragment)

    @api.get("/assets/plotly.min.js")
    def plotly() -> Response:
        return Response(
            _plotly_js(),
            media_type="text/javascript",
            headers={"Cache-Control": "max-age=86400"},
        )

    return api


def _browser_auth(token: str | None) -> Callable[[Request], Any]:
    async def check(request: Request) -> None:
        if token is None:
            return
        header = request.headers.get("authorization", "")
        given = (
            header.removeprefix("Bearer ").strip()
            if header.startswith("Bearer ")
            else request.query_params.get("token") or request.cookies.get(COOKIE, "")
        )
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HttpProblem(
                401,
                "Unauthorized",
                "This service needs its token: open the dashboard as /?token=<token> once.",
            )

    return check


@functools.cache
def _plotly_js() -> bytes:
    """plotly.js as the plotly wheel ships it (read on first use: 4 MB)."""
    return (importlib.resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()


def _page(
    request: Request, template: str, title: str, values: Mapping[str, Any], *, fragment: bool
) -> Response:
    """The page ``template`` renders, or only its content (block ``main``) for the page's polls."""
    given = request.query_params.get("token")
    if given:  # kept in a cookie; the address loses it (history, logs, the page's polls)
        kept = request.url.remove_query_params("token")
        response: Response = RedirectResponse(str(kept), status_code=303)
        secure = request.url.scheme == "https"
        response.set_cookie(COOKIE, given, httponly=True, samesite="strict", secure=secure)
        return response
    page = _TEMPLATES.get_template(template)
    context = {**values, "title": title, "poll_ms": POLL_SECONDS * 1000}
    if fragment:
        return HTMLResponse("".join(page.blocks["main"](page.new_context(context))))
    return HTMLResponse(page.render(context))


def _grid(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, empty: str = "") -> Grid:
    return Grid(columns, [[_cell(row, c) for c in columns] for row in rows], empty)


def _cell(row: dict[str, Any], column: str) -> Cell:
    value = row.get(column)
    if column == "name" and "target_lag" in row and "effective_mode" in row:
        return Cell(str(value), page_url("dynamic", str(value)))
    if column == "name" and "retention_days" in row:
        return Cell(str(value), page_url("table", str(value)))
    if column in ("lag_seconds", "lag_after") and value is not None:
        return Cell(f"{float(value):.1f} s")
    if column == "rows_per_second" and value is not None:
        return Cell(f"{float(value):.1f}")
    if column == "last_commit_at" and isinstance(value, int | float):
        return Cell(dt.datetime.fromtimestamp(value, dt.UTC).isoformat(sep=" ")[:19])
    if (column.endswith("_at") or column.endswith("timestamp")) and isinstance(value, str):
        return Cell(value[:19].replace("T", " "))  # to the second, UTC
    return Cell("" if value is None else str(value))


# The overview's sections after the graph: (title, key of the data, columns, when empty).
_SECTIONS = (
    ("Dynamic tables", "dynamic_tables",
     ("name", "target_lag", "lag_seconds", "effective_mode", "scheduling_state",
      "data_timestamp", "last_refresh_action", "last_refresh_state", "rows")),
    ("Tables", "tables", ("name", "version", "rows", "files", "retention_days", "created_at")),
    ("Streams", "streams",
     ("name", "table_name", "mode", "frontier_version", "pending_rows", "stale", "stale_after")),
    ("Tasks", "tasks",
     ("name", "state", "schedule", "predecessors", "condition", "next_scheduled_time",
      "failures")),
    ("Task runs", "task_runs",
     ("name", "run_id", "state", "run_trigger", "scheduled_time", "completed_time",
      "error_message")),
    ("Ingest channels", "channels",
     ("name", "table_name", "epoch", "offset_token", "committed_version", "updated_at",
      "rows_inserted", "rows_buffered", "rows_per_second", "last_commit_at")),
    ("External tables", "external_tables",
     ("name", "kind", "source", "scope_mode", "state", "source_position", "last_applied_at",
      "follow_lag", "error")),
)  # fmt: skip


def _overview(data: dict[str, Any]) -> dict[str, Any]:
    sections = [
        Section(title, _grid(data[key], columns, empty=f"No {title.lower()}."))
        for title, key, columns in _SECTIONS
    ]
    return {"pipeline": draw(data["nodes"], data["edges"]), "sections": sections}


def _dynamic(data: dict[str, Any]) -> dict[str, Any]:
    target = data.get("target_lag_seconds")
    lag = data.get("lag_seconds")
    history = data["history"]
    ordered = sorted((h for h in history if h.get("ended_at")), key=lambda h: str(h["ended_at"]))
    traces: list[dict[str, Any]] = [
        {
            "x": [h["ended_at"] for h in ordered],
            "y": [h["lag_after"] for h in ordered],
            "type": "scatter",
            "mode": "lines+markers",
            "name": "lag after each refresh (s)",
        }
    ]
    if target is not None and ordered:
        traces.append(
            {
                "x": [ordered[0]["ended_at"], ordered[-1]["ended_at"]],
                "y": [target, target],
                "type": "scatter",
                "mode": "lines",
                "name": "target lag",
                "line": {"dash": "dash"},
            }
        )
    figure = {
        "data": traces,
        "layout": {
            "height": 300,
            "margin": {"l": 50, "r": 20, "t": 20, "b": 40},
            "yaxis": {"title": {"text": "seconds"}, "rangemode": "tozero"},
        },
    }
    return {
        "name": data["name"],
        "late": target is not None and lag is not None and float(lag) > target,
        "summary": _grid(
            [data],
            ["name", "target_lag", "lag_seconds", "effective_mode", "mode_reason",
             "scheduling_state", "data_timestamp", "rows"],
        ),
        "lag_chart": figure,
        "refreshes": _grid(
            history,
            ["refresh_id", "action", "reason", "state", "trigger", "data_timestamp", "ended_at",
             "lag_after", "rows_inserted", "rows_updated", "rows_deleted", "error"],
            empty="No refreshes yet.",
        ),
        "query": data.get("text"),
    }  # fmt: skip


def _table_page(data: dict[str, Any]) -> dict[str, Any]:
    versions = data["versions"]
    kinds = (
        ("rows_inserted", "inserted"),
        ("rows_updated", "updated"),
        ("rows_deleted", "deleted"),
    )
    figure = {
        "data": [
            {
                "x": [v["committed_at"] for v in versions],
                "y": [v[key] for v in versions],
                "text": [f"version {v['version']}: {v['operation']}" for v in versions],
                "type": "bar",
                "name": label,
            }
            for key, label in kinds
        ],
        "layout": {
            "barmode": "stack",
            "height": 280,
            "margin": {"l": 50, "r": 20, "t": 20, "b": 40},
            "yaxis": {"title": {"text": "rows changed"}},
        },
    }
    storage = data["storage"]
    return {
        "name": data["name"],
        "summary": _grid([data], ["name", "version", "rows", "files", "retention_days",
                                  "created_at"]),
        "storage": _grid([storage], list(storage)),
        "versions_chart": figure,
        "versions": _grid(list(reversed(versions)), list(versions[0]) if versions else [],
                          empty="No versions."),
    }  # fmt: skip
