"""A commit is data: typed updates and the requirements they are valid under.

A statement (or a whole BEGIN ... COMMIT transaction) hands the catalog one or more
``CommitRequest`` values; ``Catalog.commit`` checks every requirement against the current state and
applies every update in one database transaction, or nothing. Updates of one request that change a
table's contents or schema (``AddFiles``, ``RemoveFiles``, ``AddDeletes``, ``SetSchema``) make one
new version of that table, stamped with the request's statement id and operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from changelake.catalog.alters import (
    AlterDynamicTable,
    AlterExternalTable,
    AlterTask,
    FinishTaskRun,
)
from changelake.catalog.model import (
    ChannelInfo,
    ConnectionInfo,
    DataFile,
    DynamicDefinition,
    ExternalDefinition,
    ExternalFile,
    NewDeletes,
    RefreshRecord,
    Snapshot,
    TableInfo,
    TaskDefinition,
)
from changelake.schema import Column, TableSchema


class IfExists(Enum):
    """What a CREATE does when an object of that name exists."""

    ERROR = "error"
    REPLACE = "replace"
    KEEP = "keep"  # IF NOT EXISTS: the whole request is not applied

    @staticmethod
    def of(*, replace: bool, if_not_exists: bool) -> IfExists:
        """``CREATE OR REPLACE`` -> REPLACE, ``CREATE ... IF NOT EXISTS`` -> KEEP."""
        return IfExists.REPLACE if replace else IfExists.KEEP if if_not_exists else IfExists.ERROR


# -- updates --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateTable:
    """A new table at version 0 holding ``files`` (CREATE TABLE [AS SELECT])."""

    name: str
    schema: TableSchema
    properties: tuple[tuple[str, str], ...] = ()
    files: tuple[DataFile, ...] = ()
    if_exists: IfExists = IfExists.ERROR


@dataclass(frozen=True)
class DropTable:
    """Drop a table and the streams on it (fails while views depend on it)."""

    table_id: int


@dataclass(frozen=True)
class RenameTable:
    table_id: int
    new_name: str


@dataclass(frozen=True)
class SetProperties:
    table_id: int
    properties: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SetSchema:
    table_id: int
    schema: TableSchema


@dataclass(frozen=True)
class AddFiles:
    """Register data files; those without a ``base_row_id`` get row ids in the commit."""

    table_id: int
    files: tuple[DataFile, ...]


@dataclass(frozen=True)
class RemoveFiles:
    table_id: int
    paths: tuple[str, ...]
    moved: bool = False  # a compaction copied their live rows into the files it added


@dataclass(frozen=True)
class AddDeletes:
    """Deletion vectors: positions of existing files deleted by this version."""

    table_id: int
    deletes: tuple[NewDeletes, ...]


@dataclass(frozen=True)
class ReserveRowIds:
    """Reserve ``count`` row ids (files staged inside BEGIN ... COMMIT carry their ids before the
    transaction commits, so later statements of the transaction can keep them); makes no version."""

    table_id: int
    count: int


@dataclass(frozen=True)
class ForgetFiles:
    """VACUUM: drop the catalog rows of deleted files; versions before ``vacuumed_before`` are
    gone. Makes no version."""

    table_id: int
    paths: tuple[str, ...]
    vacuumed_before: int


@dataclass(frozen=True)
class CreateView:
    name: str
    sql: str
    depends_on: tuple[str, ...] = ()
    if_exists: IfExists = IfExists.ERROR


@dataclass(frozen=True)
class DropView:
    name: str


@dataclass(frozen=True)
class CreateStream:
    """A stream on table ``table_id``, or on ``view`` (``table_id`` None) with a frontier per
    base table; ``frontiers`` are (table id, version) pairs."""

    name: str
    table_id: int | None
    frontiers: tuple[tuple[int, int], ...]
    view: str | None = None
    view_definition: str | None = None
    append_only: bool = False
    show_initial_rows: bool = False
    comment: str = ""
    if_exists: IfExists = IfExists.ERROR


@dataclass(frozen=True)
class DropStream:
    name: str


@dataclass(frozen=True)
class AdvanceStream:
    """Move a stream's frontiers ((table id, version) pairs); pair it with ``FrontierAt``."""

    stream_id: int
    frontiers: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class OpenChannel:
    """Open (or reopen) ingest channel ``name`` on a table: its epoch grows by one, fencing any
    earlier holder. ``offset_token`` given: the channel restarts from that token."""

    table_id: int
    name: str
    offset_token: str | None = None
    reset_token: bool = False


