"""The catalog: one metadata database (SQLite in the warehouse by default, PostgreSQL for shared
use). Reads are small queries. ``commit`` is the only write of the warehouse's state (tables,
their versions and files, views, streams, channels, dynamic and external tables, tasks): it
applies commit requests in one database transaction after checking their requirements, numbered
in the commit order. The other writes are not of that state but of which process does what, now
(``catalog/coordination.py``, which says why they are no commits): task runs as they start and
as they end without a commit, and leases. Opening a catalog creates or migrates its schema."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import select

from changelake.catalog import (
    channel_repo,
    clock_repo,
    coordination,
    dynamic_repo,
    external_repo,
    file_repo,
    stream_repo,
    table_repo,
    task_repo,
    view_repo,
)
from changelake.catalog import commit as commit_path
from changelake.catalog import tables as t
from changelake.catalog.alters import FinishTaskRun
from changelake.catalog.db import engine_for, migrate, reading, retrying, writing
from changelake.catalog.file_history import FileHistory
from changelake.catalog.model import (
    ChannelInfo,
    ConnectionInfo,
    DynamicTableInfo,
    ExternalFile,
    ExternalTableInfo,
    LiveFile,
    RefreshInfo,
    RunClaim,
    ScopeRecord,
    Snapshot,
    StatementCommits,
    StreamInfo,
    TableInfo,
    TaskInfo,
    TaskRun,
    TrackedFile,
    VersionInfo,
)
from changelake.catalog.requests import (
    CommitRequest,
    CommitResult,
)
from changelake.clock import Clock
from changelake.errors import StreamNotFoundError, TableNotFoundError, did_you_mean
from changelake.schema import TableSchema


class Catalog:
    """Metadata operations on one catalog database. Safe to share across threads and processes."""

    def __init__(self, url: str):
        self.url = url
        self.engine = engine_for(url)
        self._is_postgres = self.engine.dialect.name == "postgresql"
        migrate(self.engine, url)

    def close(self) -> None:
        self.engine.dispose()

    # -- the one write of the warehouse's state ----------------------------------------------

    def commit(self, requests: Sequence[CommitRequest], *, clock: Clock) -> CommitResult:
        """Apply ``requests`` atomically: every requirement is checked first, against the state
        before the call; a failed one raises (ConflictError, StreamConsumedError, ...) and
        nothing is written. The commit is numbered and stamped (``clock``) inside the database
        transaction, after its locks. Transient lock failures are retried."""

        def attempt() -> CommitResult:
            with writing(self.engine) as conn:
                return commit_path.commit(conn, requests, clock=clock, postgres=self._is_postgres)

        return retrying(attempt)

    # -- the commit order ---------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The last committed point of the warehouse: one small read, no lock."""
        with reading(self.engine) as conn:
            return clock_repo.read(conn)

    def settled_snapshot(self) -> Snapshot:
        """The last committed point once the commits in flight have ended: a commit that starts
        after this returns is stamped later than the moment it returned. What makes a time in
        the recent past a repeatable point."""
        with writing(self.engine) if not self._is_postgres else reading(self.engine) as conn:
            return clock_repo.wait_for_commits_in_flight(conn, postgres=self._is_postgres)

    def version_at(self, table_id: int, commit_number: int) -> int | None:
        """The table's last version made by a commit numbered up to ``commit_number`` (None: the
        table was created later)."""
        with reading(self.engine) as conn:
            return table_repo.version_at(conn, table_id, commit_number)

    # -- tables -------------------------------------------------------------------------------

    def find_table(self, name: str) -> TableInfo | None:
        with reading(self.engine) as conn:
            row = table_repo.find_live(conn, name)
        return None if row is None else table_repo.table_info(row)

    def table(self, name: str) -> TableInfo:
        """The live table ``name``, or TableNotFoundError suggesting the closest name."""
        found = self.find_table(name)
        if found is None:
            if self.view_sql(name) is not None:
                raise TableNotFoundError(f"{name} is a view, not a table: this reads tables.")
            raise TableNotFoundError(
                f"Table {name!r} does not exist.{did_you_mean(name, self.object_names())}"
                " SHOW TABLES lists the tables."
            )
        return found

    def find_tables(self, names: Sequence[str]) -> dict[str, TableInfo]:
        """The live tables among ``names``, by lower-case name, in one query."""
        if not names:
            return {}
        with reading(self.engine) as conn:
            rows = table_repo.find_live_named(conn, names)
        return {r.name: table_repo.table_info(r) for r in rows}

    def table_by_id(self, table_id: int) -> TableInfo:
        with reading(self.engine) as conn:
            return table_repo.table_info(table_repo.by_id(conn, table_id))

    def list_tables(self) -> list[TableInfo]:
        with reading(self.engine) as conn:
            return table_repo.list_live(conn)

    def object_names(self) -> list[str]:
        """Names of all live tables and views (for suggestions)."""
        with reading(self.engine) as conn:
            return table_repo.live_names(conn) + view_repo.live_names(conn)

    def schema_at(self, table_id: int, version: int) -> TableSchema:
        with reading(self.engine) as conn:
            return table_repo.schema_at(conn, table_id, version)

    def schemas_at(self, wanted: Mapping[int, int]) -> dict[int, TableSchema]:
        """``schema_at`` of each table (id) at its version in ``wanted``, in one query."""
        if not wanted:
            return {}
        with reading(self.engine) as conn:
            return table_repo.schemas_at(conn, wanted)

    # -- versions -----------------------------------------------------------------------------

    def versions(
        self, table_id: int, *, after_exclusive: int = -1, upto_inclusive: int | None = None
    ) -> list[VersionInfo]:
        with reading(self.engine) as conn:
            return table_repo.versions(
                conn, table_id, after_exclusive=after_exclusive, upto_inclusive=upto_inclusive
            )

    def version_info(self, table_id: int, version: int) -> VersionInfo | None:
        found = self.versions(table_id, after_exclusive=version - 1, upto_inclusive=version)
        return found[0] if found else None

    def version_as_of(self, table_id: int, timestamp: float, *, inclusive: bool) -> int | None:
        """The last version committed at or before (``inclusive``) or before ``timestamp``."""
        with reading(self.engine) as conn:
            return table_repo.version_as_of(conn, table_id, timestamp, inclusive=inclusive)

    def versions_as_of(
        self, table_ids: Sequence[int], timestamp: float, *, inclusive: bool
    ) -> dict[int, int]:
        """``version_as_of`` of each table, in one query; a table with no such version (created
        later) is left out."""
        with reading(self.engine) as conn:
            return table_repo.versions_as_of(conn, table_ids, timestamp, inclusive=inclusive)

    def version_infos(
        self, wanted: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], VersionInfo]:
        """The versions ``wanted`` as (table id, version) that exist, in one query."""
        if not wanted:
            return {}
        with reading(self.engine) as conn:
            return table_repo.version_infos(conn, wanted)

    def rows_changed(self, intervals: Sequence[tuple[int, int, int]]) -> int:
        """The rows changed by the versions of ``intervals`` (table id, start exclusive, end
        inclusive), an update counted twice, in one query: from the versions' own counts."""
        if not intervals:
            return 0
        with reading(self.engine) as conn:
            return table_repo.rows_changed(conn, intervals)

    def statement_commit(self, statement_id: str) -> StatementCommits | None:
        """What a committed statement made: its versions per table and its commit numbers."""
        with reading(self.engine) as conn:
            rows = conn.execute(
                select(t.versions.c.table_id, t.versions.c.version, t.versions.c.commit_number)
                .where(t.versions.c.statement_id == statement_id)
                .order_by(t.versions.c.commit_number)
            ).all()
        if not rows:
            return None
        first: dict[int, int] = {}
        for r in rows:
            first.setdefault(r.table_id, r.version)
        return StatementCommits(
            first_versions=first,
            last_versions={r.table_id: r.version for r in rows},
            first_commit=rows[0].commit_number,
            last_commit=rows[-1].commit_number,
        )

    def changed_since(
        self,
        table_id: int,
        version: int,
        *,
        upto_inclusive: int | None = None,
        inserts_only: bool = False,
    ) -> bool:
        """Whether a version after ``version`` (up to ``upto_inclusive``) added or removed files
        or deleted rows (``inserts_only``: inserted rows): one indexed lookup of the per-version
        change summary."""
        with reading(self.engine) as conn:
            return table_repo.changed_since(
                conn, table_id, version, upto_inclusive=upto_inclusive, inserts_only=inserts_only
            )

    # -- files --------------------------------------------------------------------------------

    def snapshot_files(self, table_id: int, version: int) -> list[LiveFile]:
        """The data files live at ``version``, each with its deletion vector parts at that version."""
        with reading(self.engine) as conn:
            return file_repo.snapshot_files(conn, table_id, version)

    def files_changed_between(
        self, table_id: int, *, start_exclusive: int, end_inclusive: int
    ) -> list[TrackedFile]:
        """Files added, removed or given deletion vectors by versions in the interval, each with
        all its DV parts up to ``end_inclusive``. Cost follows the files the interval touched."""
        with reading(self.engine) as conn:
            return file_repo.files_changed_between(
                conn, table_id, start_exclusive=start_exclusive, end_inclusive=end_inclusive
            )

    def file_histories(self, ranges: Mapping[int, tuple[int, int]]) -> dict[int, FileHistory]:
        """Per table (id), its files over the versions ``[since, until]`` that ``ranges`` give
        it, in one query: what ``snapshot_files`` and ``files_changed_between`` answer for
        versions in that range, for several tables and versions at once."""
        if not ranges:
            return {}
        with reading(self.engine) as conn:
            return file_repo.file_histories(conn, ranges)

    def all_file_paths(self, table_id: int) -> list[tuple[str, int | None, list[str]]]:
        """Every registered data file: (path, end_version, the DV and index files it uses, which
        other files may share) — for vacuum."""
        with reading(self.engine) as conn:
            return file_repo.all_file_paths(conn, table_id)

    def registered_paths(self) -> set[str]:
        """Every data and DV file path any table (live or dropped) still references."""
        with reading(self.engine) as conn:
            return file_repo.registered_paths(conn)

    def removal_times(self, table_id: int) -> dict[int, float]:
        """Commit time of every version that removed a file of the table."""
        with reading(self.engine) as conn:
            return file_repo.removal_times(conn, table_id)

    # -- streams ------------------------------------------------------------------------------

    def find_stream(self, name: str) -> StreamInfo | None:
        with reading(self.engine) as conn:
            return stream_repo.find_live(conn, name)

    def stream(self, name: str) -> StreamInfo:
        found = self.find_stream(name)
        if found is None:
            raise StreamNotFoundError(
                f"Stream {name!r} does not exist.{did_you_mean(name, self.stream_names())}"
                " SHOW STREAMS lists the streams."
            )
        return found

    def stream_names(self) -> list[str]:
        with reading(self.engine) as conn:
            return stream_repo.live_names(conn)

    def list_streams(self, *, table_id: int | None = None) -> list[StreamInfo]:
        with reading(self.engine) as conn:
            return stream_repo.list_live(conn, table_id=table_id)

    # -- views --------------------------------------------------------------------------------

    def view_sql(self, name: str) -> str | None:
        with reading(self.engine) as conn:
            return view_repo.sql_of(conn, name)

    def list_views(self) -> list[tuple[str, str, float]]:
        with reading(self.engine) as conn:
            return view_repo.list_live(conn)

    # -- dynamic tables -----------------------------------------------------------------------

    def find_dynamic_table(self, name: str) -> DynamicTableInfo | None:
        with reading(self.engine) as conn:
            return dynamic_repo.find(conn, name)

    def dynamic_table_by_id(self, table_id: int) -> DynamicTableInfo | None:
        with reading(self.engine) as conn:
            return dynamic_repo.by_id(conn, table_id)

    def dynamic_tables_by_id(self, table_ids: Sequence[int]) -> dict[int, DynamicTableInfo]:
        """The live dynamic tables among ``table_ids``, by id, in one query."""
        if not table_ids:
            return {}
        with reading(self.engine) as conn:
            return dynamic_repo.by_ids(conn, table_ids)

    def list_dynamic_tables(self) -> list[DynamicTableInfo]:
        with reading(self.engine) as conn:
            return dynamic_repo.list_live(conn)

    def dynamic_version_at(self, table_id: int, data_timestamp: float) -> int | None:
        """The version of a dynamic table that holds its query at ``data_timestamp`` (None: it
        was not refreshed at that point)."""
        with reading(self.engine) as conn:
            return dynamic_repo.version_at(conn, table_id, data_timestamp)

    def refresh_history(
        self, table_id: int | None = None, *, limit: int | None = None
    ) -> list[RefreshInfo]:
        with reading(self.engine) as conn:
            return dynamic_repo.history(conn, table_id, limit=limit)

    # -- tasks --------------------------------------------------------------------------------

    def find_task(self, name: str) -> TaskInfo | None:
        with reading(self.engine) as conn:
            return task_repo.find(conn, name)

    def task_by_id(self, task_id: int) -> TaskInfo | None:
        with reading(self.engine) as conn:
            return task_repo.by_id(conn, task_id)

    def list_tasks(self) -> list[TaskInfo]:
        with reading(self.engine) as conn:
            return task_repo.list_live(conn)

    def task_runs(
        self,
        *,
        task_id: int | None = None,
        graph_run_id: int | None = None,
        state: str | None = None,
        limit: int | None = None,
    ) -> list[TaskRun]:
        """Task runs, newest first."""
        with reading(self.engine) as conn:
            return task_repo.runs(
                conn, task_id=task_id, graph_run_id=graph_run_id, state=state, limit=limit
            )

    def has_scheduled_objects(self) -> bool:
        """Whether a dynamic table, an external table or a task exists: what a scheduler
        looks after (read only)."""
        with reading(self.engine) as conn:
            return any(repo.any_live(conn) for repo in (dynamic_repo, external_repo, task_repo))

    # -- the writes that are no commits: task runs and leases (catalog/coordination.py) ------

    def add_task_run(self, run: TaskRun, claim: RunClaim | None = None) -> TaskRun | None:
        """Record a task run (EXECUTING when it starts, or SKIPPED): as stored, with its id. Under ``claim``,
        in the same transaction: the lease is still held, the task's next scheduled run moves
        from where the claimant saw it, and no other run of the graph is executing; else
        nothing is written and the answer is None (or, for an overlapping run, a SKIPPED row).
        """
        return coordination.add_task_run(self.engine, run, claim, postgres=self._is_postgres)

    def end_task_run(self, ending: FinishTaskRun, *, completed_at: float) -> bool:
        """End an EXECUTING run that committed nothing (FAILED, CANCELLED): False if it had
        ended already."""
        return coordination.end_task_run(self.engine, ending, completed_at=completed_at)

    def acquire_lease(self, name: str, holder: str, *, ttl: float, clock: Clock) -> int | None:
        """Take or renew lease ``name`` for ``holder`` (its epoch), or None while another
        holder's has not expired."""
        return coordination.acquire_lease(
            self.engine, name, holder, ttl=ttl, clock=clock, postgres=self._is_postgres
        )

    def release_lease(self, name: str, holder: str) -> None:
        coordination.release_lease(self.engine, name, holder)

    # -- ingest channels ----------------------------------------------------------------------

    def find_channel(self, table_id: int, name: str) -> ChannelInfo | None:
        with reading(self.engine) as conn:
            return channel_repo.find(conn, table_id, name)

    def list_channels(self, table_id: int) -> list[ChannelInfo]:
        with reading(self.engine) as conn:
            return channel_repo.list_on(conn, table_id)

    # -- connections and external tables ------------------------------------------------------

    def find_connection(self, name: str) -> ConnectionInfo | None:
        with reading(self.engine) as conn:
            return external_repo.find_connection(conn, name)

    def list_connections(self) -> list[ConnectionInfo]:
        with reading(self.engine) as conn:
            return external_repo.list_connections(conn)

    def find_external_table(self, name: str) -> ExternalTableInfo | None:
        with reading(self.engine) as conn:
            return external_repo.find(conn, name)

    def external_table_by_id(self, table_id: int) -> ExternalTableInfo | None:
        with reading(self.engine) as conn:
            return external_repo.by_id(conn, table_id)

    def list_external_tables(self) -> list[ExternalTableInfo]:
        with reading(self.engine) as conn:
            return external_repo.list_live(conn)

    def external_scope_of_version(self, table_id: int, version: int) -> ScopeRecord | None:
        """The scope external table ``table_id`` last had while ``version`` was current (None:
        not recorded, for versions older than the catalog's record of scopes)."""
        with reading(self.engine) as conn:
            return external_repo.scope_of_version(conn, table_id, version)

    def external_files(self, table_id: int) -> list[ExternalFile]:
        with reading(self.engine) as conn:
            return external_repo.files(conn, table_id)
