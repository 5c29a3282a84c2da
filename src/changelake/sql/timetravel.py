"""AT | BEFORE | END (VERSION | TIMESTAMP | OFFSET | STATEMENT => ...) to a table version."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from sqlglot import exp

from changelake.catalog.model import TableInfo
from changelake.errors import InvalidStatementError, TimeTravelError
from changelake.sql.dialect import to_spark

if TYPE_CHECKING:
    from changelake.session import Session

KINDS = ("VERSION", "TIMESTAMP", "TS", "OFFSET", "STATEMENT", "STREAM")


def evaluate(session: Session, expression: exp.Expression) -> object:
    """The value of a constant expression: literals directly, anything else through Spark."""
    if isinstance(expression, exp.Literal):
        return expression.this if expression.is_string else _number(expression.this)
    if isinstance(expression, exp.Neg) and isinstance(expression.this, exp.Literal):
        value = _number(expression.this.this)
        return -value
    try:
        return session.spark.sql(f"SELECT {to_spark(expression)}").first()[0]
    except Exception as e:  # noqa: BLE001 - any failure here is the user's expression
        raise InvalidStatementError(
            f"Cannot evaluate {to_spark(expression)!r} as a constant: {str(e).splitlines()[0]}"
        ) from None


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def to_epoch(session: Session, expression: exp.Expression) -> float:
    value = evaluate(session, expression)
    if isinstance(value, str):
        value = session.spark.sql(
            f"SELECT CAST({exp.Literal.string(value).sql()} AS TIMESTAMP)"
        ).first()[0]
        if value is None:
            raise InvalidStatementError(
                f"{expression.sql()} is not a timestamp; write e.g. '2024-05-01 12:00:00'."
            )
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime.combine(value, dt.time()).timestamp()
    if isinstance(value, int | float):
        return float(value)
    raise InvalidStatementError(f"{expression.sql()} is not a timestamp.")


def point_description(clause: exp.HistoricalData) -> str:
    return f"{clause.this} ({clause.args['kind']} => {clause.expression.sql()})"


def resolve_version(session: Session, info: TableInfo, clause: exp.HistoricalData) -> int:
    """The version of ``info`` that ``clause`` names, checked to be readable."""
    prefix = str(clause.this).upper()
    kind = str(clause.args.get("kind") or "").upper()
    before = prefix == "BEFORE"
    value = clause.expression
    version: int | None
    if kind == "VERSION":
        number = evaluate(session, value)
        if not isinstance(number, int):
            raise InvalidStatementError(f"VERSION => expects an integer, got {value.sql()}.")
        version = number - 1 if before else number
    elif kind in ("TIMESTAMP", "TS", "OFFSET"):
        if kind == "OFFSET":
            seconds = evaluate(session, value)
            if not isinstance(seconds, int | float):
                raise InvalidStatementError(f"OFFSET => expects seconds, got {value.sql()}.")
            epoch = session.now() + float(seconds)
        else:
            epoch = to_epoch(session, value)
        version = _version_at_time(session, info, epoch, inclusive=not before, clause=clause)
    elif kind == "STATEMENT":
        statement = evaluate(session, value)
        found = session.catalog.statement_commit(str(statement))
        if found is None:
            raise TimeTravelError(
                f"Statement {statement!r} is unknown: it changed no table, or never committed."
                " Use the statement_id a write statement returned."
            )
        versions, committed_at = found
        if info.table_id in versions:
            version = versions[info.table_id] - (1 if before else 0)
        else:
            version = _version_at_time(
                session, info, committed_at, inclusive=not before, clause=clause
            )
    elif kind == "STREAM":
        from changelake.streams.frontier import stream_start_version

        if before:
            raise InvalidStatementError("A stream is a start point: write AT (STREAM => 'name').")
        return stream_start_version(session, info, str(evaluate(session, value)))
    else:
        raise InvalidStatementError(
            f"Unknown time travel kind {kind!r}; use one of {', '.join(KINDS)}."
        )
    session.check_readable(info, version)
    return version


def _version_at_time(
    session: Session, info: TableInfo, epoch: float, *, inclusive: bool, clause: exp.HistoricalData
) -> int:
    slack = 5e-7 if inclusive else -5e-7
    version = session.catalog.version_as_of(info.table_id, epoch + slack, inclusive=inclusive)
    if version is None:
        from changelake.session import format_time

        raise TimeTravelError(
            f"Table {info.name} did not exist at {point_description(clause)}: it was created at"
            f" {format_time(info.created_at)}. Choose a later point."
        )
    return min(version, session.read_version(info))
