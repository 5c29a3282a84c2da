"""The catalog's database schema, defined once, in code.

Rows carry half-open validity ``[begin_version, end_version)``; ``end_version`` NULL means current.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
    text,
)

SCHEMA_VERSION = 12

metadata = MetaData()

meta = Table(
    "cl_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# The warehouse's commit clock: one row that every commit updates inside its catalog transaction,
# after its other locks. Commit numbers and timestamps both strictly increase, in the order in
# which commits become visible. ``definitions``: a random token that every commit changing what
# a name resolves to or a table's columns writes anew (DDL), so two snapshots with one token bind
# every view and query alike, in this catalog or any other (bound definitions are kept by it).
clock = Table(
    "cl_clock",
    metadata,
    Column("clock_id", Integer, primary_key=True, autoincrement=False),
    Column("commit_number", BigInteger, nullable=False),
    Column("committed_at", Float, nullable=False),
    Column("definitions", String(32), nullable=False, server_default=""),
)


def _live_names_unique(table: Table) -> Index:
    """Names are unique among ``table``'s live rows; a dropped row's name may be taken again."""
    live = text("dropped_at IS NULL")
    return Index(
        f"{table.name}_live_name",
        table.c.name,
        unique=True,
        sqlite_where=live,
        postgresql_where=live,
    )


tables = Table(
    "cl_tables",
    metadata,
    Column("table_id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False),
    Column("current_version", BigInteger, nullable=False),
    Column("next_row_id", BigInteger, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("dropped_at", Float),
    Column("properties", Text, nullable=False),
    Column("vacuumed_before_version", BigInteger, nullable=False, server_default="0"),
    # the commit that made current_version: a snapshot at or past it reads current_version
    Column("current_commit", BigInteger, nullable=False, server_default="0"),
)
_live_names_unique(tables)

columns = Table(
    "cl_columns",
    metadata,
    Column("table_id", Integer, primary_key=True),
    Column("column_id", Integer, primary_key=True),
    Column("begin_version", BigInteger, primary_key=True),
    Column("end_version", BigInteger),
    Column("ordinal", Integer, nullable=False),
    Column("name", String(255), nullable=False),
    Column("type", String(64), nullable=False),
    Column("nullable", Boolean, nullable=False),
)

versions = Table(
    "cl_versions",
    metadata,
    Column("table_id", Integer, primary_key=True),
    Column("version", BigInteger, primary_key=True),
    Column("committed_at", Float, nullable=False),
    Column("operation", String(64), nullable=False),
    Column("statement_id", String(64), nullable=False),
    Column("rows_inserted", BigInteger, nullable=False),
    Column("rows_updated", BigInteger, nullable=False),
    Column("rows_deleted", BigInteger, nullable=False),
    Column("files_added", Integer, nullable=False),
    Column("files_removed", Integer, nullable=False),
    # the warehouse-wide commit that made this version (section 2, "Commit order")
    Column("commit_number", BigInteger, nullable=False, server_default="0"),
)
# The operations whose versions only move rows between files (OPTIMIZE, a compaction by the
# ingest client or the scheduler): each commits alone, outside any transaction.
MOVING_OPERATIONS = ("OPTIMIZE", "COMPACT")
Index("cl_versions_statement", versions.c.statement_id)
Index("cl_versions_commit", versions.c.table_id, versions.c.commit_number)
Index("cl_versions_time", versions.c.table_id, versions.c.committed_at)

files = Table(
    "cl_files",
    metadata,
    Column("file_id", Integer, primary_key=True, autoincrement=True),
    Column("table_id", Integer, nullable=False),
    Column("path", String(1024), nullable=False),
    Column("row_count", BigInteger, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("base_row_id", BigInteger, nullable=False),
    Column("begin_version", BigInteger, nullable=False),
    Column("end_version", BigInteger),
    Column("stats", Text, nullable=False),
    # its rows are copies of rows the table held (a compaction wrote it) / its live rows were
    # copied into other files when it was removed (a compaction removed it): change scans see
    # through both (section 3, "Compaction")
    Column("moved_in", Boolean, nullable=False, server_default=false()),
    Column("moved_out", Boolean, nullable=False, server_default=false()),
    # the key → address index file that holds its rows' key hashes (storage/index.py); NULL:
    # lookups read the file's own key hashes
    Column("index_path", String(1024)),
)
Index("cl_files_table_path", files.c.table_id, files.c.path, unique=True)
Index("cl_files_live", files.c.table_id, files.c.end_version)

deletes = Table(
    "cl_deletes",
    metadata,
    Column("table_id", Integer, primary_key=True),
    Column("file_id", Integer, primary_key=True),
    Column("version", BigInteger, primary_key=True),
    Column("dv_path", String(1024), nullable=False),
    Column("row_count", BigInteger, nullable=False),
)
Index("cl_deletes_version", deletes.c.table_id, deletes.c.version)

views = Table(
    "cl_views",
    metadata,
    Column("view_id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False),
    Column("sql", Text, nullable=False),
    Column("depends_on", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("dropped_at", Float),
)
_live_names_unique(views)

streams = Table(
    "cl_streams",
    metadata,
    Column("stream_id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False),
    # the table it is on; 0 for a stream on a view (its tables are in cl_stream_frontiers)
    Column("table_id", Integer, nullable=False),
    Column("view_name", String(255)),  # the view it is on
    # what the view meant when the stream was created (its and nested views' definitions)
    Column("view_definition", Text),
    Column("append_only", Boolean, nullable=False),
    Column("show_initial_rows", Boolean, nullable=False),
    Column("initial_consumed", Boolean, nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("consumed_at", Float),
    Column("dropped_at", Float),
)
_live_names_unique(streams)

# A stream's frontier: per base table, the version whose changes are all consumed.
stream_frontiers = Table(
    "cl_stream_frontiers",
    metadata,
    Column("stream_id", Integer, primary_key=True),
    Column("table_id", Integer, primary_key=True),
    Column("version", BigInteger, nullable=False),
)

# An ingest channel: a named, ordered producer of rows into one table. ``epoch`` grows on every
# open, so a commit from an older holder is refused; ``offset_token`` is the last token committed
# with the channel's rows (NULL: none yet).
channels = Table(
    "cl_channels",
    metadata,
    Column("table_id", Integer, primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("epoch", BigInteger, nullable=False),
    Column("offset_token", Text),
    Column("committed_version", BigInteger),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# A dynamic table: a table (cl_tables, same id) whose rows are its query's result at its data
# timestamp. ``frontiers`` is JSON [[table id, version], ...]: per table the query reads, the
# version the last refresh read (NULL until the first refresh).
dynamic_tables = Table(
    "cl_dynamic_tables",
    metadata,
    Column("table_id", Integer, primary_key=True, autoincrement=False),
    Column("sql", Text, nullable=False),
    Column("depends_on", Text, nullable=False),  # JSON: the tables and views the query names
    Column("fingerprint", Text, nullable=False),  # of the query and the views it reads
    Column("target_lag", Float),  # seconds; NULL: DOWNSTREAM
    Column("refresh_mode", String(16), nullable=False),
    Column("effective_mode", String(16), nullable=False),
    Column("mode_reason", Text, nullable=False),
    Column("initialize", String(16), nullable=False),
    Column("scheduling_state", String(16), nullable=False),
    Column("suspended_reason", Text, nullable=False),
    Column("failures", Integer, nullable=False),
    Column("frontiers", Text),
    Column("data_timestamp", Float),
)

# The refresh history of dynamic tables, retained like table history.
dt_refreshes = Table(
    "cl_dt_refreshes",
    metadata,
    Column("refresh_id", Integer, primary_key=True, autoincrement=True),
    Column("table_id", Integer, nullable=False),
    Column("action", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("trigger", String(16), nullable=False),
    Column("data_timestamp", Float),
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float, nullable=False),
    Column("rows_inserted", BigInteger, nullable=False),
    Column("rows_deleted", BigInteger, nullable=False),
    Column("rows_updated", BigInteger, nullable=False),
    Column("spark_jobs", Integer, nullable=False),
    Column("error", Text, nullable=False),
    Column("version", BigInteger),  # the dynamic table's version after the refresh
    Column("commit_number", BigInteger, nullable=False),
    # why the refresh took its action (an adaptive choice's measure, a reinitialization's cause)
    Column("reason", Text, nullable=False, server_default=""),
)
Index("cl_dt_refreshes_table", dt_refreshes.c.table_id, dt_refreshes.c.data_timestamp)

# Leases: one holder at a time for a warehouse-wide role (the scheduler of `changelake serve`).
# ``epoch`` grows with every new holder; work done under a lease commits only while its epoch is
# current (the LeaseHeld requirement), so a holder that lost its lease cannot commit.
leases = Table(
    "cl_leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("expires_at", Float, nullable=False),
)

# A task: a statement (or a BEGIN ... COMMIT block) run on a schedule, after other tasks, or when
# its WHEN condition (over streams) holds. ``after`` is JSON [task id, ...] (its predecessors);
# ``next_at`` is when a started root with a schedule runs next (NULL: suspended, or no schedule).
tasks = Table(
    "cl_tasks",
    metadata,
    Column("task_id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False),
    Column("body", Text, nullable=False),  # JSON [statement text, ...]
    Column("sql", Text, nullable=False),  # the body as written
    Column("schedule", Text),  # as written: '5 MINUTE' | 'USING CRON <expr> <zone>'
    Column("after", Text, nullable=False),
    Column("condition", Text),  # the WHEN condition as written
    Column("options", Text, nullable=False),  # JSON {option: value}
    Column("state", String(16), nullable=False),  # started | suspended
    Column("suspended_reason", Text, nullable=False),
    Column("failures", Integer, nullable=False),  # consecutive failed graph runs (a root's)
    Column("next_at", Float),
    Column("created_at", Float, nullable=False),
    Column("dropped_at", Float),
)
Index("cl_tasks_name", tasks.c.name, tasks.c.dropped_at)

# Task runs: one row per task per graph run (the root's run id is the graph run id), written
# EXECUTING when it starts and finished with the statement's own commit, so a run commits once.
task_runs = Table(
    "cl_task_runs",
    metadata,
    Column("run_id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, nullable=False),
    Column("graph_run_id", Integer),
    Column("attempt", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("trigger", String(16), nullable=False),  # SCHEDULED | TRIGGERED | MANUAL
    Column("reason", Text, nullable=False),  # why SKIPPED / CANCELLED / FAILED, in words
    Column("scheduled_at", Float, nullable=False),
    Column("started_at", Float),
    Column("completed_at", Float),
    Column("statement_id", String(64)),
    Column("error", Text, nullable=False),
    Column("spark_jobs", Integer, nullable=False),
    Column("holder", String(255), nullable=False),  # the process that ran it
    Column("commit_number", BigInteger),
)
Index("cl_task_runs_task", task_runs.c.task_id, task_runs.c.run_id)
Index("cl_task_runs_state", task_runs.c.state)

# A connection to another database (external tables read through it). ``options`` is JSON of
# where the database is and where its secret is found (an environment variable or a file, by
# name): never a secret itself.
connections = Table(
    "cl_connections",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("kind", String(16), nullable=False),  # POSTGRES
    Column("options", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)

# An external table: a table (cl_tables, same id) whose rows follow a source: a PostgreSQL
# table through a connection, or a directory of files. ``spec`` is JSON of what CREATE fixed
# (the source's keys and columns, a file format, a pattern); ``scope`` is the predicate of the
# rows it holds (NULL: all).
external_tables = Table(
    "cl_external_tables",
    metadata,
    Column("table_id", Integer, primary_key=True, autoincrement=False),
    Column("kind", String(16), nullable=False),  # POSTGRES | FILES
    Column("connection", String(255)),
    Column("source", Text, nullable=False),  # 'schema.table' | a directory's URI
    Column("spec", Text, nullable=False),
    Column("scope_mode", String(16), nullable=False),  # ALL | DEPENDENTS
    Column("scope", Text),
    Column("follow_lag", Float, nullable=False),  # seconds
    Column("state", String(16), nullable=False),  # ACTIVE | SUSPENDED | FAILED
    Column("error", Text, nullable=False),
    Column("slot", String(63)),
    Column("publication", String(63)),
    Column("followed_at", Float),  # when a follow last found the source caught up
    # where the rows are: the source position (an LSN) committed with the rows that reach it
    Column("position", Text),
    Column("bootstrap", Text),  # a widening of the scope under way, in words (NULL: none)
)

# The scopes an external table has had: each from the commit that set it (``begin_commit``) to the
# next row's. A read of one of its versions is checked against the scope it had then.
external_scopes = Table(
    "cl_external_scopes",
    metadata,
    Column("table_id", Integer, primary_key=True),
    Column("begin_commit", BigInteger, primary_key=True),
    Column("scope", Text),  # NULL: every row
)

# The files a FILES external table has registered, once each: path, size and modification time
# when registered.
external_files = Table(
    "cl_external_files",
    metadata,
    Column("table_id", Integer, primary_key=True),
    Column("path", String(1024), primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("modified", Float, nullable=False),
)
