"""Typed values the catalog hands out and takes in. Immutable; no database or Spark types."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

Stats = dict[str, dict[str, Any]]  # physical column -> {"min": v, "max": v, "nulls": n}
DYNAMIC_PROPERTY = "dynamic"  # "true" in a dynamic table's properties
EXTERNAL_PROPERTY = "external"  # an external table's source kind: POSTGRES | FILES


# The states and modes the catalog stores, as text equal to their names. A member is a str, but
# PySpark's schema inference recurses without end on one: a value bound for a DataFrame row is
# passed as ``.value``.
class RefreshMode(StrEnum):
    """A dynamic table's REFRESH_MODE as asked (AUTO) or as chosen (FULL | INCREMENTAL)."""

    AUTO = "AUTO"
    FULL = "FULL"
    INCREMENTAL = "INCREMENTAL"


class RefreshAction(StrEnum):
    """What one refresh of a dynamic table did."""

    NO_DATA = "NO_DATA"
    INCREMENTAL = "INCREMENTAL"
    FULL = "FULL"
    REINITIALIZE = "REINITIALIZE"


class RefreshState(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"


class SchedulingState(StrEnum):
    """Whether the scheduler refreshes a dynamic table."""

    ACTIVE = "ACTIVE"
    SUSPENDED = "SUSPENDED"


class TaskRunState(StrEnum):
    SCHEDULED = "SCHEDULED"
    EXECUTING = "EXECUTING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"


class TaskState(StrEnum):
    """Whether a task's schedule and conditions start its runs (lower case, as stored)."""

    STARTED = "started"
    SUSPENDED = "suspended"


class ExternalTableState(StrEnum):
    """Whether an external table follows its source (RESCOPING: while its scope changes)."""

    ACTIVE = "ACTIVE"
    SUSPENDED = "SUSPENDED"
    FAILED = "FAILED"
    RESCOPING = "RESCOPING"


@dataclass(frozen=True)
class TableInfo:
    """A live table as the catalog knows it now."""

    table_id: int
    name: str
    current_version: int
    created_at: float
    properties: dict[str, str]
    vacuumed_before_version: int = 0
    current_commit: int = 0  # the commit that made current_version

    def retention_days(self) -> float:
        return float(self.properties.get("data_retention_time_in_days", "1"))

    def max_extension_days(self) -> float:
        return float(self.properties.get("max_data_extension_time_in_days", "14"))

    def is_dynamic(self) -> bool:
        """Whether it is a dynamic table (its rows are its query's result)."""
        return self.properties.get(DYNAMIC_PROPERTY) == "true"

    def is_external(self) -> bool:
        """Whether it is an external table (its rows follow a source)."""
        return EXTERNAL_PROPERTY in self.properties

    def before_images(self) -> bool:
        """Whether deletes keep the deleted rows beside their positions (the default)."""
        return self.properties.get("before_images", "true").lower() == "true"


@dataclass(frozen=True)
class VersionInfo:
    """One committed version of a table."""

    version: int
    committed_at: float
    operation: str
    statement_id: str
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    files_added: int
    files_removed: int
    commit_number: int = 0


@dataclass(frozen=True)
class DataFile:
    """A Parquet data file of a table. ``path`` is relative to the warehouse root."""

    path: str
    row_count: int
    size_bytes: int
    base_row_id: int | None  # None: allocated from the table's counter at commit
    begin_version: int | None  # None until committed
    stats: Stats = field(default_factory=dict, compare=False, hash=False)
    moved: bool = False  # its rows are copies of rows the table held (a compaction wrote it)
    index: str | None = None  # the key → address index file holding its keys (storage/index.py)


@dataclass(frozen=True)
class LiveFile:
    """A data file as visible in one snapshot: the file plus its deletion-vector parts."""

    file: DataFile
    dv_paths: tuple[str, ...] = ()
    deleted_rows: int = 0

    @property
    def live_rows(self) -> int:
        return self.file.row_count - self.deleted_rows


@dataclass(frozen=True)
class NewDeletes:
    """Positions of ``file_path`` deleted by one statement, stored in the DV file ``dv_path``."""

    file_path: str
    dv_path: str
    row_count: int


@dataclass(frozen=True)
class TrackedFile:
    """A data file with its removal version and every DV part up to some version: what change
    scans classify to find the rows an interval touched."""

    file: DataFile
    end_version: int | None
    dvs: tuple[tuple[int, str, int], ...] = ()  # (version, dv_path, rows), ascending
    moved_out: bool = False  # removed by a compaction: its live rows were copied, not deleted

    def dv_paths(self, *, upto_inclusive: int) -> tuple[str, ...]:
        return tuple(p for v, p, _ in self.dvs if v <= upto_inclusive)

    def deleted_rows(self, *, upto_inclusive: int) -> int:
        return sum(n for v, _, n in self.dvs if v <= upto_inclusive)

    def live_at(self, version: int) -> bool:
        begin = self.file.begin_version
        return (
            begin is not None
            and begin <= version
            and (self.end_version is None or self.end_version > version)
        )


@dataclass(frozen=True)
class StreamInfo:
    """A STREAM: named frontiers, per base table the version whose changes are all consumed.

    A stream is on a table (``table_id``) or on a view (``view``, ``table_id`` 0): then it has a
    frontier per table the view reads, and ``view_definition`` is what the view meant when the
    stream was created (a redefined view makes the stream stale).
    """

    stream_id: int
    name: str
    table_id: int
    frontiers: tuple[tuple[int, int], ...]  # (table id, version), by table id
    append_only: bool
    show_initial_rows: bool
    initial_consumed: bool
    comment: str
    created_at: float
    consumed_at: float | None
    view: str | None = None
    view_definition: str | None = None

    @property
    def on_view(self) -> bool:
        return self.view is not None

    @property
    def frontier_version(self) -> int:
        """The frontier on the stream's table (a stream on a table)."""
        return dict(self.frontiers)[self.table_id]

    def frontier(self, table_id: int) -> int:
        """The version of table ``table_id`` whose changes the stream has consumed."""
        return dict(self.frontiers)[table_id]

    @property
    def source(self) -> str:
        return "VIEW" if self.on_view else "TABLE"

    @property
    def pending_initial_rows(self) -> bool:
        return self.show_initial_rows and not self.initial_consumed

    @property
    def mode(self) -> str:
        return "APPEND_ONLY" if self.append_only else "DEFAULT"


@dataclass(frozen=True)
class ChannelInfo:
    """An ingest channel as committed: who holds it (``epoch``) and how far its rows are in."""

    table_id: int
    name: str
    epoch: int
    offset_token: str | None
    committed_version: int | None  # the table version that committed ``offset_token``
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class Snapshot:
    """A point in the warehouse's commit order: every commit numbered up to ``commit_number``,
    the last of which was stamped ``committed_at``. Commits after it are numbered and stamped
    higher. ``definitions``: the token of the catalog's definitions at this point (names, view
    texts, tables' columns): a new one with every change to them, so snapshots with one token
    bind views and queries alike."""

    commit_number: int
    committed_at: float
    definitions: str


@dataclass(frozen=True)
class StatementCommits:
    """The commits one statement made: one, or several when it also refreshed the dynamic
    tables it read (each refresh commits on its own). Per table the first and the last version
    it made; its first and last commit numbers."""

    first_versions: dict[int, int]
    last_versions: dict[int, int]
    first_commit: int
    last_commit: int


@dataclass(frozen=True)
class DynamicDefinition:
    """What a dynamic table is: its query and how it is kept up to date."""

    sql: str
    depends_on: tuple[str, ...]  # the tables and views its query names, lower case
    fingerprint: str  # of the query and the views it reads: a change means REINITIALIZE
    target_lag: float | None  # seconds; None: DOWNSTREAM
    refresh_mode: str  # AUTO | FULL | INCREMENTAL, as asked
    effective_mode: str  # FULL | INCREMENTAL, as chosen
    mode_reason: str
    initialize: str  # ON_CREATE | ON_SCHEDULE


@dataclass(frozen=True)
class DynamicTableInfo:
    """A dynamic table: its table, its definition and where its refreshes have got to."""

    info: TableInfo
    definition: DynamicDefinition
    scheduling_state: str  # ACTIVE | SUSPENDED
    suspended_reason: str
    failures: int  # consecutive failed refreshes
    frontiers: tuple[tuple[int, int], ...] | None  # None: never refreshed
    data_timestamp: float | None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def table_id(self) -> int:
        return self.info.table_id


@dataclass(frozen=True)
class RefreshRecord:
    """One refresh of a dynamic table as its history keeps it. ``frontiers``: where a
    SUCCEEDED refresh leaves the table (None for one that failed or was skipped)."""

    action: str  # NO_DATA | INCREMENTAL | FULL | REINITIALIZE
    state: str  # SUCCEEDED | FAILED | SKIPPED | CANCELLED
    trigger: str  # SCHEDULED | MANUAL | CREATION | DOWNSTREAM
    data_timestamp: float | None
    started_at: float
    frontiers: tuple[tuple[int, int], ...] | None = None
    rows_inserted: int = 0
    rows_deleted: int = 0
    rows_updated: int = 0
    spark_jobs: int = 0
    error: str = ""
    reason: str = ""  # why ``action``: what it measured, or what made it necessary


@dataclass(frozen=True)
class RefreshInfo:
    """A recorded refresh: the record, its id, when its commit ended it, the version it left."""

    refresh_id: int
    table_id: int
    record: RefreshRecord
    ended_at: float
    version: int | None


@dataclass(frozen=True)
class TaskOptions:
    """How a task runs (the CREATE TASK options, with Snowflake's defaults)."""

    suspend_after_failures: int = 10  # consecutive failed graph runs; 0: never
    auto_retry_attempts: int = 0  # a failed graph run is retried from the failed task
    allow_overlapping: bool = False
    timeout_ms: int = 3_600_000  # a run is cancelled after this long
    min_trigger_interval: float = 30.0  # seconds between two runs of a triggered task
    comment: str = ""


@dataclass(frozen=True)
class TaskDefinition:
    """What a task runs and when."""

    sql: str  # the body as written
    statements: tuple[str, ...]  # the statements it runs (BEGIN ... COMMIT: in one transaction)
    schedule: str | None  # '<n> MINUTE' or 'USING CRON <expr> <zone>' as written
    after: tuple[int, ...]  # the ids of the tasks it runs after
    condition: str | None  # the WHEN condition as written
    options: TaskOptions


@dataclass(frozen=True)
class TaskInfo:
    task_id: int
    name: str
    definition: TaskDefinition
    state: str  # started | suspended
    suspended_reason: str
    failures: int  # consecutive failed graph runs (of a root)
    next_at: float | None  # when a started root with a schedule runs next
    created_at: float


@dataclass(frozen=True)
class TaskRun:
    """One run of a task in a graph run (the root's run id is the graph run id)."""

    run_id: int
    task_id: int
    graph_run_id: int | None
    attempt: int
    state: str  # SCHEDULED | EXECUTING | SUCCEEDED | FAILED | SKIPPED | CANCELLED
    trigger: str  # SCHEDULED | TRIGGERED | MANUAL
    reason: str
    scheduled_at: float
    started_at: float | None
    completed_at: float | None
    statement_id: str | None
    error: str
    spark_jobs: int
    holder: str


@dataclass(frozen=True)
class RunClaim:
    """What starting a task run requires (``Catalog.add_task_run``): the scheduler's lease at
    ``epoch`` (None: a manual run), the task's next scheduled run still at ``seen_next_at`` and
    moved to ``next_at`` (None: no slot taken), and, unless ``overlap``, no run of ``graph``
    (task ids) executing."""

    lease: str | None = None
    epoch: int | None = None
    seen_next_at: float | None = None
    next_at: float | None = None
    graph: tuple[int, ...] = ()
    overlap: bool = True


@dataclass(frozen=True)
class ConnectionInfo:
    """A connection to another database: where it is and where its secret is found (the name of
    an environment variable or a file), never the secret itself."""

    name: str
    kind: str  # POSTGRES
    options: dict[str, str]
    created_at: float


@dataclass(frozen=True)
class ExternalDefinition:
    """What CREATE EXTERNAL TABLE fixed: the source, and how rows are matched and kept."""

    kind: str  # POSTGRES | FILES
    connection: str | None
    source: str  # 'schema.table' | a directory's URI
    spec: dict[str, Any]  # keys, source columns (POSTGRES); file format, pattern (FILES)
    scope_mode: str  # ALL | DEPENDENTS
    follow_lag: float  # seconds
    slot: str | None = None
    publication: str | None = None

    @property
    def column_types(self) -> dict[str, str]:
        """Each column's changelake type, by its name in lower case."""
        return {name.lower(): type_ for name, type_ in self.spec.get("columns", ())}


@dataclass(frozen=True)
class ExternalTableInfo:
    """An external table: its table, its definition, and the state of its follow."""

    info: TableInfo
    definition: ExternalDefinition
    scope: str | None  # the predicate of the rows it holds (Spark SQL); None: all
    state: str  # ACTIVE | SUSPENDED | FAILED
    error: str
    followed_at: float | None
    position: str | None  # the source position its rows reflect (committed with them)
    bootstrap: str | None = None  # a widening of its scope under way, in words

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def table_id(self) -> int:
        return self.info.table_id


@dataclass(frozen=True)
class ScopeRecord:
    """A scope an external table had, from commit ``begin_commit`` on."""

    begin_commit: int
    scope: str | None  # Spark SQL; None: every row


@dataclass(frozen=True)
class ExternalFile:
    """A file a FILES external table registered, as it was then."""

    path: str
    size: int
    modified: float
