"""The catalog as one statement reads it: what history says cannot change is asked once, and
what a statement needs of several tables is asked together.

A statement asks the same things of the catalog many times (a view's changes plan each base
table's interval to choose a plan, then again to read it; each leaf reads a table's state): a
table's schema and live files at a version, the files an interval of versions touched, the
versions of a closed interval, a version's record, a view's text. Once committed these never
change, so within one statement the first answer is kept. Reads of several tables at once
(``schemas_at``, ``version_infos``) keep each table's answer the same way; ``read_ahead``
announces the versions a plan will read, so that the first file read of one table reads all the
announced tables' files in one query. Everything else (current versions, streams, leases,
commits) goes to the catalog every time.

What follows from the catalog's definitions alone (a view's text, that a name is no table) is
kept across statements, under the definitions token the statement reads (``definitions``,
txn/definitions.py), until the statement changes definitions itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from changelake.catalog import Catalog
from changelake.catalog.file_history import FileHistory
from changelake.catalog.model import LiveFile, TableInfo, TrackedFile, VersionInfo
from changelake.catalog.requests import CommitRequest, CommitResult
from changelake.clock import Clock
from changelake.schema import TableSchema
from changelake.txn.definitions import Definitions

_UNKNOWN = object()


class StatementReads:
    """``catalog`` with its history reads kept for one statement; every other attribute is the
    wrapped catalog's own (looked up on it each time, so what replaces one of its methods, as
    tests' hooks do, is what runs)."""

    def __init__(self, catalog: Catalog, token: Callable[[], str | None] = lambda: None):
        self._catalog = catalog
        self._kept: dict[tuple, Any] = {}
        self._ahead: dict[int, tuple[int, int]] = {}  # announced, not read yet
        self._histories: dict[int, FileHistory] = {}
        self._token = token  # the definitions token the statement reads under, once asked
        self._definitions: Any = _UNKNOWN

    def definitions(self) -> Definitions | None:
        """What statements bound under the definitions this statement reads; None once it
        changed definitions itself (then what it binds next is read as it is now), or when
        its reads follow no one token (``token`` gave None)."""
        if self._definitions is _UNKNOWN:
            token = self._token()
            self._definitions = None if token is None else Definitions(token)
        return self._definitions

    def commit(self, requests: Sequence[CommitRequest], *, clock: Clock) -> CommitResult:
        if any(r.redefines for r in requests):
            self._definitions = None
        return self._catalog.commit(requests, clock=clock)

    def find_table(self, name: str) -> TableInfo | None:
        """The live table ``name`` (its row is read every time: versions move without DDL).
        That a name is no table is kept once the statement knows its definitions (a
        transaction's statement asks only to bind a view: asking costs a read)."""
        known = self._definitions
        definitions, key = None if known is _UNKNOWN else known, ("no table", name.lower())
        if definitions is not None and definitions.get(key):
            return None
        found = self._catalog.find_table(name)
        if found is None and definitions is not None:
            definitions.put(key, True)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)

    def _once(self, key: tuple, read: Any) -> Any:
        if key not in self._kept:
            self._kept[key] = read()
        return self._kept[key]

    def read_ahead(self, ranges: Mapping[int, tuple[int, int]]) -> None:
        """The statement will read these tables' files at versions in ``[since, until]`` (all
        committed): the first such read reads every table announced, in one query."""
        for table_id, (since, until) in ranges.items():
            known = self._histories.get(table_id)
            if known is None or not known.covers(since, until):
                pending = self._ahead.get(table_id)
                if pending is not None:
                    since, until = min(since, pending[0]), max(until, pending[1])
                self._ahead[table_id] = (since, until)

    def _history(self, table_id: int, first: int, last: int) -> FileHistory | None:
        pending = self._ahead.get(table_id)
        if pending is not None and pending[0] <= first <= last <= pending[1]:
            self._histories.update(self._catalog.file_histories(self._ahead))
            self._ahead = {}
        found = self._histories.get(table_id)
        return found if found is not None and found.covers(first, last) else None

    def schema_at(self, table_id: int, version: int) -> TableSchema:
        key = ("schema_at", table_id, version)
        return self._once(key, lambda: self._catalog.schema_at(table_id, version))

    def schemas_at(self, wanted: Mapping[int, int]) -> dict[int, TableSchema]:
        """``schema_at`` of each table at its version, those not kept yet read in one query."""
        missing = {t: v for t, v in wanted.items() if ("schema_at", t, v) not in self._kept}
        for table_id, schema in self._catalog.schemas_at(missing).items():
            self._kept[("schema_at", table_id, missing[table_id])] = schema
        return {t: self._kept[("schema_at", t, v)] for t, v in wanted.items()}

    def rows_changed(self, intervals: Sequence[tuple[int, int, int]]) -> int:
        """The catalog's ``rows_changed``, asked once per statement for the same intervals (a
        refresh asks to choose its action, then to size its lookup)."""
        key = ("rows_changed", *sorted(intervals))
        return int(self._once(key, lambda: self._catalog.rows_changed(intervals)))

    def snapshot_files(self, table_id: int, version: int) -> list[LiveFile]:
        history = self._history(table_id, version, version)
        if history is not None:
            return history.live_at(version)
        key = ("snapshot_files", table_id, version)
        return list(self._once(key, lambda: self._catalog.snapshot_files(table_id, version)))

    def files_changed_between(
        self, table_id: int, *, start_exclusive: int, end_inclusive: int
    ) -> list[TrackedFile]:
        history = self._history(table_id, start_exclusive, end_inclusive)
        if history is not None:
            return history.changed_between(
                start_exclusive=start_exclusive, end_inclusive=end_inclusive
            )
        key = ("files_changed_between", table_id, start_exclusive, end_inclusive)
        return list(
            self._once(
                key,
                lambda: self._catalog.files_changed_between(
                    table_id, start_exclusive=start_exclusive, end_inclusive=end_inclusive
                ),
            )
        )

    def versions(
        self, table_id: int, *, after_exclusive: int = -1, upto_inclusive: int | None = None
    ) -> list[VersionInfo]:
        def read() -> list[VersionInfo]:
            return self._catalog.versions(
                table_id, after_exclusive=after_exclusive, upto_inclusive=upto_inclusive
            )

        if upto_inclusive is None:  # up to the latest: not history yet
            return read()
        return list(self._once(("versions", table_id, after_exclusive, upto_inclusive), read))

    def version_info(self, table_id: int, version: int) -> VersionInfo | None:
        key = ("version_info", table_id, version)
        if key not in self._kept:
            found = self._catalog.version_info(table_id, version)
            if found is None:  # not yet: it may be committed later in the statement
                return None
            self._kept[key] = found
        return self._kept[key]

    def version_infos(
        self, wanted: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], VersionInfo]:
        """The versions ``wanted`` that exist, those not kept yet read in one query."""
        missing = [w for w in wanted if ("version_info", *w) not in self._kept]
        for w, found in self._catalog.version_infos(missing).items():
            self._kept[("version_info", *w)] = found
        kept = ((w, self._kept.get(("version_info", *w))) for w in wanted)
        return {w: found for w, found in kept if found is not None}

    def keep_schemas(self, known: Mapping[tuple[int, int], TableSchema]) -> None:
        """``schema_at`` of (table, version) as the caller knows it already (a binding kept
        under this statement's definitions holds its tables' columns)."""
        for (table_id, version), schema in known.items():
            self._kept.setdefault(("schema_at", table_id, version), schema)

    def view_sql(self, name: str) -> str | None:
        definitions, key = self.definitions(), ("view_sql", name.lower())
        if definitions is not None:
            kept = definitions.get(key)
            if kept is None:
                kept = (self._catalog.view_sql(name),)
                definitions.put(key, kept)
            return kept[0]
        found = self._once(key, lambda: self._catalog.view_sql(name))
        if found is None:
            del self._kept[key]  # a view created later in the statement
        return found
