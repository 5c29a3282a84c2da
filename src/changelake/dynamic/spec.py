"""The options of a dynamic table as a user writes them, validated."""

from __future__ import annotations

import re
from dataclasses import dataclass

from changelake.catalog.model import RefreshMode
from changelake.errors import InvalidStatementError

REFRESH_MODES = tuple(RefreshMode)
INITIALIZE = ("ON_CREATE", "ON_SCHEDULE")
_UNITS = {
    "second": 1.0,
    "seconds": 1.0,
    "minute": 60.0,
    "minutes": 60.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "day": 86400.0,
    "days": 86400.0,
}
_LAG = re.compile(r"^\s*(\d+(?:\.\d+)?)\s+([a-z]+)\s*$", re.IGNORECASE)
# Snowflake asks for at least a minute; tests and demos want seconds
MIN_LAG_SECONDS = 1.0


def target_lag(text: str, *, about: str) -> float | None:
    """Seconds of ``'<n> seconds|minutes|hours|days'``; None for DOWNSTREAM."""
    if text.upper() == "DOWNSTREAM":
        return None
    found = _LAG.match(text)
    unit = _UNITS.get(found.group(2).lower()) if found else None
    if found is None or unit is None:
        raise InvalidStatementError(
            f"{about}: TARGET_LAG = {text!r} is not a lag; write e.g. TARGET_LAG = '1 minute'"
            " ('<n> seconds | minutes | hours | days') or TARGET_LAG = DOWNSTREAM."
        )
    seconds = float(found.group(1)) * unit
    if seconds < MIN_LAG_SECONDS:
        raise InvalidStatementError(
            f"{about}: TARGET_LAG must be at least {MIN_LAG_SECONDS:g} second, got {text!r}."
        )
    return seconds


def describe_lag(seconds: float | None) -> str:
    """A target lag as SHOW DYNAMIC TABLES prints it."""
    if seconds is None:
        return "DOWNSTREAM"
    for unit, size in (("day", 86400.0), ("hour", 3600.0), ("minute", 60.0)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"


def choice(text: str, allowed: tuple[str, ...], *, option: str, about: str) -> str:
    value = text.upper()
    if value not in allowed:
        raise InvalidStatementError(
            f"{about}: {option} = {text} is not one of {', '.join(allowed)}."
        )
    return value


@dataclass(frozen=True)
class DynamicSpec:
    """CREATE DYNAMIC TABLE's options: lag (None: DOWNSTREAM), modes, table properties."""

    target_lag: float | None
    refresh_mode: str = RefreshMode.AUTO
    initialize: str = "ON_CREATE"
    properties: tuple[tuple[str, str], ...] = ()


def spec_of(options: dict[str, str], *, about: str) -> DynamicSpec:
    """The spec of the options given (upper-case names, values as written)."""
    if "TARGET_LAG" not in options:
        raise InvalidStatementError(
            f"{about}: TARGET_LAG is required: how stale it may get, e.g. TARGET_LAG ="
            " '1 minute', or TARGET_LAG = DOWNSTREAM to refresh only when a dynamic table that"
            " reads it needs it."
        )
    return DynamicSpec(
        target_lag=target_lag(options["TARGET_LAG"], about=about),
        refresh_mode=choice(
            options.get("REFRESH_MODE", RefreshMode.AUTO),
            REFRESH_MODES,
            option="REFRESH_MODE",
            about=about,
        ),
        initialize=choice(
            options.get("INITIALIZE", "ON_CREATE"), INITIALIZE, option="INITIALIZE", about=about
        ),
        properties=table_properties(options, about=about),
    )


def table_properties(options: dict[str, str], *, about: str) -> tuple[tuple[str, str], ...]:
    """The table properties among ``options``: comment and retention."""
    found = {}
    if "COMMENT" in options:
        found["comment"] = options["COMMENT"]
    for key in ("DATA_RETENTION_TIME_IN_DAYS", "MAX_DATA_EXTENSION_TIME_IN_DAYS"):
        if key in options:
            try:
                days = float(options[key])
            except ValueError:
                days = -1.0
            if days < 0:
                raise InvalidStatementError(
                    f"{about}: {key} must be a number of days >= 0, got {options[key]!r}."
                )
            found[key.lower()] = f"{days:g}"
    return tuple(sorted(found.items()))
