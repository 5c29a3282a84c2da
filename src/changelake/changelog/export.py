"""``COPY INTO '<directory>' FROM (query) [FILE_FORMAT = (TYPE = PARQUET | JSON)]``: a query's
result (typically a change result or a stream rendered as a changelog) written as files, and the
streams it reads consumed exactly once.

``SELECT * FROM s CHANGES (FORMAT => ODF)`` exports as Parquet with ODF's INT32 ``op`` and the
``offset`` order column, in offset order; ``… (FORMAT => DEBEZIUM)`` with ``TYPE = JSON`` as JSON
lines, one Debezium envelope per line (``before``/``after`` written as ``null`` when absent).
Every value is kept exactly: Parquet holds every type; in JSON, timestamps, dates, decimals and
binary values are written as ``json_values.py`` says (Debezium's conventions).

Exactly once: the statement writes its files into a temporary directory, renames it into place
with its ``_SUCCESS`` manifest, and only then commits the frontier moves of the streams it read
(the same ``AdvanceStream`` update and ``FrontierAt`` requirement as a DML statement reading a
stream). The directory is named by the interval consumed (``changelog/layout.py`` has the layout
and the reader rule: read only directories with a ``_SUCCESS`` manifest), so:

- a crash before the rename leaves a ``_tmp-`` directory that readers skip and the next export
  removes;
- a crash after the rename, before the commit, leaves a complete directory but the frontier where
  it was: the re-run reads from the same frontier and replaces that directory;
- a crash after the commit: the re-run reads the next interval.

Without streams, an export writes ``export-<statement id>/`` the same way. An export cannot run
inside BEGIN … COMMIT (its files cannot be rolled back), nor write into the warehouse's own
directories.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.catalog.requests import CommitRequest
from changelake.changelog.json_values import WRITE_OPTIONS, encoded
from changelake.changelog.layout import (
    TEMPORARY,
    Consumption,
    ExportDirectory,
    ExportedFile,
    Manifest,
    directory_name,
)
from changelake.dialect import parse_one
from changelake.dml.common import stream_consumption
from changelake.errors import (
    ChangelakeError,
    ConflictError,
    ExportError,
    InvalidStatementError,
    member_named,
)
from changelake.plan.bind import Binder
from changelake.runtime.env import Context
from changelake.spark.errors import spark_errors, translate
from changelake.spark.local import local_dataframe
from changelake.storage.warehouse import Warehouse
from changelake.streams.frontier import StreamRead
from changelake.txn.context import StatementContext


class FileFormat(Enum):
    PARQUET = "parquet"
    JSON = "json"

    @staticmethod
    def parse(text: str) -> FileFormat:
        return member_named(FileFormat, text, "export file format")


RESULT_COLUMNS = (
    ("statement_id", "string"),
    ("operation", "string"),
    ("directory", "string"),
    ("file_format", "string"),
    ("files", "bigint"),
    ("rows", "bigint"),
    ("streams_consumed", "string"),
    ("message", "string"),
)


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: ``rows`` rows in ``files`` files in ``directory`` (a complete
    directory with a ``_SUCCESS`` manifest), and the stream intervals it consumed."""

    statement_id: str
    directory: str
    file_format: FileFormat
    files: int
    rows: int
    consumed: tuple[Consumption, ...] = ()

    @property
    def message(self) -> str:
        what = f"Wrote {self.rows} row(s) in {self.files} file(s) to {self.directory}"
        if not self.consumed:
            return what + "."
        return f"{what}; consumed {', '.join(c.label for c in self.consumed)}."

    def to_dataframe(self, spark: SparkSession) -> DataFrame:
        row = (
            self.statement_id,
            "COPY INTO",
            self.directory,
            self.file_format.name,
            self.files,
            self.rows,
            ", ".join(c.label for c in self.consumed),
            self.message,
        )
        return local_dataframe(spark, [row], RESULT_COLUMNS)


def export_sql(
    ctx: Context,
    query: str,
    *,
    path: str,
    file_format: str = "parquet",
) -> ExportResult:
    """``export`` of the query text ``query`` (what ``session.export`` calls)."""
    tree = parse_one(query)
    if not isinstance(tree, exp.Query):
        raise InvalidStatementError(
            "export takes a query (SELECT ..., e.g. SELECT * FROM s CHANGES (FORMAT => ODF)),"
            f" not a {type(tree).__name__} statement."
        )
    return export(ctx, tree, path=path, file_format=FileFormat.parse(file_format))


def export(
    ctx: Context,
    query: exp.Expression,
    *,
    path: str,
    file_format: FileFormat,
) -> ExportResult:
    """Write the rows of ``query`` into a new directory under ``path``, then commit the
    consumption of the streams it reads (see the module docstring)."""
    statement = f"COPY INTO '{path}'"
    with spark_errors(statement):
        ctx.require_no_transaction("COPY INTO (an export)")
        target = _target(path, ctx.warehouse)
        binder = Binder(ctx)
        df = binder.query(query)
        reads = sorted(binder.stream_reads.values(), key=lambda r: r.stream.stream_id)
        consumed = tuple(_consumption(r) for r in reads)
        name = directory_name(consumed, statement_id=ctx.statement_id)
        _check_same_streams(target, name, consumed)
        _io(statement, target.remove_temporaries)
        temporary = f"{TEMPORARY}{name}-{ctx.statement_id[:8]}"
        try:
            files = _write(ctx.spark, df, target, temporary, file_format, statement=statement)
            manifest = Manifest(ctx.statement_id, file_format.value, files, consumed)
            _io(statement, lambda: target.write_manifest(temporary, manifest))
            before_rename(target.uri_of(temporary))
            _io(statement, lambda: target.remove_uncommitted(consumed))
            _io(statement, lambda: target.publish(temporary, name))
        except Exception:
            target.remove(temporary)  # (a killed process leaves it for the next export)
            raise
        before_commit(target.uri_of(name))
        _commit(ctx, reads, consumed, target, name)
    return ExportResult(
        ctx.statement_id,
        target.uri_of(name),
        file_format,
        len(manifest.files),
        manifest.rows,
        consumed,
    )


