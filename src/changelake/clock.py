"""Time as changelake sees it; injectable so tests control retention and staleness."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to: ``advance(days=2)``."""

    def __init__(self, start: float | None = None):
        self._now = time.time() if start is None else start

    def now(self) -> float:
        return self._now

    def advance(self, *, seconds: float = 0.0, days: float = 0.0) -> None:
        self._now += seconds + days * 86400.0
