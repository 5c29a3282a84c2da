"""Offset tokens: opaque strings a producer attaches to its rows, and how two of them compare.

A channel commits tokens in batches (every flush commits the last token buffered), so waiting for
token ``t`` means waiting until the committed token is at or past ``t``. By default two tokens
compare as integers when both are integer literals (``"9" < "10"``), otherwise as strings. Pass
``token_order=`` (a function ``(a, b) -> negative | 0 | positive``, like a ``cmp`` for
``functools.cmp_to_key``) to ``open_channel`` for any other rule.
"""

from __future__ import annotations

from collections.abc import Callable

TokenOrder = Callable[[str, str], int]


def default_order(a: str, b: str) -> int:
    """Integers by value when both tokens are integer literals, else strings by code point.

    >>> default_order("9", "10"), default_order("b", "a"), default_order("7", "7")
    (-1, 1, 0)
    """
    try:
        x, y = int(a), int(b)
    except ValueError:
        return (a > b) - (a < b)
    return (x > y) - (x < y)


def covers(committed: str | None, wanted: str, order: TokenOrder) -> bool:
    """Whether a channel whose committed token is ``committed`` has committed ``wanted``."""
    return committed is not None and order(committed, wanted) >= 0
