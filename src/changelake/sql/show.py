"""DESCRIBE TABLE, DESCRIBE HISTORY, SHOW TABLES / VIEWS: catalog metadata as small DataFrames."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

if TYPE_CHECKING:
    from changelake.session import Session


def _ts(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch)


def describe_table(session: Session, name: str) -> DataFrame:
    info = session.catalog.table(name)
    schema = session.catalog.schema_at(info.table_id, session.read_version(info))
    rows = [(c.name, c.type.upper(), c.nullable) for c in schema.columns]
    return session.spark.createDataFrame(rows, "name string, type string, nullable boolean")


def describe_history(session: Session, name: str) -> DataFrame:
    info = session.catalog.table(name)
    rows = [
        (
            v.version,
            _ts(v.committed_at),
            v.operation,
            v.statement_id,
            v.rows_inserted,
            v.rows_updated,
            v.rows_deleted,
            v.files_added,
            v.files_removed,
        )
        for v in session.catalog.versions(info.table_id)
    ]
    return session.spark.createDataFrame(
        rows,
        "version bigint, committed_at timestamp, operation string, statement_id string,"
        " rows_inserted bigint, rows_updated bigint, rows_deleted bigint,"
        " files_added int, files_removed int",
    )


def show_tables(session: Session) -> DataFrame:
    rows = []
    for info in session.catalog.list_tables():
        files = session.catalog.snapshot_files(info.table_id, info.current_version)
        rows.append(
            (
                info.name,
                _ts(info.created_at),
                info.current_version,
                sum(f.live_rows for f in files),
                len(files),
                float(info.retention_days()),
            )
        )
    return session.spark.createDataFrame(
        rows,
        "name string, created_at timestamp, version bigint, rows bigint, files int,"
        " retention_days double",
    )


def show_views(session: Session) -> DataFrame:
    rows = [(name, _ts(created), sql) for name, sql, created in session.catalog.list_views()]
    return session.spark.createDataFrame(rows, "name string, created_at timestamp, text string")
