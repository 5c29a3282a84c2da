"""How the command line prints a statement's result: a table that fits the terminal, CSV, JSON
lines or Markdown; a write statement's result as one line in a table.

Results go to stdout; notes (rows shown, rows cut) to stderr, so the output can be piped.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from changelake.values import jsonable

FORMATS = ("table", "csv", "json", "markdown")
# The columns of what a write or DDL statement returns (dml/result.py).
_STATEMENT_RESULT = (
    "statement_id",
    "operation",
    "object",
    "version",
    "rows_inserted",
    "rows_updated",
    "rows_deleted",
    "message",
)


@dataclass(frozen=True)
class Result:
    """One statement's result: column names, the rows fetched, and ``total`` when more rows
    exist than were fetched (None: ``rows`` is all of it)."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    total: int | None = None


def is_statement_result(columns: Sequence[str]) -> bool:
    return tuple(columns) == _STATEMENT_RESULT


def summary(row: Sequence[Any]) -> str:
    """A write or DDL statement's result as one line: ``UPDATE people: version 5, 1 updated``."""
    fields = dict(zip(_STATEMENT_RESULT, row, strict=True))
    parts = [] if fields["version"] is None else [f"version {fields['version']}"]
    for kind in ("inserted", "updated", "deleted"):
        if fields[f"rows_{kind}"]:
            parts.append(f"{fields[f'rows_{kind}']} {kind}")
    message = str(fields["message"] or "").rstrip(".")
    if message and (len(parts) < 2 or message != "committed"):
        parts.append(message)
    what = " ".join(str(f) for f in (fields["operation"], fields["object"]) if f)
    return f"{what}: {', '.join(parts)}"


def print_result(out: Console, err: Console, result: Result, *, fmt: str) -> None:
    """Print ``result`` in ``fmt`` (one of FORMATS) to ``out``; notes to ``err``."""
    if not result.columns:
        return
    if fmt == "table" and is_statement_result(result.columns):
        for row in result.rows:
            out.print(Text(summary(row)))
        return
    if fmt == "table":
        out.print(_table(result) if _fits(result, out.width) else _records(result))
    else:
        text = {"csv": _csv, "json": _json_lines, "markdown": _markdown}[fmt](result)
        out.file.write(text)
        out.file.flush()
    shown = len(result.rows)
    if result.total is not None:
        cut = result.total - shown
        err.print(
            Text(
                f"showing {shown} of {result.total} rows ({cut} cut); use --max-rows to see more",
                style="yellow",
            )
        )
    elif fmt == "table":
        err.print(Text(f"{shown} row{'' if shown == 1 else 's'}", style="dim"))


def _table(result: Result) -> Table:
    # Cells never wrap: a column too wide for the terminal is cut with an ellipsis.
    table = Table(show_lines=False)
    for name in result.columns:
        table.add_column(Text(name), overflow="ellipsis", no_wrap=True, min_width=1)
    for row in result.rows:
        table.add_row(*(_cell(value) for value in row))
    return table


def _fits(result: Result, width: int) -> bool:
    """Whether a table of ``result`` shows every column's name within ``width``: a column may be
    cut to its name (at least 6 characters), not below; else the rows print as records."""
    need = 1
    for i, name in enumerate(result.columns):
        cells = (4 if row[i] is None else len(_plain(row[i])) for row in result.rows)
        need += min(max([len(name), *cells]), max(len(name), 6)) + 3
    return need <= width


def _records(result: Result) -> Group:
    """Each row as a record, one line per column (psql's expanded display): what a row too wide
    for the terminal shows; long values wrap."""
    parts: list[Rule | Table] = []
    for number, row in enumerate(result.rows, start=1):
        parts.append(Rule(Text(f"record {number}"), align="left", style="dim"))
        record = Table.grid(padding=(0, 2))
        record.add_column(style="bold", no_wrap=True)
        record.add_column(overflow="fold")
        for name, value in zip(result.columns, row, strict=True):
            record.add_row(Text(name), _cell(value))
        parts.append(record)
    return Group(*parts)


def _cell(value: object) -> Text:
    # Text, not str: rich would read "[...]" inside a value as markup.
    return Text("NULL", style="dim") if value is None else Text(_plain(value))


def _plain(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def _csv(result: Result) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(result.columns)
    for row in result.rows:
        writer.writerow(["" if v is None else _plain(v) for v in row])
    return buffer.getvalue()


def _json_lines(result: Result) -> str:
    return "".join(
        json.dumps(dict(zip(result.columns, (jsonable(v) for v in row), strict=True))) + "\n"
        for row in result.rows
    )


def _markdown(result: Result) -> str:
    def cell(value: object) -> str:
        text = "NULL" if value is None else _plain(value)
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in result.columns) + " |"]
    lines.append("|" + "|".join("---" for _ in result.columns) + "|")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in result.rows]
    return "\n".join(lines) + "\n"
