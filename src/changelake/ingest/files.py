"""Ingest data files: a validated Arrow table written as one Parquet file with PyArrow (no Spark),
in the layout Spark-written data files have, with the statistics the catalog prunes by."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from changelake.catalog.model import DataFile
from changelake.schema import ROW_VERSION, STORED_ROW_ID
from changelake.storage.footers import file_stats, trusted_statistics
from changelake.storage.warehouse import Warehouse

# Ingest files are born with no identity: the commit gives them row ids, and their rows were
# last changed by the version that commits them.
_HIDDEN = pa.schema([pa.field(STORED_ROW_ID, pa.int64()), pa.field(ROW_VERSION, pa.int64())])


def new_directory() -> str:
    """A fresh data directory for one flush's files (``data/ingest-<uuid>``)."""
    return Warehouse.data_dir(f"ingest-{uuid.uuid4().hex}")


def write_file(
    warehouse: Warehouse,
    data: pa.Table,
    *,
    directory: str,
    part: int,
    identity: tuple[pa.Array, pa.Array] | None = None,
) -> DataFile:
    """Write ``data`` (physical column names) as ``<directory>/part-<part>.parquet``; return it as
    an uncommitted DataFile with per-column min/max/null-count statistics. ``identity`` (row ids,
    row versions) keeps rows' identity (compaction); without it the commit gives new ids."""
    if identity is None:
        nulls = pa.nulls(data.num_rows, pa.int64())
        identity = (nulls, nulls)
    table = data.append_column(_HIDDEN.field(0), identity[0]).append_column(
        _HIDDEN.field(1), identity[1]
    )
    # Readers tell files apart by base name, so it is unique (as Spark's are).
    path = f"{directory}/part-{part:05d}-{uuid.uuid4().hex}.parquet"
    warehouse.fs.create_dir(warehouse.fs_path(directory), recursive=True)
    collected: list[pq.FileMetaData] = []
    with warehouse.fs.open_output_stream(warehouse.fs_path(path)) as out:
        pq.write_table(
            table,
            out,
            compression="snappy",
            write_statistics=trusted_statistics(table),
            row_group_size=max(1, table.num_rows),
            metadata_collector=collected,
        )
        size = out.tell()
    return DataFile(
        path=path,
        row_count=table.num_rows,
        size_bytes=size,
        base_row_id=None,
        begin_version=None,
        stats=file_stats(collected[0]),
    )


def delete_files(warehouse: Warehouse, files: list[DataFile]) -> None:
    """Remove files a commit refused (best effort: VACUUM removes any orphan left)."""
    for f in files:
        try:
            warehouse.fs.delete_file(warehouse.fs_path(f.path))
        except OSError:
            pass
