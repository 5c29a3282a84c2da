"""CREATE EXTERNAL TABLE … FROM FILES: a table whose rows are those of the files under a
location, each file read once (Snowflake's external tables on a stage as the model).

A refresh lists the location (``stage``), reads exactly the files not registered yet with Spark,
in the table's columns, into the table's own Parquet files, and commits those rows together with
the files' registration (path, size, modification time): a file's rows are appended once. The
table is insert-only: its rows have no source key, and a registered file that changed or vanished
is not read again but reported in the table's ``error`` (SHOW / DESCRIBE EXTERNAL TABLE(S)).

Two refreshes cannot both register a file: the table's source position is the number of files
registered, which only grows, and a refresh's commit requires the position it read
(``FollowedFrom``), so the slower of two refreshes fails with ConflictError and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs
from pyspark.sql import SparkSession

from changelake.catalog.alters import UNSET, AlterExternalTable, Unset
from changelake.catalog.model import (
    DataFile,
    ExternalDefinition,
    ExternalFile,
    ExternalTableInfo,
    ExternalTableState,
)
from changelake.catalog.requests import (
    DefineExternalTable,
    FollowedFrom,
    IfExists,
    RegisterFiles,
    Requirement,
    Update,
)
from changelake.catalog.store import Catalog
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.dml.result import StatementResult
from changelake.errors import InvalidStatementError, SourceError, UnsupportedError
from changelake.external.directory.stage import READ_FAILURES, FileFormat, Stage, check_pattern
from changelake.external.postgresql.follow import Followed
from changelake.external.postgresql.pgtable import drop_source_objects
from changelake.external.rows import first_load
from changelake.runtime.env import Context, Env
from changelake.schema import Column, TableSchema, check_column_name
from changelake.spark.jobs import counted_jobs
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import schema_of_dataframe, write_data
from changelake.txn.context import new_statement_id

OPERATION = "CREATE EXTERNAL TABLE"
REFRESH = "REFRESH FILES"
KIND = "FILES"
_LISTED = 10  # files a report names before it counts the rest


@dataclass(frozen=True)
class NewFilesTable:
    """CREATE EXTERNAL TABLE name [(columns)] FROM FILES … as checked values."""

    name: str
    location: str  # a directory or URI
    file_format: Mapping[str, str]  # FILE_FORMAT's options, upper-case keys, TYPE among them
    pattern: str | None  # a regular expression the files' relative paths must match
    columns: tuple[tuple[str, str], ...] | None  # (name, changelake type); None: inferred
    follow_lag: float
    properties: tuple[tuple[str, str], ...]
    if_exists: IfExists


def create(ctx: Context, new: NewFilesTable) -> StatementResult:
    """Create the table with the rows of the files under its location, registered in the same
    commit; its columns are given, or inferred from those files."""
    ctx.require_no_transaction(OPERATION)
    existing = ctx.catalog.find_table(new.name)
    if existing is not None and new.if_exists is IfExists.KEEP:
        return StatementResult(ctx.statement_id, OPERATION, existing.name, message="exists")
    replaced = ctx.catalog.find_external_table(new.name) if existing is not None else None
    about = f"CREATE EXTERNAL TABLE {new.name}"
    file_format = FileFormat.of(dict(new.file_format), about=about)
    check_pattern(new.pattern, about=about)
    stage = Stage.at(new.location)
    found = stage.files(new.pattern)
    listed = sorted(found)
    if new.columns is not None:
        read = list(new.columns)
        schema = _schema_of(read, about=about)
    elif listed:
        read, schema = _inferred(ctx.spark, stage, file_format, listed, about=about)
    else:
        matching = f" matching PATTERN {new.pattern!r}" if new.pattern else ""
        raise SourceError(
            f"{about}: there are no files under {stage.location}{matching} to infer the columns"
            " from; give the table a column list: CREATE EXTERNAL TABLE"
            f" {new.name} (name type, …) FROM FILES …."
        )
    spec = {
        "file_format": dict(sorted(new.file_format.items())),
        "pattern": new.pattern,
        "read_columns": [list(c) for c in read],
    }
    files = _load(
        ctx.spark,
        ctx.warehouse,
        stage,
        file_format,
        listed,
        table=new.name,
        schema=schema,
        read=read,
        statement_id=ctx.statement_id,
    )
    definition = ExternalDefinition(
        kind=KIND,
        connection=None,
        source=stage.location,
        spec=spec,
        scope_mode="ALL",
        follow_lag=new.follow_lag,
    )
    load = first_load(new.name, schema, new.properties, files, new.if_exists, kind=KIND)
    registered = tuple(found[p] for p in listed)
    defined = DefineExternalTable(new.name, definition, None, str(len(listed)), registered)
    result = ctx.commit(write_request(ctx.statement_id, OPERATION, [load], updates=(defined,)))
    if replaced is not None and result.applied:
        drop_source_objects(ctx, replaced.definition)
    table = result.tables[new.name.lower()]
    rows = sum(f.row_count for f in files) if result.applied else 0
    return StatementResult(
        ctx.statement_id,
        OPERATION,
        table.name,
        table.current_version,
        rows_inserted=rows,
        message=f"External table {table.name} created from {len(listed)} file(s) under"
        f" {stage.location}.",
    )


def _schema_of(columns: Sequence[tuple[str, str]], *, about: str) -> TableSchema:
    seen: set[str] = set()
    for name, _ in columns:
        check_column_name(name)
        if name.lower() in seen:
            raise InvalidStatementError(f"{about}: column {name} appears twice.")
        seen.add(name.lower())
    return TableSchema(tuple(Column(i, n, t, True) for i, (n, t) in enumerate(columns, 1)))


def _inferred(
    spark: SparkSession,
    stage: Stage,
    file_format: FileFormat,
    paths: Sequence[str],
    *,
    about: str,
) -> tuple[list[tuple[str, str]], TableSchema]:
    """The columns Spark infers from the files ``paths``: (name, Spark type) to read them
    with, and the table's schema. A CSV file without PARSE_HEADER has columns c1, c2, …"""
    try:
        df = stage.load(file_format.reader(spark, None), paths)
    except READ_FAILURES as e:
        failure = stage.read_failure(e, paths)
        if failure is None:
            raise
        raise failure from e
    if file_format.type == "CSV" and not file_format.header_names:
        df = df.toDF(*(f"c{i}" for i in range(1, len(df.columns) + 1)))
    try:
        schema = schema_of_dataframe(df, about=f"{about} (columns inferred from its files)")
    except UnsupportedError as e:
        raise UnsupportedError(f"{e} Or give the table a column list (name type, …).") from e
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields], schema


