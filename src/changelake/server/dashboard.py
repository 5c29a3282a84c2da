"""The web dashboard of ``changelake serve`` at ``/``: the pipeline as a graph (Graphviz), the
warehouse's tables, streams, dynamic tables, tasks, ingest channels and external tables, and per
dynamic table its lag chart (plotly.js, served from the plotly wheel) and refresh history.

Read-only. Pages update themselves while open: a small script fetches the page's content again
every ``POLL_SECONDS`` and swaps it in. The same token rule as the API: with a token, a browser
passes it once as ``?token=`` (kept in a cookie for the session) or sends the header.
"""

from __future__ import annotations

import datetime as dt
import functools
import hmac
import html
import importlib.resources
import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from changelake.server.problems import HttpProblem

POLL_SECONDS = 5
COOKIE = "changelake_token"
_KIND_STYLE = {
    "table": 'shape=cylinder, fillcolor="#e8f1fb"',
    "external": 'shape=cylinder, fillcolor="#fdf0e1"',
    "view": 'shape=box, style="rounded,filled", fillcolor="#eef7ee"',
    "stream": 'shape=cds, fillcolor="#f6eefb"',
    "dynamic": 'shape=box, fillcolor="#fff8d6"',
    "task": 'shape=hexagon, fillcolor="#f0f0f0"',
}


class Dashboard(Protocol):
    def overview(self) -> dict[str, Any]: ...

    def dynamic_table(self, name: str) -> dict[str, Any]: ...

    def table(self, name: str) -> dict[str, Any]: ...


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
        return _page(request, title, _overview(data), fragment)

    @api.get("/ui/dynamic-tables/{name}")
    def dynamic_table(request: Request, name: str, fragment: bool = False) -> Response:
        return _page(request, f"{name} · {title}", _dynamic(source.dynamic_table(name)), fragment)

    @api.get("/ui/tables/{name}")
    def table(request: Request, name: str, fragment: bool = False) -> Response:
        return _page(request, f"{name} · {title}", _table_page(source.table(name)), fragment)

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


def _e(value: Any) -> str:
    return "" if value is None else html.escape(str(value))


def _page(request: Request, title: str, body: str, fragment: bool) -> Response:
    given = request.query_params.get("token")
    if given:  # kept in a cookie; the address loses it (history, logs, the page's polls)
        kept = request.url.remove_query_params("token")
        response: Response = RedirectResponse(str(kept), status_code=303)
        secure = request.url.scheme == "https"
        response.set_cookie(COOKIE, given, httponly=True, samesite="strict", secure=secure)
        return response
    return HTMLResponse(body if fragment else _shell(title, body))


