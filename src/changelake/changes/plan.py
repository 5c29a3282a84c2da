"""Planning a change scan of one base table from catalog metadata alone (paper 3.2.3, table 3).

The interval is ``(start_version, end_version]``: the changes committed after the start state,
up to and including the end version. Only files the interval touched are considered:

* *before* rows (may have left the table): rows at positions deleted in the interval, and the
  rows of files removed in the interval;
* *after* rows (may have entered it): rows of files added in the interval.

DEFAULT matches the two sides by row identity; REDO does the same per version; APPEND_ONLY reads
rows first inserted in the interval. The shape says which sides exist, before any data is read.

A compaction (a COMPACT write: OPTIMIZE, an ingest client's) changes no row: it copies the live
rows of the files it removes into the files it adds, each keeping its identity and the version
that last wrote it (``VER``). Change scans see through it: a file it removed is no removal (its
deletes before the compaction still count), and of a file it added a side takes only the rows
on its side of the interval's start (``Born``): the after side those written after it, the
before side (the file's later deletes and its removal) those written up to it. The catalog's
statistics of the version column tell which sides a compacted file can hold rows for, so an
interval that only compacted reads nothing.

A deletion vector made in the version that added its file (a bootstrap's superseded snapshot
rows) deletes rows the table never showed: no side reads it as a change (``_later_dvs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from changelake.catalog.model import DataFile, TrackedFile
from changelake.errors import member_named
from changelake.schema import ROW_VERSION


class Information(Enum):
    DEFAULT = "DEFAULT"
    APPEND_ONLY = "APPEND_ONLY"
    REDO = "REDO"

    @staticmethod
    def parse(text: str) -> Information:
        return member_named(Information, text, "CHANGES information")


# MINIMIZE reading at most this many rows (both sides) pairs them in one task (``Pairing``):
# measured in one process, one task took 12% less time than a shuffle for 100,000 rows and
# the same for 400,000 (2 cores).
ONE_TASK_ROWS = 250_000


class Pairing(Enum):
    """How MINIMIZE brings the rows of one identity on its two sides together.

    ``ONE_TASK``: both sides are read by one task (coalesced, no exchange) and joined by a hash
    of the before side: no shuffle, no sort. ``SHUFFLE``: both sides are shuffled by identity,
    in parallel. A changelog in ROW_ID order is partitioned by ``scan.RowOrder`` either way.
    """

    ONE_TASK = "in one task, without a shuffle"
    SHUFFLE = "by a shuffle"


class Shape(Enum):
    EMPTY = "EMPTY"  # nothing committed in the interval touched rows
    ADDED_ONLY = "ADDED_ONLY"
    REMOVED_ONLY = "REMOVED_ONLY"
    MINIMIZE = "MINIMIZE"
    INITIAL_ROWS = "INITIAL_ROWS"


@dataclass(frozen=True)
class Born:
    """The rows of a file a side takes by the version that last wrote each: after ``after``
    and up to ``by`` (None: no bound). Only a compaction's file holds rows of other versions
    than its own."""

    after: int | None = None
    by: int | None = None

    @property
    def bounded(self) -> bool:
        return self.after is not None or self.by is not None


ANY_ROW = Born()


@dataclass(frozen=True)
class FileRows:
    """All rows of ``files`` minus the positions their deletion vectors in ``minus_dvs``
    ((DV path, data file path) pairs) record; row tag per file.

    Pairs, not DV paths: one DV file can hold positions of several data files, including
    files its statement removed outright, and those positions must not apply to them.
    """

    files: tuple[DataFile, ...]
    minus_dvs: tuple[tuple[str, str], ...]
    tags: tuple[int, ...]  # one per file: the version the rows belong to
    rows: int  # live rows, from metadata (the most, where ``born`` bounds them)
    inserted_only: bool = False  # only rows first inserted here, not copies (updates, compaction)
    born: tuple[Born, ...] = ()  # one per file, which of its rows (none: ANY_ROW for every file)

    def file_born(self) -> tuple[Born, ...]:
        return self.born or (ANY_ROW,) * len(self.files)

    @property
    def empty(self) -> bool:
        return not self.files


@dataclass(frozen=True)
class DeletedRows:
    """Rows of ``files`` at the positions that ``dvs`` (version, DV path, data file path) record
    for that data file; tagged by version."""

    files: tuple[DataFile, ...]
    dvs: tuple[tuple[int, str, str], ...]
    rows: int
    born_by: int | None = None  # only rows last written up to it (a compaction moved some)

    @property
    def empty(self) -> bool:
        return not self.dvs


@dataclass(frozen=True)
class ChangePlan:
    """What a change scan reads, decided from metadata."""

    table_id: int
    table_name: str
    start_version: int
    end_version: int
    information: Information
    shape: Shape
    before_files: FileRows
    before_deleted: DeletedRows
    after_files: FileRows

    @property
    def before_rows(self) -> int:
        return self.before_files.rows + self.before_deleted.rows

    @property
    def pairing(self) -> Pairing:
        """How MINIMIZE pairs its sides: in one task while they are small."""
        small = self.before_rows + self.after_files.rows <= ONE_TASK_ROWS
        return Pairing.ONE_TASK if small else Pairing.SHUFFLE

    @property
    def before_file_count(self) -> int:
        return len({f.path for f in self.before_files.files + self.before_deleted.files})

    def describe(self) -> str:
        return (
            f"CHANGES on {self.table_name} ({self.information.value}) versions"
            f" ({self.start_version}, {self.end_version}]: shape {self.shape.value};"
            f" before side reads {self.before_file_count} file(s) for {self.before_rows} row(s);"
            f" after side reads {len(self.after_files.files)} file(s) for"
            f" {self.after_files.rows} row(s)"
        )

    def lines(self) -> list[str]:
        """What EXPLAIN prints of this plan: ``describe()``, and how MINIMIZE pairs its sides."""
        if self.shape is not Shape.MINIMIZE:
            return [self.describe()]
        rows = self.before_rows + self.after_files.rows
        limit = "at most" if self.pairing is Pairing.ONE_TASK else "over"
        return [
            self.describe(),
            f"MINIMIZE pairs the two sides by identity {self.pairing.value}"
            f" ({rows} row(s), {limit} {ONE_TASK_ROWS})",
        ]


def _shape(before_empty: bool, after_empty: bool) -> Shape:
    if before_empty and after_empty:
        return Shape.EMPTY
    if before_empty:
        return Shape.ADDED_ONLY
    if after_empty:
        return Shape.REMOVED_ONLY
    return Shape.MINIMIZE


def _live_rows(
    files: Sequence[TrackedFile], *, at: int, tags: Sequence[int], born: Sequence[Born] = ()
) -> FileRows:
    """The rows of ``files`` live at version ``at``: their rows less the positions of their
    deletion vectors up to ``at``; ``tags`` and ``born``, one per file."""
    return FileRows(
        tuple(f.file for f in files),
        tuple(sorted({(p, f.file.path) for f in files for p in f.dv_paths(upto_inclusive=at)})),
        tuple(tags),
        sum(f.file.row_count - f.deleted_rows(upto_inclusive=at) for f in files),
        born=tuple(born) if any(b.bounded for b in born) else (),
    )


def _added_rows(files: Sequence[TrackedFile], *, tags: Sequence[int]) -> FileRows:
    """Every row of ``files`` as their version added them: less the positions of deletion
    vectors made in that version (``_later_dvs``), no later one subtracted; ``tags``, one per
    file."""
    own = [(f, [(p, n) for v, p, n in f.dvs if v == f.file.begin_version]) for f in files]
    return FileRows(
        tuple(f.file for f in files),
        tuple(sorted({(p, f.file.path) for f, dvs in own for p, _ in dvs})),
        tuple(tags),
        sum(f.file.row_count - sum(n for _, n in dvs) for f, dvs in own),
    )


def _later_dvs(f: TrackedFile, *, start: int, end: int) -> list[tuple[int, str, int]]:
    """The deletion vectors of ``f`` made by versions ``(start, end]`` after the version that
    added it. One made in that version (a bootstrap's: a snapshot row a later change of its key
    superseded) deletes rows the table never showed: they are no change, and the file's rows
    are as that version added them (``_added_rows``)."""
    return [d for d in f.dvs if start < d[0] <= end and d[0] != f.file.begin_version]


_NO_FILES = FileRows((), (), (), 0)
_NO_DELETES = DeletedRows((), (), 0)


@dataclass(frozen=True)
class _Sides:
    """What a change scan reads on each side (ChangePlan's fields of the same names)."""

    before_files: FileRows = _NO_FILES
    before_deleted: DeletedRows = _NO_DELETES
    after_files: FileRows = _NO_FILES

    @property
    def shape(self) -> Shape:
        return _shape(self.before_files.empty and self.before_deleted.empty, self.after_files.empty)


def _added(touched: Sequence[TrackedFile], *, start: int, end: int) -> list[TrackedFile]:
    """The files versions ``(start, end]`` added."""
    return [
        f
        for f in touched
        if f.file.begin_version is not None and start < f.file.begin_version <= end
    ]


def _holds(f: TrackedFile, *, after: int | None = None, by: int | None = None) -> bool:
    """Whether compacted file ``f`` may hold rows last written after ``after`` or up to ``by``,
    by its statistics of the version column (none kept: it may)."""
    stats = f.file.stats.get(ROW_VERSION) or {}
    low, high = stats.get("min"), stats.get("max")
    if not stats.get("bounded") or low is None or high is None:
        return True
    return (after is not None and high > after) or (by is not None and low <= by)


def _gone(f: TrackedFile, *, end: int) -> bool:
    """Whether ``f`` was removed by ``end`` other than by a compaction (its rows went)."""
    return f.end_version is not None and f.end_version <= end and not f.moved_out


def _initial_rows(touched: Sequence[TrackedFile], *, end: int) -> _Sides:
    """A stream's first read: the table's rows at ``end``, as inserted at ``end``."""
    live = [f for f in touched if f.live_at(end)]
    return _Sides(after_files=_live_rows(live, at=end, tags=[end] * len(live)))


def _append_only(touched: Sequence[TrackedFile], *, start: int, end: int) -> _Sides:
    """Rows inserted in the interval, as inserted: later deletes and removals ignored."""
    added = [f for f in _added(touched, start=start, end=end) if not f.file.moved]
    inserted = replace(_added_rows(added, tags=[end] * len(added)), inserted_only=True)
    return _Sides(after_files=inserted)


def _redo(touched: Sequence[TrackedFile], *, start: int, end: int) -> _Sides:
    """Every version's changes, each tagged by its version: rows of files removed in the
    interval and rows deleted in it, against rows of files added in it. A compaction's version
    has none: the files it removed and added are neither."""
    s, e = start, end
    removed = [f for f in touched if f.end_version is not None and s < f.end_version <= e]
    removed = [f for f in removed if not f.moved_out]
    dv_parts = {(v, p, f.file.path) for f in touched for v, p, _ in _later_dvs(f, start=s, end=e)}
    dv_files = [f for f in touched if _later_dvs(f, start=s, end=e)]
    added = [f for f in _added(touched, start=s, end=e) if not f.file.moved]
    return _Sides(
        before_files=_live_rows(
            removed,
            at=e,
            tags=[f.end_version for f in removed],  # type: ignore[misc]
        ),
        before_deleted=DeletedRows(
            tuple(f.file for f in dv_files),
            tuple(sorted(dv_parts)),
            sum(n for f in dv_files for _, _, n in _later_dvs(f, start=s, end=e)),
        ),
        after_files=_added_rows(
            added,
            tags=[f.file.begin_version for f in added],  # type: ignore[misc]
        ),
    )


def _default(touched: Sequence[TrackedFile], *, start: int, end: int) -> _Sides:
    """The start state against the end state, restricted to rows the interval touched. A file
    a compaction added holds rows of the start (written up to ``start``: their later deletes
    and removal are the before side's) and rows the interval wrote (the after side's)."""
    s, e = start, end
    added = _added(touched, start=s, end=e)
    # the files that held rows of the start state: live at it, or a compaction's copies of them
    held = [f for f in touched if f.live_at(s)]
    held += [f for f in added if f.file.moved and _holds(f, by=s)]
    removed = [f for f in held if _gone(f, end=e)]
    dv_files = [f for f in held if not _gone(f, end=e) and _later_dvs(f, start=s, end=e)]
    surviving = [f for f in added if f.live_at(e) and (not f.file.moved or _holds(f, after=s))]
    return _Sides(
        before_files=_live_rows(
            removed,
            at=s,
            tags=[e] * len(removed),
            born=[Born(by=s) if f.file.moved else ANY_ROW for f in removed],
        ),
        before_deleted=DeletedRows(
            tuple(f.file for f in dv_files),
            tuple(
                sorted(
                    {
                        (e, p, f.file.path)
                        for f in dv_files
                        for _, p, _ in _later_dvs(f, start=s, end=e)
                    }
                )
            ),
            sum(n for f in dv_files for _, _, n in _later_dvs(f, start=s, end=e)),
            born_by=s if any(f.file.moved for f in dv_files) else None,
        ),
        after_files=_live_rows(
            surviving,
            at=e,
            tags=[e] * len(surviving),
            born=[Born(after=s) if f.file.moved else ANY_ROW for f in surviving],
        ),
    )


_SIDES = {
    Information.DEFAULT: _default,
    Information.APPEND_ONLY: _append_only,
    Information.REDO: _redo,
}


def only_inserts(touched: Sequence[TrackedFile], *, start: int, end: int) -> bool:
    """Whether versions ``(start, end]`` only added rows (``touched``: the files they
    changed): none of them deleted from a file or removed one, other than by a compaction
    (which moves rows). Their changes in every format are then the rows the files they added
    first inserted (APPEND_ONLY's)."""
    return all(not _gone(f, end=end) and not _later_dvs(f, start=start, end=end) for f in touched)


def plan_changes(
    *,
    table_id: int,
    table_name: str,
    start_version: int,
    end_version: int,
    information: Information,
    touched: Sequence[TrackedFile],
    initial_rows: bool = False,
) -> ChangePlan:
    """The change plan for ``touched`` = catalog files_changed_between(start, end).

    With ``initial_rows`` (a stream's first read) the plan is the table's rows at ``end``, and
    ``touched`` must hold every file added up to ``end`` (files_changed_between(-1, end)).
    """
    if initial_rows:
        sides, shape = _initial_rows(touched, end=end_version), Shape.INITIAL_ROWS
    else:
        sides = _SIDES[information](touched, start=start_version, end=end_version)
        shape = sides.shape
    return ChangePlan(
        table_id=table_id,
        table_name=table_name,
        start_version=start_version,
        end_version=end_version,
        information=information,
        shape=shape,
        before_files=sides.before_files,
        before_deleted=sides.before_deleted,
        after_files=sides.after_files,
    )