def _load(
    spark: SparkSession,
    warehouse: Warehouse,
    stage: Stage,
    file_format: FileFormat,
    paths: Sequence[str],
    *,
    table: str,
    schema: TableSchema,
    read: Sequence[tuple[str, str]],
    statement_id: str,
) -> list[DataFile]:
    """Copy the rows of the files ``paths`` into new data files of ``table`` (not committed)
    by a Spark job that reads them in the columns ``read``; nothing is left behind if a file
    cannot be read."""
    if not paths:
        return []
    if file_format.type == "PARQUET":
        stage.check_parquet_columns(paths, [n for n, _ in read])
    directory = warehouse.data_dir(statement_id)
    try:
        with counted_jobs(spark, f"files of external table {table}"):
            df = stage.load(file_format.reader(spark, read), paths)
            return write_data(warehouse, df, schema=schema, table=table, directory=directory)
    except BaseException as e:
        path = warehouse.fs_path(directory)
        if warehouse.fs.get_file_info(path).type != pafs.FileType.NotFound:
            warehouse.fs.delete_dir(path)
        failure = stage.read_failure(e, paths) if isinstance(e, READ_FAILURES) else None
        if failure is None:
            raise
        raise failure from e


def refresh(
    env: Env,
    ext: ExternalTableInfo,
    *,
    requirements: Sequence[Requirement] = (),
) -> Followed:
    """Append the rows of the files under ``ext``'s location that it has not registered, and
    register them, in one commit; report registered files that changed or vanished in its
    error. In the result, ``changes`` counts the files read."""
    spec = ext.definition.spec
    stage = Stage(ext.definition.source)
    listed = stage.files(spec["pattern"])
    registered = {f.path: f for f in env.catalog.external_files(ext.table_id)}
    new = sorted(p for p in listed if p not in registered)
    report = _report(ext, registered, listed)
    error: str | Unset = UNSET
    if ext.state != ExternalTableState.FAILED and report != ext.error:  # FAILED keeps its error
        error = report
    if not new and error is UNSET:
        return Followed(files_registered=int(ext.position or 0))
    table_id, name, version = ext.table_id, ext.name, ext.info.current_version
    schema = env.catalog.schema_at(table_id, version)
    statement_id = new_statement_id()
    file_format = FileFormat.of(spec["file_format"], about=f"External table {name}")
    files = _load(
        env.spark,
        env.warehouse,
        stage,
        file_format,
        new,
        table=name,
        schema=schema,
        read=[(n, t) for n, t in spec["read_columns"]],
        statement_id=statement_id,
    )
    position = str(len(registered) + len(new))
    inserted = sum(f.row_count for f in files)
    write = TableWrite(
        table_id, name, version, WriteKind.APPEND, added=tuple(files), inserted=inserted
    )
    updates: list[Update] = []
    if new:
        updates.append(RegisterFiles(table_id, tuple(listed[p] for p in new)))
    followed = AlterExternalTable(
        table_id, followed_at=env.clock.now(), error=error, position=position if new else UNSET
    )
    updates.append(followed)
    request = write_request(
        statement_id,
        REFRESH,
        [write],
        updates=updates,
        requirements=(*requirements, FollowedFrom(table_id, name, ext.position, ext.scope)),
    )
    result = env.catalog.commit([request], clock=env.clock)
    return Followed(
        changes=len(new),
        inserted=inserted,
        files_registered=int(position),
        version=result.version_of(table_id),
    )