def _shell(title: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<script src="/assets/plotly.min.js"></script>
<style>
body {{ font-family: system-ui, sans-serif; margin: 0; color: #1d2530; background: #fafbfc; }}
header {{ background: #1d2530; color: #fff; padding: .6rem 1.2rem; }}
header a {{ color: #9cd1ff; text-decoration: none; }}
main {{ padding: .5rem 1.2rem 2rem; }}
section {{ margin: 1.2rem 0; }}
h2 {{ font-size: 1.05rem; margin: .2rem 0 .5rem; }}
table {{ border-collapse: collapse; font-size: .88rem; background: #fff; }}
th, td {{ border: 1px solid #dde2e8; padding: .25rem .55rem; text-align: left; }}
th {{ background: #eef1f5; }}
.late {{ color: #b3261e; font-weight: 600; }} .ok {{ color: #1e7b34; }}
.muted {{ color: #6b7683; }} .graph svg {{ max-width: 100%; height: auto; }}
</style></head>
<body><header><a href="/">changelake</a> · {_e(title)}
<span class="muted" id="updated"></span></header>
<main id="main">{body}</main>
<script>
function drawCharts() {{
  for (const node of document.querySelectorAll("script[data-chart]")) {{
    const figure = JSON.parse(node.textContent);
    Plotly.react(node.dataset.chart, figure.data, figure.layout, {{displayModeBar: false}});
  }}
}}
async function poll() {{
  const url = new URL(location.href);
  url.searchParams.set("fragment", "1");
  try {{
    const answer = await fetch(url, {{credentials: "same-origin"}});
    if (answer.ok) {{
      document.getElementById("main").innerHTML = await answer.text();
      document.getElementById("updated").textContent = " · updated " +
        new Date().toLocaleTimeString();
      drawCharts();
    }}
  }} catch (e) {{ document.getElementById("updated").textContent = " · service unreachable"; }}
}}
drawCharts();
setInterval(poll, {POLL_SECONDS * 1000});
</script></body></html>"""


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, empty: str) -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(row, c)}</td>" for c in columns) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column)
    if column == "name" and "target_lag" in row and "effective_mode" in row:
        return f'<a href="/ui/dynamic-tables/{quote(str(value))}">{_e(value)}</a>'
    if column == "name" and "retention_days" in row:
        return f'<a href="/ui/tables/{quote(str(value))}">{_e(value)}</a>'
    if column in ("lag_seconds", "lag_after") and value is not None:
        return f"{float(value):.1f} s"
    if column == "rows_per_second" and value is not None:
        return f"{float(value):.1f}"
    if column == "last_commit_at" and isinstance(value, int | float):
        return _e(dt.datetime.fromtimestamp(value, dt.UTC).isoformat(sep=" ")[:19])
    if (column.endswith("_at") or column.endswith("timestamp")) and isinstance(value, str):
        return _e(value[:19].replace("T", " "))  # to the second, UTC
    return _e(value)


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


def _overview(data: dict[str, Any]) -> str:
    sections = [("Pipeline", _graph_svg(data["nodes"], data["edges"]))]
    sections += [
        (title, _table(data[key], columns, empty=f"No {title.lower()}."))
        for title, key, columns in _SECTIONS
    ]
    return "".join(f"<section><h2>{_e(t)}</h2>{body}</section>" for t, body in sections)


def _dot_text(text: str) -> str:
    """``text`` inside a DOT string: backslashes and quotes escaped (names may hold both)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _label(node: dict[str, Any]) -> str:
    """A node's label as DOT string content: its name, then what it is or how it is doing."""
    row, kind = node["row"], node["kind"]
    if kind == "dynamic":
        lag = row.get("lag_seconds")
        now = "?" if lag is None else f"{float(lag):.0f} s"
        detail = f"lag {now} / target {row.get('target_lag')}"
    elif kind == "task":
        detail = str(row.get("state"))
    else:
        detail = kind
    return f"{_dot_text(node['name'])}\\n{_dot_text(detail)}"


def _dot(nodes: Sequence[dict[str, Any]], edges: Sequence[dict[str, str]]) -> str:
    """The pipeline in DOT. Nodes are n0, n1, ...; names appear only escaped in labels and
    percent-encoded in ids and links, so no name can change the graph or the page."""
    lines = [
        "digraph pipeline {",
        '  rankdir=LR; bgcolor="transparent";',
        '  node [fontname="Helvetica", fontsize=11, style=filled, color="#6b7683"];',
        '  edge [color="#8895a3"];',
    ]
    keys = {node["name"].lower(): f"n{i}" for i, node in enumerate(nodes)}
    for node in nodes:
        name = node["name"].lower()
        page = {"dynamic": "dynamic-tables", "table": "tables"}.get(node["kind"])
        url = f', URL="/ui/{page}/{quote(node["name"], safe="")}"' if page else ""
        lines.append(
            f'  {keys[name]} [label="{_label(node)}", {_KIND_STYLE[node["kind"]]},'
            f' id="node:{quote(name, safe="")}"{url}];'
        )
    for edge in edges:
        ids = f"edge:{quote(edge['from'], safe='')}:{quote(edge['to'], safe='')}"
        lines.append(f'  {keys[edge["from"]]} -> {keys[edge["to"]]} [id="{ids}"];')
    lines.append("}")
    return "\n".join(lines)


def _graph_svg(nodes: Sequence[dict[str, Any]], edges: Sequence[dict[str, str]]) -> str:
    if not nodes:
        return '<p class="muted">Nothing yet: create a table.</p>'
    dot = shutil.which("dot")
    if dot is None:
        items = "".join(f"<li>{_e(e['from'])} → {_e(e['to'])}</li>" for e in edges)
        return (
            '<p class="muted">Install Graphviz (Debian: graphviz) to draw the pipeline.</p>'
            f"<ul>{items}</ul>"
        )
    drawn = subprocess.run(
        [dot, "-Tsvg"], input=_dot(nodes, edges), capture_output=True, text=True, timeout=30
    )
    if drawn.returncode != 0:
        return f'<p class="late">Graphviz failed: {_e(drawn.stderr.strip())}</p>'
    svg = drawn.stdout[drawn.stdout.find("<svg") :]
    return f'<div class="graph" id="graph">{svg}</div>'


def _dynamic(data: dict[str, Any]) -> str:
    target = data.get("target_lag_seconds")
    lag = data.get("lag_seconds")
    late = target is not None and lag is not None and float(lag) > target
    state = (
        f'<span class="{"late" if late else "ok"}">{"behind" if late else "within"} target</span>'
    )
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

    summary = _table(
        [data],
        ["name", "target_lag", "lag_seconds", "effective_mode", "mode_reason",
         "scheduling_state", "data_timestamp", "rows"],
        empty="",
    )  # fmt: skip
    refreshes = _table(
        history,
        ["refresh_id", "action", "state", "trigger", "data_timestamp", "ended_at", "lag_after",
         "rows_inserted", "rows_updated", "rows_deleted", "error"],
        empty="No refreshes yet.",
    )  # fmt: skip
    return (
        f"<section><h2>{_e(data['name'])}: {state}</h2>{summary}</section>"
        f"<section><h2>Lag</h2>{_chart('lag-chart', figure)}</section>"
        f"<section><h2>Refresh history</h2>{refreshes}</section>"
        f"<section><h2>Query</h2><pre>{_e(data.get('text'))}</pre></section>"
    )


def _chart(element: str, figure: dict[str, Any]) -> str:
    """A plotly figure drawn into ``element`` by the page's script."""
    data = json.dumps(figure).replace("</", "<\\/")
    return (
        f'<div id="{element}"></div>'
        f'<script type="application/json" data-chart="{element}">{data}</script>'
    )


def _table_page(data: dict[str, Any]) -> str:
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
    return (
        f"<section><h2>{_e(data['name'])}</h2>"
        + _table([data], ["name", "version", "rows", "files", "retention_days", "created_at"],
                 empty="")
        + "</section><section><h2>Storage now</h2>"
        + _table([storage], list(storage), empty="")
        + f"</section><section><h2>Changes per version</h2>{_chart('versions-chart', figure)}"
        + "</section><section><h2>Versions</h2>"
        + _table(list(reversed(versions)), list(versions[0]) if versions else [],
                 empty="No versions.")
        + "</section>"
    )  # fmt: skip
