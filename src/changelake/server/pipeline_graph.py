"""The pipeline graph of the dashboard's overview: DOT with synthetic node ids, drawn by Graphviz
into SVG. Names appear in the DOT only escaped in labels and percent-encoded in ids and links,
so no name can change the graph or the page (Graphviz escapes the labels in the SVG it writes).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

_KIND_STYLE = {
    "table": 'shape=cylinder, fillcolor="#e8f1fb"',
    "external": 'shape=cylinder, fillcolor="#fdf0e1"',
    "view": 'shape=box, style="rounded,filled", fillcolor="#eef7ee"',
    "stream": 'shape=cds, fillcolor="#f6eefb"',
    "dynamic": 'shape=box, fillcolor="#fff8d6"',
    "task": 'shape=hexagon, fillcolor="#f0f0f0"',
}
# The dashboard's page of an object, by the kind of its node (the other kinds have none).
_PAGES = {"dynamic": "dynamic-tables", "table": "tables"}


@dataclass(frozen=True)
class Pipeline:
    """The overview's graph: ``svg`` as Graphviz drew it, or ``failure`` (Graphviz's error), or
    neither when Graphviz is not installed (the page then lists ``edges``)."""

    nodes: Sequence[dict[str, Any]]
    edges: Sequence[dict[str, str]]
    svg: str | None = None
    failure: str | None = None


def page_url(kind: str, name: str) -> str | None:
    """The dashboard's page of the object ``name`` of this node kind, percent-encoded."""
    page = _PAGES.get(kind)
    return f"/ui/{page}/{quote(name, safe='')}" if page else None


def draw(nodes: Sequence[dict[str, Any]], edges: Sequence[dict[str, str]]) -> Pipeline:
    """The graph of ``nodes`` (name, kind, row) and ``edges`` (from, to: lower-case names)."""
    dot = shutil.which("dot")
    if not nodes or dot is None:
        return Pipeline(nodes, edges)
    drawn = subprocess.run(
        [dot, "-Tsvg"], input=to_dot(nodes, edges), capture_output=True, text=True, timeout=30
    )
    if drawn.returncode != 0:
        return Pipeline(nodes, edges, failure=drawn.stderr.strip())
    return Pipeline(nodes, edges, svg=drawn.stdout[drawn.stdout.find("<svg") :])


def to_dot(nodes: Sequence[dict[str, Any]], edges: Sequence[dict[str, str]]) -> str:
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
        page = page_url(node["kind"], node["name"])
        url = f', URL="{page}"' if page else ""
        lines.append(
            f'  {keys[name]} [label="{_label(node)}", {_KIND_STYLE[node["kind"]]},'
            f' id="node:{quote(name, safe="")}"{url}];'
        )
    for edge in edges:
        ids = f"edge:{quote(edge['from'], safe='')}:{quote(edge['to'], safe='')}"
        lines.append(f'  {keys[edge["from"]]} -> {keys[edge["to"]]} [id="{ids}"];')
    lines.append("}")
    return "\n".join(lines)


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
