"""CREATE EXTERNAL TABLE … FROM CONNECTION: a PostgreSQL table loaded by snapshot-and-follow.

The initial load: a publication of the source table, then a new logical replication slot whose
exported snapshot every Spark JDBC partition imports (``SET TRANSACTION SNAPSHOT`` in its
``sessionInitStatement``; with ``fetchsize`` > 0 Spark's PostgreSQL dialect turns autocommit off,
so the import holds for the partition's query). The rows are committed as the table's first
version, with the slot's consistent point as its source position: the follow applies exactly
the source transactions that committed after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession

from changelake.catalog.model import ConnectionInfo, DataFile, ExternalDefinition
from changelake.catalog.requests import DefineExternalTable, IfExists
from changelake.catalog.writes import write_request
from changelake.dml.result import StatementResult
from changelake.errors import ConfigurationError, ObjectNotFoundError, SourceError, did_you_mean
from changelake.external.postgresql import postgres, replication
from changelake.external.postgresql.pgoutput import format_lsn
from changelake.external.postgresql.pgtypes import spark_type
from changelake.external.postgresql.postgres import to_postgres
from changelake.external.rows import first_load, stored_rows, table_schema
from changelake.plan.predicates import parse_scope
from changelake.runtime.env import Context
from changelake.schema import TableSchema
from changelake.spark.jobs import counted_jobs
from changelake.storage.writer import write_data
from changelake.txn.context import StatementContext

OPERATION = "CREATE EXTERNAL TABLE"
_INTEGERS = ("smallint", "int", "bigint")


@dataclass(frozen=True)
class NewPostgresTable:
    """CREATE EXTERNAL TABLE name [(columns)] FROM CONNECTION … TABLE … as checked values."""

    name: str
    connection: str
    table: str  # 'schema.table'
    columns: tuple[tuple[str, str], ...] | None  # (name, changelake type) to keep
    keys: tuple[str, ...] | None
    scope_mode: str  # ALL | DEPENDENTS
    scope: str | None  # the rows to hold (Spark SQL), None: all
    follow_lag: float
    properties: tuple[tuple[str, str], ...]
    if_exists: IfExists


def connection_of(ctx: StatementContext, name: str) -> ConnectionInfo:
    found = ctx.catalog.find_connection(name)
    if found is None:
        known = [c.name for c in ctx.catalog.list_connections()]
        raise ObjectNotFoundError(
            f"Connection {name} does not exist.{did_you_mean(name, known)} Create it with"
            " CREATE CONNECTION name TYPE = POSTGRES OPTIONS (host => …, database => …, user =>"
            " …, password_env => …)."
        )
    return found


def create(ctx: Context, new: NewPostgresTable) -> StatementResult:
    """Create the external table: check the source, load it at a slot's consistent point, and
    commit the rows with that point. On failure the slot and publication are dropped again."""
    ctx.require_no_transaction(OPERATION)
    existing = ctx.catalog.find_table(new.name)
    if existing is not None and new.if_exists is IfExists.KEEP:
        return StatementResult(ctx.statement_id, OPERATION, existing.name, message="exists")
    replaced = ctx.catalog.find_external_table(new.name) if existing is not None else None
    info = connection_of(ctx, new.connection)
    statement_id = ctx.statement_id
    with postgres.connect(info) as conn:
        postgres.check_server(info, conn)
        source = postgres.describe(info, conn, new.table)
        columns, keys = _columns_and_keys(new, source)
        schema = table_schema(columns)
        name = replication.object_name(new.name)
        replication.create_publication(conn, name, source)
        try:
            with replication.exported_slot(info, name) as exported:
                # an empty scope (no dependent yet) reads nothing: no JDBC read, no Spark job
                files: list[DataFile] = []
                if parse_scope(new.scope) != ():
                    where = None if new.scope is None else to_postgres(new.scope)
                    df = snapshot(ctx.spark, info, source, exported, schema, where)
                    with counted_jobs(ctx.spark, f"initial load of external table {new.name}"):
                        files = write_data(
                            ctx.warehouse,
                            stored_rows(df, schema, keys),
                            schema=schema,
                            table=new.name,
                            directory=ctx.warehouse.data_dir(statement_id),
                        )
            definition = ExternalDefinition(
                kind="POSTGRES",
                connection=info.name,
                source=source.qualified,
                spec={
                    "keys": list(keys),
                    "columns": [list(c) for c in columns],
                    "explicit_columns": new.columns is not None,
                    "source_oid": source.oid,
                },
                scope_mode=new.scope_mode,
                follow_lag=new.follow_lag,
                slot=name,
                publication=name,
            )
            load = first_load(
                new.name, schema, new.properties, files, new.if_exists, kind=definition.kind
            )
            position = format_lsn(exported.position)
            defined = DefineExternalTable(new.name, definition, new.scope, position)
            result = ctx.commit(write_request(statement_id, OPERATION, [load], updates=(defined,)))
        except BaseException:
            replication.drop_objects(conn, name, name)
            raise
        if not result.applied:  # IF NOT EXISTS: one was made meanwhile
            replication.drop_objects(conn, name, name)
    if replaced is not None and result.applied:
        drop_source_objects(ctx, replaced.definition)
    table = result.tables[new.name.lower()]
    return StatementResult(
        statement_id,
        OPERATION,
        table.name,
        table.current_version,
        rows_inserted=load.inserted if result.applied else 0,
        message=f"External table {table.name} created at source position {position}.",
    )


def _columns_and_keys(
    new: NewPostgresTable, source: postgres.SourceTable
) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    about = f"External table {new.name} (source {source.qualified})"
    by_name = {c.name.lower(): c for c in source.columns}
    if new.columns is None:
        columns = [(c.name.lower(), spark_type(c.pg_type, column=c.name)) for c in source.columns]
    else:
        missing = [n for n, _ in new.columns if n.lower() not in by_name]
        if missing:
            raise ConfigurationError(
                f"{about}: the source has no column {', '.join(missing)}; its columns are"
                f" {', '.join(by_name)}."
            )
        columns = [(n.lower(), t) for n, t in new.columns]
    keys = tuple(k.lower() for k in (new.keys or source.primary_key))
    if source.replica_identity == "n" or not source.identity_columns:
        raise SourceError(
            f"{about}: the source table has no primary key and no replica identity, so its"
            " UPDATEs and DELETEs cannot be followed (and would fail once published). Add a"
            f" primary key to {source.qualified}, or set REPLICA IDENTITY FULL or USING INDEX on"
            " it; changelake never changes the source itself."
        )
    if not keys:
        raise SourceError(
            f"{about}: the source table has no primary key; name the columns that identify a"
            " row with KEYS (c1, …)."
        )
    identity = {c.lower() for c in source.identity_columns}
    uncovered = [k for k in keys if k not in identity]
    if uncovered and source.replica_identity != "f":
        raise SourceError(
            f"{about}: key column(s) {', '.join(uncovered)} are not in the source's replica"
            f" identity ({', '.join(sorted(identity))}), so a DELETE would not say which row"
            " went. Use the primary key as KEYS, or set REPLICA IDENTITY FULL on the source."
        )
    kept = {n for n, _ in columns}
    absent = [k for k in keys if k not in kept]
    if absent:
        raise ConfigurationError(f"{about}: the key column(s) {', '.join(absent)} must be kept.")
    return columns, keys


def snapshot(
    spark: SparkSession,
    info: ConnectionInfo,
    source: postgres.SourceTable,
    exported: replication.Exported,
    schema: TableSchema,
    where: str | None,
) -> DataFrame:
    """The source's rows in the exported snapshot, read by parallel JDBC partitions (split on
    an integer key column's range when there is one); ``where`` (PostgreSQL SQL: the scope) is
    in their queries, so only the rows it selects leave the source."""
    init = (
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;"
        f" SET TRANSACTION SNAPSHOT '{exported.snapshot}'"
    )
    reader = (
        spark.read.format("jdbc")
        .option("url", postgres.jdbc_url(info))
        .option("dbtable", _relation(source, where))
        .option("fetchsize", "10000")
        .option("sessionInitStatement", init)
        .option("preferTimestampNTZ", "true")
        .options(**postgres.jdbc_properties(info))
    )
    split = next((c for c in schema.stored if c.type in _INTEGERS), None)
    if split is not None:
        bounds = _bounds(info, source, exported, split.name, where)
        partitions = max(1, min(spark.sparkContext.defaultParallelism, bounds[2] // 50_000 + 1))
        if bounds[0] is not None and partitions > 1:
            reader = (
                reader.option("partitionColumn", split.name)
                .option("lowerBound", str(bounds[0]))
                .option("upperBound", str(bounds[1] + 1))
                .option("numPartitions", str(partitions))
            )
    return reader.load()


def _relation(source: postgres.SourceTable, where: str | None) -> str:
    table = f'"{source.schema}"."{source.name}"'
    return table if where is None else f"(SELECT * FROM {table} WHERE {where}) AS scoped"


def _bounds(
    info: ConnectionInfo,
    source: postgres.SourceTable,
    exported: replication.Exported,
    column: str,
    where: str | None,
) -> tuple[int | None, int | None, int]:
    """min and max of ``column`` in the rows read, inside the exported snapshot, and an
    estimate of the table's row count (PostgreSQL's statistics, else the key range)."""
    with postgres.connect(info) as conn:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            conn.execute(
                sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(exported.snapshot))
            )
            lo, hi = conn.execute(
                sql.SQL("SELECT min({c}), max({c}) FROM {t}").format(
                    c=sql.Identifier(column), t=sql.SQL(_relation(source, where))
                )
            ).fetchone()
        estimate = conn.execute(
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s", (source.oid,)
        ).fetchone()[0]
    if estimate <= 0 and lo is not None:  # never analyzed: the key range bounds the count
        estimate = hi - lo + 1
    return lo, hi, int(estimate)


def drop_source_objects(ctx: StatementContext, definition: ExternalDefinition) -> None:
    """Drop an external table's slot and publication on its source (after the table is gone)."""
    if definition.connection is None:
        return
    info = connection_of(ctx, definition.connection)
    slot, publication = definition.slot, definition.publication
    try:
        with postgres.connect(info) as conn:
            replication.drop_objects(conn, slot, publication)
    except psycopg.Error as e:
        raise SourceError(
            f"Could not drop replication slot {slot} and publication {publication} on the"
            f" source of connection {info.name} ({e}); drop them there with SELECT"
            f" pg_drop_replication_slot('{slot}'); DROP PUBLICATION {publication}; — a slot left"
            " behind keeps the source's WAL from being recycled."
        ) from e
