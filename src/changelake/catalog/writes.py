"""A write to one table, as a value: what a writer put in storage (data files, deletion vectors),
what it did to rows, and the state of the table it was planned against. Every writer returns one
(DML, MERGE, the keyed apply of dynamic and external tables, changelog rewrites, OPTIMIZE, ingest
compaction, ingest channels, FILES refreshes, the Spark sink, and the writers that create their
table with its first rows: CREATE TABLE AS, APPLY CHANGES' first state, an external table's first
load, a dynamic table's creation); ``write_request`` makes the commit of a statement's writes with
whatever else the statement commits (stream advances, a refresh's record, a channel's token, an
external table's definition), as iceberg-python's ``UpdatesAndRequirements`` pairs them.

What a write requires at its commit is decided here, by what it did, in one place:

* ``TableLive``: the table was not dropped or replaced since it was planned (every write that
  changes the table, and every channel's, which moves the channel's token even when it adds no
  rows);
* its columns: ``SchemaUnchanged`` since the version it read (its files hold the columns it
  read, and a rewrite copies them); an ingest channel's append (``WriteKind.CHANNEL``) instead
  requires ``ColumnsWritable`` for the columns it was opened with, which stay writable while
  nullable columns are added;
* ``FilesUntouched``: no later version removed, or deleted rows of, a file it removes or gives a
  deletion vector: the rows it deletes, rewrites or moves are still there. An append touches no
  file, so appends never conflict with each other.

A write that changed nothing requires nothing and adds no update. A write that creates its table
(``WriteKind.CREATE``) requires nothing either: its commit makes the table (``CreateTable``, which
checks that the name is free), as version 0 holding its files, whose rows that version counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from changelake.catalog.model import DataFile, NewDeletes
from changelake.catalog.requests import (
    AddDeletes,
    AddFiles,
    ColumnsWritable,
    CommitRequest,
    CreateTable,
    FilesUntouched,
    RemoveFiles,
    Requirement,
    RowCounts,
    SchemaUnchanged,
    SetSchema,
    TableLive,
    Update,
)
from changelake.schema import Column, TableSchema


class WriteKind(Enum):
    """What a write does to the rows already in the table."""

    APPEND = "APPEND"  # adds rows only: INSERT, CTAS's later appends, a FILES refresh, a sink
    CHANNEL = "CHANNEL"  # an ingest channel's rows: an append under the channel's columns
    CHANGE = "CHANGE"  # deletes or replaces rows: UPDATE, DELETE, MERGE, a keyed apply, ...
    COMPACT = "COMPACT"  # moves rows without changing them: OPTIMIZE, ingest compaction
    SCHEMA = "SCHEMA"  # changes its columns: ALTER TABLE
    CREATE = "CREATE"  # makes the table holding its first rows: CREATE TABLE AS, a first load


# The table id of a CREATE write: the table its commit makes has no id before that commit.
NEW_TABLE = -1


@dataclass(frozen=True)
class TableWrite:
    """A write to table ``table_id`` (``name``) planned against its version ``since`` (None:
    a channel's, which holds the columns it was opened with whatever the version; a creation's,
    which read no version). ``TableWrite.creating`` makes the write that creates its table."""

    table_id: int
    name: str
    since: int | None
    kind: WriteKind
    added: tuple[DataFile, ...] = ()
    removed: tuple[str, ...] = ()  # data files whose every row goes
    deletes: tuple[NewDeletes, ...] = ()  # deletion vectors of files that keep rows
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    columns: tuple[Column, ...] = ()  # CHANNEL: the columns its files hold
    schema: TableSchema | None = None  # SCHEMA: the new columns
    creates: CreateTable | None = None  # CREATE: the table it makes (its files are ``added``)

    @staticmethod
    def creating(table: CreateTable, files: Sequence[DataFile] = ()) -> TableWrite:
        """The write that creates ``table`` (given without files) holding ``files``."""
        inserted = sum(f.row_count for f in files)
        return TableWrite(
            NEW_TABLE,
            table.name,
            None,
            WriteKind.CREATE,
            tuple(files),
            inserted=inserted,
            creates=table,
        )

    def __post_init__(self) -> None:
        if self.since is None and self.kind not in (WriteKind.CHANNEL, WriteKind.CREATE):
            raise ValueError(f"a {self.kind.value} write to {self.name} names the version it read")
        if self.kind in (WriteKind.APPEND, WriteKind.CHANNEL, WriteKind.CREATE) and self.touched:
            raise ValueError(f"an {self.kind.value} write to {self.name} removes no row")
        if self.kind is WriteKind.CHANNEL and self.added and not self.columns:
            raise ValueError(f"a channel's write to {self.name} names the columns it holds")
        if self.kind is WriteKind.COMPACT and (self.inserted or self.updated or self.deleted):
            raise ValueError(f"a compaction of {self.name} changes no row")
        if (self.kind is WriteKind.SCHEMA) != (self.schema is not None):
            raise ValueError(f"a write to {self.name} has a new schema if and only if SCHEMA")
        if (self.kind is WriteKind.CREATE) != (self.creates is not None):
            raise ValueError(
                f"a write to {self.name} names a table it creates if and only if CREATE"
            )
        if self.creates is not None and (
            self.table_id != NEW_TABLE or self.creates.name != self.name or self.creates.files
        ):
            raise ValueError(f"a creation of {self.name} is TableWrite.creating(table, files)")

    @property
    def changed(self) -> bool:
        """Whether it changes the table (creates it; its columns; files added, removed or given
        deletion vectors)."""
        return bool(self.creates or self.schema or self.added or self.touched)

    @property
    def touched(self) -> tuple[str, ...]:
        """The existing data files whose rows it deletes or moves (not a file it adds, whose
        deletion vector is part of its own write: a bootstrap's superseded rows)."""
        own = {f.path for f in self.added}
        return self.removed + tuple(d.file_path for d in self.deletes if d.file_path not in own)

    def updates(self) -> tuple[Update, ...]:
        """The catalog updates that commit what was written."""
        if self.creates is not None:
            return (replace(self.creates, files=self.added),)
        updates: list[Update] = []
        if self.schema is not None:
            updates.append(SetSchema(self.table_id, self.schema))
        moved = self.kind is WriteKind.COMPACT  # rows copied, not changed: see cl_files.moved_in
        if self.added:
            added = tuple(replace(f, moved=True) for f in self.added) if moved else self.added
            updates.append(AddFiles(self.table_id, added))
        if self.removed:
            updates.append(RemoveFiles(self.table_id, self.removed, moved=moved))
        if self.deletes:
            updates.append(AddDeletes(self.table_id, self.deletes))
        return tuple(updates)

    def requirements(self) -> tuple[Requirement, ...]:
        """What must still hold at the commit (see the module's docstring)."""
        if self.kind is WriteKind.CREATE or not (self.changed or self.kind is WriteKind.CHANNEL):
            return ()
        table_id, name = self.table_id, self.name
        required: list[Requirement] = [TableLive(table_id, name)]
        if self.kind is WriteKind.CHANNEL:
            if self.added:
                required.append(ColumnsWritable(table_id, name, self.columns))
        else:
            assert self.since is not None
            required.append(SchemaUnchanged(table_id, name, self.since))
            if self.touched:
                required.append(FilesUntouched(table_id, name, self.touched, self.since))
        return tuple(required)

    def row_counts(self) -> RowCounts:
        return RowCounts(self.table_id, self.inserted, self.updated, self.deleted)


def write_request(
    statement_id: str,
    operation: str,
    writes: Iterable[TableWrite],
    *,
    updates: Iterable[Update] = (),
    requirements: Iterable[Requirement] = (),
) -> CommitRequest:
    """One commit of ``writes`` (each table once, or the channels of one flush) and the
    statement's other ``updates`` and ``requirements``. The statement's requirements are checked
    first (a lost lease, a stream consumed by another: the reason a race was lost, rather than
    what it did to the files), and a requirement two writes share once. A creation's rows are
    counted by the version it makes (``CreateTable``), not by the request."""
    writes = list(writes)
    required: dict[Requirement, None] = {}
    for r in (*requirements, *[r for w in writes for r in w.requirements()]):
        required[r] = None
    counts: dict[int, RowCounts] = {}
    for w in writes:
        if w.kind is WriteKind.CREATE:
            continue
        c = counts.get(w.table_id, RowCounts(w.table_id))
        counts[w.table_id] = RowCounts(
            w.table_id, c.inserted + w.inserted, c.updated + w.updated, c.deleted + w.deleted
        )
    return CommitRequest(
        statement_id,
        operation,
        updates=(*[u for w in writes for u in w.updates()], *updates),
        requirements=tuple(required),
        row_counts=tuple(counts.values()),
    )
