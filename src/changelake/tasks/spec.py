"""A task's schedule, options and WHEN condition as a user writes them, validated; and the
condition evaluated from catalog metadata (no Spark job)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter
from sqlglot import exp

from changelake.catalog.model import TaskOptions
from changelake.dialect import parse_one
from changelake.errors import InvalidStatementError, SqlSyntaxError
from changelake.plan.streams import has_data
from changelake.txn.context import StatementContext

_UNITS = {"S": 1.0, "SECOND": 1.0, "M": 60.0, "MINUTE": 60.0, "H": 3600.0, "HOUR": 3600.0}
_EVERY = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$", re.IGNORECASE)
_CRON = re.compile(r"^\s*USING\s+CRON\s+(.+?)\s+(\S+)\s*$", re.IGNORECASE)
_EXAMPLES = "SCHEDULE = '5 MINUTE' (SECOND | MINUTE | HOUR) or 'USING CRON 0 9 * * MON-FRI UTC'"


@dataclass(frozen=True)
class Schedule:
    """When a root task runs: every ``every`` seconds, or at a cron expression's times in a
    time zone."""

    text: str
    every: float | None = None
    cron: str | None = None
    zone: str | None = None

    def next_after(self, t: float) -> float:
        """The first scheduled time after ``t`` (epoch seconds)."""
        if self.every is not None:
            return t + self.every
        assert self.cron is not None and self.zone is not None
        start = dt.datetime.fromtimestamp(t, ZoneInfo(self.zone))
        return float(croniter(self.cron, start).get_next(float))


def schedule(text: str, *, about: str) -> Schedule:
    """The schedule written ``text``."""
    every = _EVERY.match(text)
    unit = every.group(2).upper() if every else ""
    unit = unit[:-1] if unit.endswith("S") and unit[:-1] in _UNITS and len(unit) > 2 else unit
    if every and unit in _UNITS:
        seconds = int(every.group(1)) * _UNITS[unit]
        if seconds < 1:
            raise InvalidStatementError(f"{about}: SCHEDULE must be at least 1 second.")
        return Schedule(text, every=seconds)
    cron = _CRON.match(text)
    if cron is None:
        raise InvalidStatementError(
            f"{about}: SCHEDULE = {text!r} is not a schedule; write {_EXAMPLES}."
        )
    expression, zone = cron.group(1), cron.group(2)
    if not croniter.is_valid(expression):
        raise InvalidStatementError(
            f"{about}: {expression!r} is not a cron expression (minute hour day-of-month month"
            " day-of-week, e.g. '0 9 * * MON-FRI')."
        )
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidStatementError(
            f"{about}: {zone!r} is not a time zone; end the cron schedule with one, e.g. UTC or"
            " Europe/Berlin."
        ) from None
    found = Schedule(text, cron=expression, zone=zone)
    try:
        found.next_after(dt.datetime.now(dt.UTC).timestamp())
    except (CroniterBadDateError, CroniterBadCronError, ValueError):
        raise InvalidStatementError(
            f"{about}: the cron expression {expression!r} never matches a date; check its day"
            " and month fields."
        ) from None
    return found


# option -> (field of TaskOptions, how its value is read)
_OPTIONS = {
    "SUSPEND_TASK_AFTER_NUM_FAILURES": ("suspend_after_failures", "count"),
    "TASK_AUTO_RETRY_ATTEMPTS": ("auto_retry_attempts", "count"),
    "ALLOW_OVERLAPPING_EXECUTION": ("allow_overlapping", "bool"),
    "USER_TASK_TIMEOUT_MS": ("timeout_ms", "positive"),
    "USER_TASK_MINIMUM_TRIGGER_INTERVAL_IN_SECONDS": ("min_trigger_interval", "positive"),
    "COMMENT": ("comment", "text"),
}
IGNORED = ("WAREHOUSE", "USER_TASK_MANAGED_INITIAL_WAREHOUSE_SIZE")


def options(
    written: Mapping[str, str], *, about: str, base: TaskOptions | None = None
) -> TaskOptions:
    """``base`` (default: the defaults) with the options ``written`` (SCHEDULE aside)."""
    found = base or TaskOptions()
    for name, value in written.items():
        if name == "SCHEDULE" or name in IGNORED:
            continue
        field, kind = _OPTIONS[name]
        found = replace(found, **{field: _value(name, value, kind, about)})
    return found


def default_of(name: str) -> object:
    """The default value of option ``name`` (ALTER TASK ... UNSET)."""
    field = _OPTIONS[name][0]
    return next(f.default for f in fields(TaskOptions) if f.name == field)


def field_of(name: str) -> str:
    return _OPTIONS[name][0]


def _value(name: str, value: str, kind: str, about: str) -> object:
    if kind == "text":
        return value
    if kind == "bool":
        if value.upper() not in ("TRUE", "FALSE"):
            raise InvalidStatementError(f"{about}: {name} is TRUE or FALSE, not {value!r}.")
        return value.upper() == "TRUE"
    if not value.isdigit() or (kind == "positive" and int(value) == 0):
        least = "a positive" if kind == "positive" else "a non-negative"
        raise InvalidStatementError(f"{about}: {name} is {least} whole number, not {value!r}.")
    return int(value)


# -- WHEN -----------------------------------------------------------------------------------------

_HAS_DATA = "SYSTEM$STREAM_HAS_DATA"


def condition(text: str, *, about: str) -> exp.Expression:
    """The WHEN condition ``text``: SYSTEM$STREAM_HAS_DATA('stream') calls combined with AND, OR
    and NOT (what Snowflake allows), checked."""
    try:
        tree = parse_one(f"SELECT {text}")
    except SqlSyntaxError as e:
        raise InvalidStatementError(f"{about}: WHEN {text}: {e}") from None
    clauses = {k for k, v in tree.args.items() if v} - {"expressions"}
    if not isinstance(tree, exp.Select) or clauses or len(tree.expressions) != 1:
        raise InvalidStatementError(
            f"{about}: WHEN takes one condition over {_HAS_DATA}('<stream>'), not {text!r}."
        )
    found = tree.expressions[0]
    for node in found.walk():
        if isinstance(node, exp.And | exp.Or | exp.Not | exp.Paren | exp.Boolean):
            continue
        if _stream_of(node) is not None:
            continue
        if isinstance(node, exp.Literal) and _stream_of(node.parent) is not None:
            continue
        raise InvalidStatementError(
            f"{about}: WHEN allows {_HAS_DATA}('<stream>') combined with AND, OR and NOT;"
            f" {node.sql()!r} is not one of them."
        )
    return found


def streams_of(tree: exp.Expression) -> list[str]:
    """The streams a WHEN condition asks about."""
    return [s for node in tree.walk() if (s := _stream_of(node)) is not None]


def _stream_of(node: exp.Expression) -> str | None:
    if not (isinstance(node, exp.Anonymous) and node.name.upper() == _HAS_DATA):
        return None
    args = node.expressions
    if len(args) != 1 or not (isinstance(args[0], exp.Literal) and args[0].is_string):
        raise InvalidStatementError(
            f"{_HAS_DATA} takes one stream name in quotes: {_HAS_DATA}('s')."
        )
    return args[0].name


def holds(ctx: StatementContext, tree: exp.Expression) -> bool:
    """Whether the condition holds now (catalog metadata only)."""
    if isinstance(tree, exp.And):
        return holds(ctx, tree.this) and holds(ctx, tree.expression)
    if isinstance(tree, exp.Or):
        return holds(ctx, tree.this) or holds(ctx, tree.expression)
    if isinstance(tree, exp.Not):
        return not holds(ctx, tree.this)
    if isinstance(tree, exp.Paren):
        return holds(ctx, tree.this)
    if isinstance(tree, exp.Boolean):
        return bool(tree.this)
    stream = _stream_of(tree)
    assert stream is not None
    return has_data(ctx, stream)
