"""The minimum delta between two states of a table, computed in plain Python: the oracle that
change queries over an interval are compared with."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping


def minimum_delta(start: Mapping[Hashable, tuple], end: Mapping[Hashable, tuple]) -> Counter:
    """From rows by identity at the start to rows by identity at the end: (values..., action,
    isupdate, identity) rows. An identity whose row is the same at both ends is no change,
    whatever happened between; one present at both ends with other values is an update pair."""
    out: Counter = Counter()
    for identity in start.keys() | end.keys():
        old, new = start.get(identity), end.get(identity)
        if old == new:
            continue
        if old is not None:
            out[(*old, "DELETE", new is not None, identity)] += 1
        if new is not None:
            out[(*new, "INSERT", old is not None, identity)] += 1
    return out