def _report(
    ext: ExternalTableInfo,
    registered: Mapping[str, ExternalFile],
    listed: Mapping[str, ExternalFile],
) -> str:
    """What the table's error says of its registered files that changed or vanished ('' when
    none did)."""
    changed = [
        p
        for p, f in registered.items()
        if p in listed and (listed[p].size, listed[p].modified) != (f.size, f.modified)
    ]
    vanished = [p for p in registered if p not in listed]
    if not changed and not vanished:
        return ""
    parts = [
        f"{what} {_names(paths)}"
        for what, paths in (("changed:", changed), ("vanished:", vanished))
        if paths
    ]
    return (
        f"{len(changed) + len(vanished)} registered file(s) under {ext.definition.source} changed"
        f" or vanished since they were read ({'; '.join(parts)}); their rows stay as first read"
        " and they are not read again. To read the files as they are now, recreate the table"
        f" (CREATE OR REPLACE EXTERNAL TABLE {ext.name} … FROM FILES …)."
    )


def _names(paths: Sequence[str]) -> str:
    shown = ", ".join(sorted(paths)[:_LISTED])
    return shown if len(paths) <= _LISTED else f"{shown} and {len(paths) - _LISTED} more"


def refresh_statement(ctx: Context, ext: ExternalTableInfo) -> StatementResult:
    """ALTER EXTERNAL TABLE … REFRESH of a FILES table: one refresh."""
    step = refresh(ctx.env, ext)
    after = ctx.catalog.external_table_by_id(ext.table_id)
    error = after.error if after is not None else ""
    return StatementResult(
        ctx.statement_id,
        "ALTER EXTERNAL TABLE REFRESH",
        ext.name,
        step.version,
        rows_inserted=step.inserted,
        message=f"{step.changes} new file(s) read; {step.files_registered} file(s) registered."
        + (f" {error}" if error else ""),
    )


def source_state(catalog: Catalog, ext: ExternalTableInfo) -> dict[str, object]:
    """What DESCRIBE EXTERNAL TABLE shows of a FILES table's source."""
    spec = ext.definition.spec
    return {
        "file_format": ", ".join(f"{k} = {v}" for k, v in spec["file_format"].items()),
        "pattern": spec["pattern"] or "",
        "files_registered": len(catalog.external_files(ext.table_id)),
    }
