"""Compaction of small files without Spark: a channel with a short lag makes a file per flush, so
the client merges a table's small files (those without deletion vectors) into one, keeping every
row's identity and last-changed version, so change queries see no change.

The client runs it after its flushes have added ``COMPACT_AFTER_FILES`` files to a table; OPTIMIZE
(a Spark job) compacts anything, deletion vectors included.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake.catalog import Catalog
from changelake.catalog.model import LiveFile
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.clock import Clock
from changelake.ingest.files import new_directory, write_file
from changelake.ingest.validate import RowValidator
from changelake.schema import ROW_VERSION, STORED_ROW_ID, TableSchema
from changelake.storage.warehouse import Warehouse

COMPACT_AFTER_FILES = 32
SMALL_FILE_BYTES = 8 << 20
MAX_COMPACTION_BYTES = 256 << 20


def small_files(files: list[LiveFile]) -> list[LiveFile]:
    """The files compaction merges: small, without deletion vectors, oldest first, up to
    MAX_COMPACTION_BYTES in all."""
    chosen, total = [], 0
    candidates = [f for f in files if not f.dv_paths and f.file.size_bytes < SMALL_FILE_BYTES]
    for f in sorted(candidates, key=lambda f: (f.file.begin_version or 0, f.file.path)):
        if total + f.file.size_bytes > MAX_COMPACTION_BYTES:
            break
        chosen.append(f)
        total += f.file.size_bytes
    return chosen


def _read(warehouse: Warehouse, live: LiveFile, schema: TableSchema, types: pa.Schema) -> pa.Table:
    with warehouse.fs.open_input_file(warehouse.fs_path(live.file.path)) as handle:
        data = pq.read_table(handle)
    n = data.num_rows
    columns = [
        data[c.physical].cast(types.field(c.physical).type)
        if c.physical in data.column_names
        else pa.nulls(n, types.field(c.physical).type)
        for c in schema.columns
    ]
    base, version = live.file.base_row_id, live.file.begin_version
    assert base is not None and version is not None
    rid = pa.array(range(base, base + n), pa.int64())
    ver = pa.array([version] * n, pa.int64()) if n else pa.array([], pa.int64())
    if STORED_ROW_ID in data.column_names:
        rid = pc.coalesce(data[STORED_ROW_ID], rid)
        ver = pc.coalesce(data[ROW_VERSION], ver)
    out = pa.Table.from_arrays(columns, schema=types)
    return out.append_column(STORED_ROW_ID, rid).append_column(ROW_VERSION, ver)


def compact(
    catalog: Catalog, warehouse: Warehouse, clock: Clock, table_id: int, *, min_files: int = 2
) -> int:
    """Merge the table's small files into one; returns how many files were merged (0: none,
    fewer than ``min_files`` small files). A concurrent DELETE or UPDATE of one of them makes
    the commit fail with ConflictError, and nothing changes."""
    info = catalog.table_by_id(table_id)
    chosen = small_files(catalog.snapshot_files(table_id, info.current_version))
    if len(chosen) < min_files:
        return 0
    schema = catalog.schema_at(table_id, info.current_version)
    types = RowValidator(schema, table=info.name).arrow_schema
    merged = pa.concat_tables([_read(warehouse, f, schema, types) for f in chosen])
    data = merged.drop_columns([STORED_ROW_ID, ROW_VERSION])
    added = write_file(
        warehouse,
        data,
        directory=new_directory(),
        part=0,
        identity=(merged[STORED_ROW_ID], merged[ROW_VERSION]),
    )
    write = TableWrite(
        table_id,
        info.name,
        info.current_version,
        WriteKind.COMPACT,
        added=(added,),
        removed=tuple(f.file.path for f in chosen),
    )
    catalog.commit(
        [write_request(f"ingest-compact-{uuid.uuid4().hex}", "COMPACT", [write])], clock=clock
    )
    return len(chosen)
