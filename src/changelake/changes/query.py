"""CHANGES (INFORMATION => ...) AT|BEFORE (...) [END (...)] and its Python form."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.catalog.model import TableInfo
from changelake.changes.plan import ChangePlan, Information, plan_changes
from changelake.changes.scan import execute_plan
from changelake.errors import InvalidStatementError

if TYPE_CHECKING:
    from changelake.session import Session

Point = int | dt.datetime | str


def plan_interval(
    session: Session, info: TableInfo, *, start: int, end: int, information: Information
) -> ChangePlan:
    """The metadata-only plan for changes of ``info`` in versions ``(start, end]``."""
    if start > end:
        raise InvalidStatementError(
            f"CHANGES on {info.name}: the start (version {start}) is after the end"
            f" (version {end}); give an end at or after the start."
        )
    touched = session.catalog.files_changed_between(
        info.table_id, start_exclusive=start, end_inclusive=end
    )
    return plan_changes(
        table_id=info.table_id,
        table_name=info.name,
        start_version=start,
        end_version=end,
        information=information,
        touched=touched,
    )


def changes_between(
    session: Session, info: TableInfo, *, start: int, end: int, information: Information
) -> DataFrame:
    plan = plan_interval(session, info, start=start, end=end, information=information)
    return execute_plan(session, plan, session.catalog.schema_at(info.table_id, end))


def interval_of_clause(
    session: Session, info: TableInfo, changes: exp.Changes
) -> tuple[int, int, Information]:
    from changelake.sql.timetravel import resolve_version

    information = Information.parse(changes.args["information"].name)
    at_before = changes.args.get("at_before")
    if at_before is None:
        raise InvalidStatementError(
            f"CHANGES on {info.name} needs a start: add AT (...) or BEFORE (...), e.g."
            " AT (VERSION => 1) or AT (OFFSET => -3600)."
        )
    start = resolve_version(session, info, at_before)
    end_clause = changes.args.get("end")
    end = resolve_version(session, info, end_clause) if end_clause is not None else None
    return start, end if end is not None else session.read_version(info), information


def changes_for_clause(session: Session, info: TableInfo, changes: exp.Changes) -> DataFrame:
    start, end, information = interval_of_clause(session, info, changes)
    return changes_between(session, info, start=start, end=end, information=information)


def _point_clause(prefix: str, point: Point) -> exp.HistoricalData:
    if isinstance(point, bool):
        raise InvalidStatementError("A change interval point is a version, datetime or statement id.")
    if isinstance(point, int):
        kind, value = "VERSION", exp.Literal.number(point)
    elif isinstance(point, dt.datetime):
        kind, value = "TIMESTAMP", exp.Literal.string(point.isoformat(sep=" "))
    elif isinstance(point, str):
        kind, value = "STATEMENT", exp.Literal.string(point)
    else:
        raise InvalidStatementError(
            f"Unsupported change interval point {point!r}: give a version (int), a datetime or a"
            " statement id (str)."
        )
    return exp.HistoricalData(this=prefix, kind=kind, expression=value)


def _clause(
    *, start: Point, end: Point | None, information: str, before: bool
) -> exp.Changes:
    return exp.Changes(
        information=exp.Var(this=information.upper()),
        at_before=_point_clause("BEFORE" if before else "AT", start),
        end=_point_clause("END", end) if end is not None else None,
    )


def changes(
    session: Session,
    name: str,
    *,
    start: Point,
    end: Point | None = None,
    information: str = "default",
    before: bool = False,
) -> DataFrame:
    """Python form of ``SELECT * FROM name CHANGES (INFORMATION => information) AT|BEFORE (start)
    [END (end)]``."""
    info = session.catalog.table(name)
    clause = _clause(start=start, end=end, information=information, before=before)
    return changes_for_clause(session, info, clause)


def change_plan(
    session: Session,
    name: str,
    *,
    start: Point,
    end: Point | None = None,
    information: str = "default",
    before: bool = False,
) -> ChangePlan:
    """The metadata-only plan of the change query :func:`changes` would run."""
    info = session.catalog.table(name)
    clause = _clause(start=start, end=end, information=information, before=before)
    first, last, kind = interval_of_clause(session, info, clause)
    return plan_interval(session, info, start=first, end=last, information=kind)