@dataclass(frozen=True)
class AdvanceChannel:
    """Record ``offset_token`` as the channel's committed token; pair it with ``ChannelHeld``."""

    table_id: int
    name: str
    offset_token: str | None


@dataclass(frozen=True)
class DropChannel:
    table_id: int
    name: str


@dataclass(frozen=True)
class DefineDynamicTable:
    """Make table ``name``, created by the same request, a dynamic table."""

    name: str
    definition: DynamicDefinition


@dataclass(frozen=True)
class RecordRefresh:
    """A refresh of a dynamic table (by id, or by the name of one this request creates) goes
    into its history; a SUCCEEDED one moves its frontiers and data timestamp."""

    table: int | str
    refresh: RefreshRecord


@dataclass(frozen=True)
class DefineTask:
    """Create task ``name`` (suspended); OR REPLACE keeps its id (tasks that run after it still
    do) and suspends it. A cycle in AFTER is refused (InvalidStatementError)."""

    name: str
    definition: TaskDefinition
    if_exists: IfExists = IfExists.ERROR


@dataclass(frozen=True)
class DropTask:
    """Drop a task; the tasks that ran after it no longer wait for it."""

    task_id: int


@dataclass(frozen=True)
class CreateConnection:
    """A connection to another database (``replace``: OR REPLACE, else it must be new)."""

    connection: ConnectionInfo
    replace: bool = False


@dataclass(frozen=True)
class DropConnection:
    """Drop a connection (refused while external tables read through it)."""

    name: str


@dataclass(frozen=True)
class DefineExternalTable:
    """Make table ``name``, created by the same request, an external table (its connection
    must exist); a FILES table registers ``files``, the files its first rows came from."""

    name: str
    definition: ExternalDefinition
    scope: str | None
    position: str | None
    files: tuple[ExternalFile, ...] = ()


@dataclass(frozen=True)
class RegisterFiles:
    """Record files a FILES external table has read (each once)."""

    table_id: int
    files: tuple[ExternalFile, ...]


Update = (
    CreateTable
    | DropTable
    | RenameTable
    | SetProperties
    | SetSchema
    | AddFiles
    | RemoveFiles
    | AddDeletes
    | ReserveRowIds
    | ForgetFiles
    | CreateView
    | DropView
    | CreateStream
    | DropStream
    | AdvanceStream
    | OpenChannel
    | AdvanceChannel
    | DropChannel
    | DefineDynamicTable
    | RecordRefresh
    | AlterDynamicTable
    | DefineTask
    | AlterTask
    | DropTask
    | FinishTaskRun
    | CreateConnection
    | DropConnection
    | DefineExternalTable
    | AlterExternalTable
    | RegisterFiles
)

# Updates that change what a name resolves to (a table, a view, which table) or a table's columns:
# a commit with one writes a new definitions token (``Snapshot.definitions``), by which bound
# views and queries are kept across statements. Properties go with them (rarely set, and what a
# binding reads of a table besides its columns); files, streams, refreshes and follow steps do
# not change a definition.
REDEFINING = (
    CreateTable,
    DropTable,
    RenameTable,
    SetProperties,
    SetSchema,
    CreateView,
    DropView,
    DefineDynamicTable,
    DefineExternalTable,
)

# -- requirements ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableLive:
    """The table is neither dropped nor replaced (else ConflictError)."""

    table_id: int
    name: str


@dataclass(frozen=True)
class SchemaUnchanged:
    """No version after ``since_version`` changed the table's columns (else ConflictError): a
    statement's files and its new schema were made for the columns it read."""

    table_id: int
    name: str
    since_version: int


