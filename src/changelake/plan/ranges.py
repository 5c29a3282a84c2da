"""Sets of values one column may hold, as sorted disjoint intervals, with or without NULL.

The values of one set are of one ordered kind (exact numbers, strings, dates); a bound of None
is unbounded. The operations are what implication needs: intersection, complement and subset.

>>> big = Allowed.compare(">", 900)
>>> Allowed.compare(">", 2000).within(big), Allowed.members((950, 1000)).within(big)
(True, True)
>>> Allowed.compare(">=", 900).within(big), Allowed.NOT_NULL.within(big)
(False, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Interval:
    """Values from ``low`` to ``high`` (None: unbounded), each end in or out."""

    low: Any
    low_inclusive: bool
    high: Any
    high_inclusive: bool

    @property
    def empty(self) -> bool:
        if self.low is None or self.high is None:
            return False
        if self.low == self.high:
            return not (self.low_inclusive and self.high_inclusive)
        return bool(self.low > self.high)

    def meet(self, other: Interval) -> Interval:
        """The values in both."""
        low, low_in = _tighter(self.low, self.low_inclusive, other.low, other.low_inclusive, 1)
        high, high_in = _tighter(
            self.high, self.high_inclusive, other.high, other.high_inclusive, -1
        )
        return Interval(low, low_in, high, high_in)

    def covers(self, other: Interval) -> bool:
        """Whether every value of ``other`` is in this interval."""
        if self.low is not None and (
            other.low is None
            or other.low < self.low
            or (other.low == self.low and other.low_inclusive and not self.low_inclusive)
        ):
            return False
        return not (
            self.high is not None
            and (
                other.high is None
                or other.high > self.high
                or (other.high == self.high and other.high_inclusive and not self.high_inclusive)
            )
        )


def _tighter(a: Any, a_in: bool, b: Any, b_in: bool, sign: int) -> tuple[Any, bool]:
    """The tighter of two lower (``sign`` 1) or upper (-1) bounds."""
    if a is None:
        return b, b_in
    if b is None:
        return a, a_in
    if a == b:
        return a, a_in and b_in
    return (a, a_in) if (a > b) == (sign > 0) else (b, b_in)


_EVERY = Interval(None, False, None, False)


@dataclass(frozen=True)
class Allowed:
    """The values a row's column may hold: ``intervals`` of non-NULL values, and NULL if
    ``null``."""

    intervals: tuple[Interval, ...]
    null: bool

    NOT_NULL: ClassVar[Allowed]
    ONLY_NULL: ClassVar[Allowed]

    def __post_init__(self) -> None:
        object.__setattr__(self, "intervals", _normalized(self.intervals))

    @staticmethod
    def compare(op: str, value: Any) -> Allowed:
        """The values ``column <op> value`` is TRUE for (never NULL)."""
        shapes = {
            "=": (Interval(value, True, value, True),),
            "<>": (Interval(None, False, value, False), Interval(value, False, None, False)),
            ">": (Interval(value, False, None, False),),
            ">=": (Interval(value, True, None, False),),
            "<": (Interval(None, False, value, False),),
            "<=": (Interval(None, False, value, True),),
        }
        return Allowed(shapes[op], null=False)

    @staticmethod
    def members(values: tuple[Any, ...]) -> Allowed:
        return Allowed(tuple(Interval(v, True, v, True) for v in values), null=False)

    @property
    def empty(self) -> bool:
        return not self.intervals and not self.null

    def meet(self, other: Allowed) -> Allowed:
        found = tuple(a.meet(b) for a in self.intervals for b in other.intervals)
        return Allowed(found, null=self.null and other.null)

    def complement(self) -> Allowed:
        """The non-NULL values not allowed (what NOT of a comparison is TRUE for)."""
        gaps, low, low_in = [], None, False
        for i in self.intervals:
            if i.low is not None:
                gaps.append(Interval(low, low_in, i.low, not i.low_inclusive))
            if i.high is None:
                return Allowed(tuple(gaps), null=False)
            low, low_in = i.high, not i.high_inclusive
        gaps.append(Interval(low, low_in, None, False))
        return Allowed(tuple(gaps), null=False)

    def within(self, other: Allowed) -> bool:
        """Whether every value allowed here is allowed by ``other``."""
        if self.null and not other.null:
            return False
        return all(any(o.covers(i) for o in other.intervals) for i in self.intervals)


def _normalized(intervals: tuple[Interval, ...]) -> tuple[Interval, ...]:
    """Sorted, without empty intervals, overlapping or touching ones merged."""
    found = sorted(
        (i for i in intervals if not i.empty),
        key=lambda i: (i.low is not None, i.low if i.low is not None else 0, not i.low_inclusive),
    )
    merged: list[Interval] = []
    for i in found:
        if merged and _joins(merged[-1], i):
            last = merged[-1]
            merged[-1] = Interval(last.low, last.low_inclusive, *_higher(last, i))
        else:
            merged.append(i)
    return tuple(merged)


def _higher(a: Interval, b: Interval) -> tuple[Any, bool]:
    """The higher of two intervals' upper bounds."""
    if a.high is None or b.high is None:
        return None, False
    if a.high == b.high:
        return a.high, a.high_inclusive or b.high_inclusive
    return (a.high, a.high_inclusive) if a.high > b.high else (b.high, b.high_inclusive)


def _joins(a: Interval, b: Interval) -> bool:
    """Whether ``b`` (starting at or after ``a``) overlaps or touches ``a``."""
    if a.high is None or b.low is None:
        return True
    if b.low < a.high:
        return True
    return b.low == a.high and (a.high_inclusive or b.low_inclusive)


Allowed.NOT_NULL = Allowed((_EVERY,), null=False)
Allowed.ONLY_NULL = Allowed((), null=True)
