"""What statements bound of the catalog's definitions, kept across statements in this process.

A view's IR, a dynamic table's query, a view's text, a name that is no table: each follows from
the catalog's definitions alone (names, view texts, tables' columns), and every commit that
changes those writes a new definitions token (``Snapshot.definitions``, catalog/clock_repo.py).
So what one statement bound under a token holds for every statement that reads under the same
token, in any session of the process, whichever catalog object it went through; a token is
random, so no two catalogs (nor one catalog recreated at the same path) share one by chance.
What changes without DDL (a table's current version, its files, retention) is never kept here:
whoever keeps a binding keeps its tables' names and ids, and reads their rows again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

SIZE = 1024  # entries: a binding, a view's text, a name that is no table


class _Lru:
    """A bounded map, least recently used out first; safe to share across threads."""

    def __init__(self, size: int):
        self._size = size
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


_KEPT = _Lru(SIZE)


@dataclass(frozen=True)
class Definitions:
    """The catalog's definitions at one token: what statements bound under it (immutable
    values only, as the IR is)."""

    token: str

    def get(self, key: Hashable) -> Any | None:
        """What was kept under ``key`` (None: nothing)."""
        return _KEPT.get((self.token, key))

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` (not None) under ``key``."""
        assert value is not None
        _KEPT.put((self.token, key), value)