# Seams for crash tests: called after the files are complete in the temporary directory, and
# after its rename into place before the catalog commit.
def before_rename(directory: str) -> None:
    pass


def before_commit(directory: str) -> None:
    pass


# -- the pieces -----------------------------------------------------------------------------------


def _consumption(read: StreamRead) -> Consumption:
    stream = read.stream
    return Consumption(
        stream.name, stream.stream_id, stream.frontiers, read.ends, stream.pending_initial_rows
    )


def _target(path: str, warehouse: Warehouse) -> ExportDirectory:
    if not path.strip():
        raise InvalidStatementError("COPY INTO needs a directory: COPY INTO '/path/to/dir' ...")
    target_path, root = _normal(path), _normal(warehouse.root)
    inside = [root] + [f"{root}/{d}" for d in ("data", "dv")]
    if any(target_path == d or target_path.startswith(d + "/") for d in inside):
        raise InvalidStatementError(
            f"COPY INTO {path!r}: that is inside the warehouse's own data directories"
            f" ({root}), whose files only the catalog manages (VACUUM deletes files it does not"
            " know). Export to a directory outside the warehouse."
        )
    return _io(f"COPY INTO '{path}'", lambda: ExportDirectory.at(path))


def _normal(location: str) -> str:
    location = location.strip().removeprefix("file://")
    if "://" in location:
        return location.rstrip("/")
    return os.path.realpath(os.path.abspath(location)).rstrip("/")


def _io(statement: str, action):  # noqa: ANN001, ANN202 - a thunk and its result
    """Run a file operation on the target, its failures as ExportError."""
    try:
        return action()
    except (OSError, ValueError) as e:
        if isinstance(e, ChangelakeError):
            raise
        raise ExportError(
            f"{statement}: could not write the export: {e}. Check that the location is a"
            " directory this process can write."
        ) from e


def _check_same_streams(
    target: ExportDirectory, name: str, consumed: tuple[Consumption, ...]
) -> None:
    """A directory of that name from a stream dropped and created again is committed data."""
    existing = target.manifest(name) if consumed else None
    if existing is None:
        return
    ids = [c.stream_id for c in existing.consumed]
    if ids != [c.stream_id for c in consumed]:
        raise InvalidStatementError(
            f"COPY INTO {target.uri!r}: {name}/ holds an export of an earlier stream of the same"
            " name (dropped and created again); export this stream to another directory."
        )


def _write(
    spark: SparkSession,
    df: DataFrame,
    target: ExportDirectory,
    temporary: str,
    file_format: FileFormat,
    *,
    statement: str,
) -> tuple[ExportedFile, ...]:
    uri = target.uri_of(temporary)
    try:
        if file_format is FileFormat.PARQUET:
            df.write.mode("errorifexists").parquet(uri)
        else:
            encoded(df).write.mode("errorifexists").options(**WRITE_OPTIONS).json(uri)
        files = target.data_files(temporary)
        counts = _row_counts(spark, target, temporary, [n for n, _ in files], file_format)
    except (PySparkException, Py4JError) as e:
        translated = translate(e, statement=statement) if isinstance(e, PySparkException) else None
        if translated is not None:
            raise translated from e
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExportError(
            f"{statement}: Spark could not write the files to {uri}: {first} Check that the"
            " location exists, is reachable from Spark and is writable."
        ) from e
    return tuple(ExportedFile(n, counts.get(n, 0), size) for n, size in files)


def _row_counts(
    spark: SparkSession,
    target: ExportDirectory,
    directory: str,
    names: list[str],
    file_format: FileFormat,
) -> dict[str, int]:
    """Rows per file name: from the Parquet footers, or counted by Spark (JSON lines). Spark is
    given the files one by one, as it skips a directory whose name starts with "_"."""
    if file_format is FileFormat.PARQUET:
        return {n: target.parquet_rows(f"{directory}/{n}") for n in names}
    if not names:
        return {}
    files = [target.uri_of(f"{directory}/{n}") for n in names]
    counted = spark.read.text(files).groupBy(F.input_file_name().alias("f")).count().collect()
    return {r.f.rsplit("/", 1)[-1]: r["count"] for r in counted}


def _commit(
    ctx: StatementContext,
    reads: Sequence[StreamRead],
    consumed: tuple[Consumption, ...],
    target: ExportDirectory,
    name: str,
) -> None:
    """Commit the frontier moves. If another consumer moved a frontier first, the directory is
    not this target's to keep, unless the stream now stands exactly where it would have."""
    advances, frontiers = stream_consumption(reads)
    try:
        ctx.commit(CommitRequest(ctx.statement_id, "COPY INTO", advances, frontiers))
    except ConflictError:
        if not all(_stands_at_end(ctx, c) for c in consumed):
            target.remove(name)
        raise


def _stands_at_end(ctx: StatementContext, consumption: Consumption) -> bool:
    now = ctx.catalog.find_stream(consumption.stream)
    return (
        now is not None
        and now.stream_id == consumption.stream_id
        and now.frontiers == consumption.end_inclusive
    )
