"""CREATE, ALTER and DROP DYNAMIC TABLE.

A dynamic table is a table (``cl_tables``, marked by its ``dynamic`` property) with a row in
``cl_dynamic_tables``. Its columns are its query's, plus the hidden row key (``_cl_row_key``, the
query's ROW_ID), last. With INITIALIZE = ON_CREATE, the table is created holding the query's rows
at the creation's data timestamp, and its first refresh recorded, in one commit: a query that
fails creates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from changelake.catalog.alters import UNSET, AlterDynamicTable, Unset
from changelake.catalog.internal import check_user_name
from changelake.catalog.model import (
    DYNAMIC_PROPERTY,
    DynamicDefinition,
    RefreshAction,
    RefreshMode,
    RefreshRecord,
    RefreshState,
)
from changelake.catalog.requests import (
    CommitRequest,
    CreateTable,
    DefineDynamicTable,
    DropTable,
    IfExists,
    RecordRefresh,
    SetProperties,
    Update,
)
from changelake.catalog.writes import TableWrite, write_request
from changelake.changes.columns import METADATA_ROW_ID
from changelake.dml.common import write_rows
from changelake.dml.result import StatementResult
from changelake.dynamic.dag import dynamic_table, refresh_round, refresh_with_upstreams
from changelake.dynamic.definition import Definition, define, effective_mode
from changelake.dynamic.evaluate import query_rows
from changelake.dynamic.maintain import Ends, aggregated_rows, input_rows, maintained
from changelake.dynamic.refresh import data_timestamp_now, versions_at
from changelake.dynamic.spec import REFRESH_MODES, DynamicSpec, choice, table_properties, target_lag
from changelake.errors import ConflictError, InvalidStatementError, ObjectExistsError
from changelake.runtime.env import Context
from changelake.schema import ROW_KEY, Column, TableSchema, quoted
from changelake.spark.jobs import counted_jobs
from changelake.storage.writer import schema_of_dataframe, table_type
from changelake.txn.context import StatementContext


@dataclass(frozen=True)
class NewDynamicTable:
    """CREATE [OR REPLACE] DYNAMIC TABLE [IF NOT EXISTS] name [(columns)] ... AS sql."""

    name: str
    columns: tuple[str, ...] | None
    sql: str
    spec: DynamicSpec
    if_exists: IfExists


def create_dynamic_table(ctx: Context, new: NewDynamicTable) -> StatementResult:
    name = new.name.lower()
    about = f"CREATE DYNAMIC TABLE {name}"
    ctx.require_no_transaction(about)
    check_user_name(name, kind="dynamic table")
    existing = ctx.catalog.find_table(name)
    if existing is not None and new.if_exists is IfExists.KEEP:
        return StatementResult(
            ctx.statement_id, "CREATE DYNAMIC TABLE", name, message=f"{name} already exists."
        )
    if existing is not None and new.if_exists is IfExists.REPLACE and not existing.is_dynamic():
        raise ObjectExistsError(
            f"{about}: {name} is a table, not a dynamic table; OR REPLACE replaces only a"
            f" dynamic table. Drop the table first (DROP TABLE {name})."
        )
    definition = define(ctx, new.sql, about)
    if name in definition.depends_on:
        raise InvalidStatementError(f"{about}: its query reads {name} itself.")
    mode, reason = effective_mode(new.spec.refresh_mode, definition, about)
    initialize = new.spec.initialize == "ON_CREATE" and not (
        existing is not None and new.if_exists is IfExists.ERROR
    )
    data_timestamp = data_timestamp_now(ctx)
    if initialize:
        ends = _ends_at(ctx, definition, data_timestamp)
    else:  # only the columns are needed now
        ends = {t: (info, ctx.read_version(info)) for t, info in definition.tables.items()}
    rows, schema = _first_rows(ctx, definition, ends, data_timestamp, new.columns, about)
    table, defined = _declared(new, schema, definition, mode, reason)
    updates: tuple[Update, ...]
    if initialize:
        write, jobs = _initialized(ctx, table, rows)
        updates = (defined, RecordRefresh(name, _first_refresh(write, ends, data_timestamp, jobs)))
    else:
        write, updates = TableWrite.creating(table), (defined,)
    request = write_request(ctx.statement_id, "CREATE DYNAMIC TABLE", [write], updates=updates)
    info = ctx.catalog.commit([request], clock=ctx.clock).tables[name]
    when = "initialized" if initialize else "created; its first scheduled refresh initializes it"
    return StatementResult(
        ctx.statement_id,
        "CREATE DYNAMIC TABLE",
        info.name,
        info.current_version,
        rows_inserted=write.inserted,
        message=f"Dynamic table {info.name} {when} (refresh mode {mode}: {reason}).",
    )


def _declared(
    new: NewDynamicTable, schema: TableSchema, definition: Definition, mode: str, reason: str
) -> tuple[CreateTable, DefineDynamicTable]:
    """The new table (without files: its write holds them) and its definition as a dynamic
    table, refreshed in ``mode`` for ``reason``."""
    name = new.name.lower()
    properties = {
        "data_retention_time_in_days": "1",
        **dict(new.spec.properties),
        DYNAMIC_PROPERTY: "true",
    }
    table = CreateTable(name, schema, tuple(sorted(properties.items())), if_exists=new.if_exists)
    dynamic = DynamicDefinition(
        sql=new.sql,
        depends_on=definition.depends_on,
        fingerprint=definition.fingerprint,
        target_lag=new.spec.target_lag,
        refresh_mode=new.spec.refresh_mode,
        effective_mode=mode,
        mode_reason=reason,
        initialize=new.spec.initialize,
    )
    return table, DefineDynamicTable(name, dynamic)


def _ends_at(ctx: Context, definition: Definition, data_timestamp: float) -> Ends:
    """The versions a first refresh at ``data_timestamp`` reads, the dynamic tables among them
    refreshed to it first."""
    _refresh_upstreams(ctx, definition, data_timestamp)
    ends = versions_at(ctx, list(definition.tables.values()), data_timestamp, explain=False)
    return {t: (info, ends[t]) for t, info in definition.tables.items()}


def _first_rows(
    ctx: Context,
    definition: Definition,
    ends: Ends,
    data_timestamp: float,
    columns: tuple[str, ...] | None,
    about: str,
) -> tuple[DataFrame, TableSchema]:
    """The query's rows at ``ends`` (its columns named ``columns`` if given), with the hidden
    ones (METADATA$ROW_ID, an aggregate's state), and the table's schema."""
    state = maintained(ctx, definition, ends)
    if state is None:
        rows = query_rows(ctx, definition, ends, data_timestamp)
    else:
        input_ = input_rows(ctx, state, ends)
        rows = aggregated_rows(state, input_, [c.name for c in state.columns]).frame(ctx.spark)
    hidden = [METADATA_ROW_ID, *(state.state if state is not None else ())]
    rows = _named(rows, columns, about, hidden)
    return rows, _schema(rows, hidden, about)


def _schema(rows: DataFrame, hidden: list[str], about: str) -> TableSchema:
    """The query's visible columns, then the aggregate's state (``hidden`` after the ROW_ID),
    then the row key."""
    visible = schema_of_dataframe(rows.drop(*hidden), about=about)
    kept = [f for f in rows.schema.fields if f.name in hidden[1:]]
    first = visible.next_column_id
    extra = [
        Column(first + i, f.name, table_type(f.dataType, f.name, about), True)
        for i, f in enumerate(kept)
    ]
    key = Column(first + len(extra), ROW_KEY, "string", True)
    return TableSchema((*visible.columns, *extra, key))


def _initialized(ctx: Context, table: CreateTable, rows: DataFrame) -> tuple[TableWrite, int]:
    """The write that creates ``table`` holding the query's ``rows``, and the Spark jobs it ran."""
    with counted_jobs(ctx.spark, f"creation of dynamic table {table.name}") as count:
        stored = [F.col(quoted(c.name)) for c in table.schema.stored]
        files = write_rows(
            ctx, rows.select(*stored, F.col(METADATA_ROW_ID)), schema=table.schema, table=table.name
        )
        jobs = count()
    return TableWrite.creating(table, files), jobs


def _first_refresh(
    write: TableWrite, ends: Ends, data_timestamp: float, jobs: int
) -> RefreshRecord:
    """The creation's refresh: a FULL one at ``data_timestamp``, of the tables at ``ends``."""
    return RefreshRecord(
        action=RefreshAction.FULL,
        state=RefreshState.SUCCEEDED,
        trigger="CREATION",
        data_timestamp=data_timestamp,
        started_at=data_timestamp,
        frontiers=tuple((t, v) for t, (_, v) in sorted(ends.items())),
        rows_inserted=write.inserted,
        spark_jobs=jobs,
        reason="its creation",
    )


def _refresh_upstreams(
    ctx: Context,
    definition: Definition,
    data_timestamp: float,
) -> None:
    """Refresh the dynamic tables a new one reads at its first data timestamp, as the statement
    that creates it."""
    upstreams = [
        found
        for info in definition.tables.values()
        if info.is_dynamic() and (found := ctx.catalog.dynamic_table_by_id(info.table_id))
    ]
    if not upstreams:
        return
    done = refresh_round(
        ctx,
        upstreams,
        data_timestamp,
        trigger=lambda _: "DOWNSTREAM",
        statement_id=ctx.statement_id,
    )
    if done.failed:
        raise next(iter(done.failed.values()))
    if done.lost:
        raise ConflictError(
            "A dynamic table the new one reads was refreshed by another refresh meanwhile;"
            " create it again."
        )


def _named(
    rows: DataFrame, columns: tuple[str, ...] | None, about: str, hidden: list[str]
) -> DataFrame:
    shown = [c for c in rows.columns if c not in hidden]
    if columns is None:
        return rows
    if len(columns) != len(shown):
        raise InvalidStatementError(
            f"{about}: {len(columns)} column name(s) for a query of {len(shown)} column(s)."
        )
    renamed = [F.col(quoted(a)).alias(b) for a, b in zip(shown, columns, strict=True)]
    return rows.select(*renamed, *[F.col(h) for h in hidden])


def alter_dynamic_table(
    ctx: Context,
    name: str,
    action: str,
    options: dict[str, str],
) -> StatementResult:
    """ALTER DYNAMIC TABLE name REFRESH | SUSPEND | RESUME | SET ..."""
    dyn = dynamic_table(ctx, name)
    if action == "REFRESH":
        outcomes = refresh_with_upstreams(ctx, dyn)
        mine = outcomes[-1]
        r = mine.record
        return StatementResult(
            ctx.statement_id,
            "REFRESH",
            dyn.name,
            mine.version,
            rows_inserted=r.rows_inserted,
            rows_updated=r.rows_updated,
            rows_deleted=r.rows_deleted,
            message=f"{r.action} refresh of {dyn.name}"
            + (f" (and {len(outcomes) - 1} upstream)" if len(outcomes) > 1 else "")
            + ".",
        )
    return change_dynamic_table(ctx, dyn.name, action, options)


def change_dynamic_table(
    ctx: StatementContext, name: str, action: str, options: dict[str, str]
) -> StatementResult:
    """ALTER DYNAMIC TABLE name SUSPEND | RESUME | SET ... (catalog only)."""
    about = f"ALTER DYNAMIC TABLE {name}"
    dyn = dynamic_table(ctx, name)
    updates: list[Update] = []
    if action == "SUSPEND":
        updates.append(AlterDynamicTable.suspending(dyn.table_id, "suspended by ALTER"))
    elif action == "RESUME":
        updates.append(AlterDynamicTable.resuming(dyn.table_id))
    else:
        lag: float | None | Unset = UNSET
        if "TARGET_LAG" in options:
            lag = target_lag(options["TARGET_LAG"], about=about)
        mode: RefreshMode | Unset = UNSET
        effective: RefreshMode | Unset = UNSET
        reason: str | Unset = UNSET
        if "REFRESH_MODE" in options:
            mode = RefreshMode(
                choice(options["REFRESH_MODE"], REFRESH_MODES, option="REFRESH_MODE", about=about)
            )
            definition = define(ctx, dyn.definition.sql, about)
            chosen, reason = effective_mode(mode, definition, about)
            effective = RefreshMode(chosen)
        properties = dict(table_properties(options, about=about))
        if properties:
            updates.append(SetProperties(dyn.table_id, tuple(sorted(properties.items()))))
        if lag is not UNSET or mode is not UNSET:
            updates.append(
                AlterDynamicTable(
                    dyn.table_id,
                    target_lag=lag,
                    refresh_mode=mode,
                    effective_mode=effective,
                    mode_reason=reason,
                )
            )
    ctx.commit(CommitRequest(ctx.statement_id, f"ALTER DYNAMIC TABLE {action}", tuple(updates)))
    return StatementResult(
        ctx.statement_id, f"ALTER DYNAMIC TABLE {action}", dyn.name, message=f"{dyn.name} altered."
    )


def drop_dynamic_table(ctx: StatementContext, name: str, *, if_exists: bool) -> StatementResult:
    found = ctx.catalog.find_dynamic_table(name)
    if found is None and if_exists and ctx.catalog.find_table(name) is None:
        return StatementResult(
            ctx.statement_id, "DROP DYNAMIC TABLE", name, message=f"{name} did not exist."
        )
    dyn = found or dynamic_table(ctx, name)
    ctx.commit(CommitRequest(ctx.statement_id, "DROP DYNAMIC TABLE", (DropTable(dyn.table_id),)))
    return StatementResult(
        ctx.statement_id,
        "DROP DYNAMIC TABLE",
        dyn.name,
        message=f"Dynamic table {dyn.name} dropped.",
    )
