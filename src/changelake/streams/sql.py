"""Statements about STREAM objects: CREATE / DROP / SHOW / DESCRIBE STREAM."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from typing import TYPE_CHECKING

from sqlglot import exp

from changelake.errors import InvalidStatementError, UnsupportedError
from changelake.sql.dialect import parse_one
from changelake.sql.results import StatementResult
from changelake.streams.frontier import is_stale, pinned_stream, stale_after

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from changelake.catalog.model import StreamInfo
    from changelake.session import Session

_NAME = r"([A-Za-z_][\w$]*)"
_CREATE = re.compile(
    rf"^CREATE\s+(OR\s+REPLACE\s+)?STREAM\s+(IF\s+NOT\s+EXISTS\s+)?{_NAME}\s+ON\s+(TABLE|VIEW)\s+"
    rf"{_NAME}(.*)$",
    re.I | re.S,
)
_DROP = re.compile(rf"^DROP\s+STREAM\s+(IF\s+EXISTS\s+)?{_NAME}$", re.I)
_SHOW = re.compile(r"^SHOW\s+STREAMS$", re.I)
_DESCRIBE = re.compile(rf"^(?:DESCRIBE|DESC)\s+STREAM\s+{_NAME}$", re.I)
_OPTION = re.compile(r"\b(APPEND_ONLY|SHOW_INITIAL_ROWS)\s*=\s*(TRUE|FALSE)\b", re.I)
_COMMENT = re.compile(r"\bCOMMENT\s*=\s*'((?:[^']|'')*)'", re.I)
_POINT = re.compile(r"\b(AT|BEFORE)\s*\(", re.I)

STREAM_COLUMNS = (
    "name string, table_name string, mode string, frontier_version bigint, stale boolean,"
    " stale_after timestamp, show_initial_rows boolean, comment string, created_at timestamp"
)


def stream_command(session: Session, text: str) -> DataFrame | None:
    """Run ``text`` if it is a stream statement; None otherwise."""
    for pattern, handler in (
        (_CREATE, _create),
        (_DROP, _drop),
        (_SHOW, _show),
        (_DESCRIBE, _describe),
    ):
        found = pattern.match(text)
        if found:
            return handler(session, found)
    return None


def _point(rest: str) -> tuple[str, exp.HistoricalData | None]:
    """Split an ``AT|BEFORE (...)`` clause (balanced parentheses) off the option text."""
    found = _POINT.search(rest)
    if found is None:
        return rest, None
    depth, end = 0, None
    for i in range(found.end() - 1, len(rest)):
        depth += {"(": 1, ")": -1}.get(rest[i], 0)
        if depth == 0:
            end = i + 1
            break
    if end is None:
        raise InvalidStatementError(f"Unbalanced parentheses in {rest[found.start() :].strip()!r}.")
    clause = rest[found.start() : end]
    tree = parse_one(f"SELECT * FROM t {clause}")
    when = tree.find(exp.Table).args.get("when")  # type: ignore[union-attr]
    return rest[: found.start()] + rest[end:], when


def _create(session: Session, found: re.Match[str]) -> DataFrame:
    session.require_no_transaction("CREATE STREAM")
    replace, if_not_exists, name, kind, table_name, rest = found.groups()
    if replace and if_not_exists:
        raise InvalidStatementError(
            f"CREATE OR REPLACE STREAM IF NOT EXISTS {name}: OR REPLACE and IF NOT EXISTS exclude"
            " each other; use one."
        )
    if kind.upper() == "VIEW":
        raise UnsupportedError(
            f"Streams on views are not supported yet; create {name} ON TABLE of a base table."
        )
    info = session.catalog.table(table_name)
    # The comment goes first: its text may look like an option or an AT (...) clause.
    comment_match = _COMMENT.search(rest)
    comment = comment_match.group(1).replace("''", "'") if comment_match else ""
    if comment_match:
        rest = rest[: comment_match.start()] + " " + rest[comment_match.end() :]
    rest, point = _point(rest)
    options: dict[str, bool] = {}
    for key, value in _OPTION.findall(rest):
        if key.upper() in options:
            raise InvalidStatementError(f"CREATE STREAM {name}: {key.upper()} is given twice.")
        options[key.upper()] = value.upper() == "TRUE"
    leftover = _OPTION.sub("", rest).strip()
    if leftover:
        raise InvalidStatementError(
            f"Unexpected text in CREATE STREAM {name}: {leftover!r}. Options are AT|BEFORE (...),"
            " APPEND_ONLY = TRUE|FALSE, SHOW_INITIAL_ROWS = TRUE|FALSE, COMMENT = '...'."
        )
    if point is not None:
        from changelake.sql.timetravel import resolve_version

        frontier = resolve_version(session, info, point)
    else:
        frontier = info.current_version
    stream = session.catalog.create_stream(
        name,
        table_id=info.table_id,
        frontier_version=frontier,
        append_only=options.get("APPEND_ONLY", False),
        show_initial_rows=options.get("SHOW_INITIAL_ROWS", False),
        comment=comment,
        now=session.now(),
        replace=bool(replace),
        if_not_exists=bool(if_not_exists),
    )
    return StatementResult(
        str(uuid.uuid4()),
        "CREATE STREAM",
        stream.name,
        stream.frontier_version,
        message=f"Stream {stream.name} created on {info.name} at version {stream.frontier_version}.",
    ).to_dataframe(session.spark)


def _drop(session: Session, found: re.Match[str]) -> DataFrame:
    session.require_no_transaction("DROP STREAM")
    if_exists, name = found.groups()
    dropped = session.catalog.drop_stream(name, now=session.now(), if_exists=bool(if_exists))
    message = (
        f"Stream {name.lower()} dropped." if dropped else f"Stream {name.lower()} did not exist."
    )
    return StatementResult(
        str(uuid.uuid4()), "DROP STREAM", name.lower(), message=message
    ).to_dataframe(session.spark)


def _row(session: Session, stream: StreamInfo) -> tuple:
    info = session.catalog.table_by_id(stream.table_id)
    deadline = stale_after(session, stream, info)
    return (
        stream.name,
        info.name,
        stream.mode,
        stream.frontier_version,
        is_stale(session, stream, info),
        dt.datetime.fromtimestamp(deadline) if deadline is not None else None,
        stream.show_initial_rows,
        stream.comment,
        dt.datetime.fromtimestamp(stream.created_at),
    )


def _show(session: Session, _: re.Match[str]) -> DataFrame:
    rows = [_row(session, s) for s in session.catalog.list_streams()]
    return session.spark.createDataFrame(rows, STREAM_COLUMNS)


def _describe(session: Session, found: re.Match[str]) -> DataFrame:
    stream = pinned_stream(session, found.group(1))
    return session.spark.createDataFrame([_row(session, stream)], STREAM_COLUMNS)