@dataclass(frozen=True)
class ColumnsWritable:
    """Files holding ``columns`` (the writer's columns: ids, names, types) fit the table's
    schema at the commit: each is still a column of that type, and every NOT NULL column is
    among them (else ConflictError). What an ingest channel requires, which keeps the columns it
    was opened with while columns are added."""

    table_id: int
    name: str
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class FilesUntouched:
    """No version after ``since_version`` removed ``paths`` or gave them deletion vectors (else
    ConflictError naming the version): the rows a statement deletes or rewrites are still there."""

    table_id: int
    name: str
    paths: tuple[str, ...]
    since_version: int


@dataclass(frozen=True)
class FrontierAt:
    """The stream is live and still where the statement read it (else StreamConsumedError)."""

    stream_id: int
    name: str
    frontiers: tuple[tuple[int, int], ...]
    initial_consumed: bool


@dataclass(frozen=True)
class ChannelHeld:
    """The channel is still at ``epoch`` (not reopened or dropped since this holder opened it) and
    its committed token is still ``offset_token`` (else ChannelFencedError)."""

    table_id: int
    table: str
    name: str
    epoch: int
    offset_token: str | None


@dataclass(frozen=True)
class FollowedFrom:
    """External table ``table_id``'s rows still reflect source ``position`` under ``scope`` (a
    follow read them there and commits the changes after it)."""

    table_id: int
    table: str
    position: str | None
    scope: str | None
    rescoping: bool = False  # the commit that ends a rescope (its fence: state RESCOPING)


@dataclass(frozen=True)
class RefreshedFrom:
    """The dynamic table is live and its refreshes are still where this one started from, its
    frontiers ``frontiers`` and its data timestamp ``data_timestamp`` (else ConflictError): no
    other refresh committed while this one ran (a NO_DATA one moves only the data timestamp)."""

    table_id: int
    name: str
    frontiers: tuple[tuple[int, int], ...] | None
    data_timestamp: float | None


@dataclass(frozen=True)
class LeaseHeld:
    """Lease ``name`` is still at ``epoch``: no other process took it over (else ConflictError).
    What the scheduler's refreshes and task runs require."""

    name: str
    epoch: int


@dataclass(frozen=True)
class TaskRunExecuting:
    """Task run ``run_id`` is still EXECUTING (else ConflictError): no other process ended it
    (taking its process for dead) while it ran."""

    run_id: int
    task: str


Requirement = (
    TableLive
    | SchemaUnchanged
    | ColumnsWritable
    | FilesUntouched
    | FrontierAt
    | ChannelHeld
    | RefreshedFrom
    | LeaseHeld
    | TaskRunExecuting
    | FollowedFrom
)


@dataclass(frozen=True)
class RowCounts:
    """What a version did to a table's rows, for DESCRIBE HISTORY."""

    table_id: int
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


@dataclass(frozen=True)
class CommitRequest:
    """One statement's changes to the catalog, valid only while its requirements hold."""

    statement_id: str
    operation: str
    updates: tuple[Update, ...] = ()
    requirements: tuple[Requirement, ...] = ()
    row_counts: tuple[RowCounts, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.updates

    @property
    def redefines(self) -> bool:
        """Whether it changes definitions (``REDEFINING``)."""
        return any(isinstance(u, REDEFINING) for u in self.updates)


@dataclass(frozen=True)
class CommitResult:
    """What a commit made: its place in the commit order, new versions per table id, tables
    created (or kept, for IF NOT EXISTS) by name, the first of the row ids reserved per table id,
    channels opened by (table id, name)."""

    applied: bool = True
    commit: Snapshot | None = None
    versions: dict[int, list[int]] = field(default_factory=dict)
    tables: dict[str, TableInfo] = field(default_factory=dict)
    row_id_bases: dict[int, int] = field(default_factory=dict)
    channels: dict[tuple[int, str], ChannelInfo] = field(default_factory=dict)

    def version_of(self, table_id: int) -> int | None:
        made = self.versions.get(table_id)
        return made[-1] if made else None
