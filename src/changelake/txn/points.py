"""Points in a table's history (AT | BEFORE | END (VERSION | TIMESTAMP | OFFSET | STATEMENT |
STREAM => ...)) and their resolution to a readable version."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from changelake.catalog.model import TableInfo
from changelake.errors import InvalidStatementError, TimeTravelError
from changelake.txn.context import StatementContext
from changelake.txn.retention import check_not_stale, format_time


class PointKind(Enum):
    VERSION = "VERSION"
    TIMESTAMP = "TIMESTAMP"
    OFFSET = "OFFSET"
    STATEMENT = "STATEMENT"
    STREAM = "STREAM"


class Edge(Enum):
    """AT: the state at the point; BEFORE: just before it; END: an interval's inclusive end."""

    AT = "AT"
    BEFORE = "BEFORE"
    END = "END"


@dataclass(frozen=True)
class Point:
    """A point as the user gave it: a version (int), a time (epoch seconds), an offset from now
    (seconds), a statement id or a stream name. ``text`` is the value as written, for messages."""

    kind: PointKind
    value: int | float | str
    edge: Edge = Edge.AT
    text: str = ""

    def describe(self) -> str:
        return f"{self.edge.value} ({self.kind.value} => {self.text or self.value!r})"


def resolve(ctx: StatementContext, info: TableInfo, point: Point) -> int:
    """The version of ``info`` that ``point`` names, checked to be readable."""
    before = point.edge is Edge.BEFORE
    value = point.value
    if point.kind is PointKind.VERSION:
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidStatementError(f"VERSION => expects an integer, got {point.text}.")
        version = value - 1 if before else value
    elif point.kind in (PointKind.TIMESTAMP, PointKind.OFFSET):
        epoch = _epoch(ctx, point)
        version = _version_at_time(ctx, info, epoch, inclusive=not before, point=point)
        ctx.check_readable(info, version)
        return version
    elif point.kind is PointKind.STATEMENT:
        found = ctx.catalog.statement_commit(str(value))
        if found is None:
            raise TimeTravelError(
                f"Statement {value!r} is unknown: it changed no table, or never committed."
                " Use the statement_id a write statement returned."
            )
        if before and info.table_id in found.first_versions:
            version = found.first_versions[info.table_id] - 1
        elif info.table_id in found.last_versions:
            version = found.last_versions[info.table_id]
        else:
            commit = found.first_commit - 1 if before else found.last_commit
            version = _existed(info, ctx.catalog.version_at(info.table_id, commit), point)
        ctx.check_readable(info, version)
        return version
    else:
        if before:
            raise InvalidStatementError("A stream is a start point: write AT (STREAM => 'name').")
        return stream_start_version(ctx, info, str(value))
    ctx.check_readable(info, version)
    return version


def stream_start_version(ctx: StatementContext, info: TableInfo, name: str) -> int:
    """The start of ``CHANGES ... AT (STREAM => 'name')``: the stream's frontier."""
    stream = ctx.stream(name)
    if stream.on_view:
        raise InvalidStatementError(
            f"Stream {stream.name} is on view {stream.view}, not table {info.name}."
        )
    if stream.table_id != info.table_id:
        other = ctx.catalog.table_by_id(stream.table_id)
        check_not_stale(ctx.catalog, stream, other, now=ctx.now())
        raise InvalidStatementError(
            f"Stream {stream.name} is on table {other.name}, not {info.name}."
        )
    check_not_stale(ctx.catalog, stream, info, now=ctx.now())
    return stream.frontier_version


def resolve_all(ctx: StatementContext, infos: Sequence[TableInfo], point: Point) -> dict[int, int]:
    """``resolve`` of ``point`` for each table (by id). A time point is asked of the catalog
    once for all the tables, and their retention checks once more, instead of per table."""
    if point.kind not in (PointKind.TIMESTAMP, PointKind.OFFSET) or len(infos) < 2:
        return {info.table_id: resolve(ctx, info, point) for info in infos}
    inclusive = point.edge is not Edge.BEFORE
    at = _instant(ctx, _epoch(ctx, point), inclusive=inclusive)
    found = ctx.catalog.versions_as_of([i.table_id for i in infos], at, inclusive=inclusive)
    versions = {i.table_id: _existed(i, found.get(i.table_id), point) for i in infos}
    # what check_readable asks of each older version: its successor, whose time ends it
    successors = [
        (i.table_id, versions[i.table_id] + 1)
        for i in infos
        if 0 <= versions[i.table_id] < ctx.read_version(i)
    ]
    ctx.catalog.version_infos(successors)
    for info in infos:
        ctx.check_readable(info, versions[info.table_id])
    return versions


def _epoch(ctx: StatementContext, point: Point) -> float:
    value = point.value
    if not isinstance(value, int | float) or isinstance(value, bool):
        wanted = "seconds" if point.kind is PointKind.OFFSET else "a timestamp"
        raise InvalidStatementError(f"{point.kind.value} => expects {wanted}, got {point.text}.")
    return ctx.now() + float(value) if point.kind is PointKind.OFFSET else float(value)


def _instant(ctx: StatementContext, epoch: float, *, inclusive: bool) -> float:
    """The time ``epoch`` names, compared with commit times: the same answer every time it is
    asked once ``epoch`` has passed. Commit times increase with the commit order, so the commits
    up to the statement's snapshot settle every time before its last commit; a later time waits
    for the commits in flight, which may have been stamped before it."""
    at = epoch + (5e-7 if inclusive else -5e-7)
    if at >= ctx.snapshot().committed_at:
        ctx.catalog.settled_snapshot()
    return at


def _version_at_time(
    ctx: StatementContext, info: TableInfo, epoch: float, *, inclusive: bool, point: Point
) -> int:
    """The last version committed at (or before) ``epoch``."""
    at = _instant(ctx, epoch, inclusive=inclusive)
    return _existed(info, ctx.catalog.version_as_of(info.table_id, at, inclusive=inclusive), point)


def _existed(info: TableInfo, version: int | None, point: Point) -> int:
    if version is None:
        raise TimeTravelError(
            f"Table {info.name} did not exist at {point.describe()}: it was created at"
            f" {format_time(info.created_at)}. Choose a later point."
        )
    return version


def point_from_python(value: object, edge: Edge) -> Point:
    """The point a Python value names: a version (int), a time (datetime; naive means local
    time) or a statement id (str)."""
    if isinstance(value, bool):
        raise InvalidStatementError(
            "A change interval point is a version, datetime or statement id."
        )
    if isinstance(value, int):
        return Point(PointKind.VERSION, value, edge, text=str(value))
    if isinstance(value, dt.datetime):
        return Point(PointKind.TIMESTAMP, value.timestamp(), edge, text=value.isoformat(sep=" "))
    if isinstance(value, str):
        return Point(PointKind.STATEMENT, value, edge, text=repr(value))
    raise InvalidStatementError(
        f"Unsupported change interval point {value!r}: give a version (int), a datetime or a"
        " statement id (str)."
    )
