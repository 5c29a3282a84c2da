"""A keyed table's key → address index (docs/DESIGN.md §2, "Lookups by index").

A write of at least ``INDEX_MIN_ROWS`` rows to a table whose data files hold their rows'
``KEY_HASHES`` (a dynamic table's, an external table's) also writes one index file for its data
files, in the same statement, before its commit: per row its first key hash, its data file's name
and its position there, sorted by the hash, in pages of ``PAGE_ROWS`` rows whose minimum and
maximum the file's page index keeps. The commit records the index with each data file
(``DataFile.index``), so it lives and goes with them.

A lookup of k keys (``stored_positions``) hands their sorted hashes to changelake's reader, which
reads of each index file only the pages whose range may hold one (``Late.restrictToKeys``): about
``PAGE_ROWS`` rows per key and index file, whatever the table holds. The (data file, position)
pairs found, less the positions deleted since, say where the stored rows are, and a late read of
the data files decodes only those rows (which the caller matches by both hashes). A page read
costs about what a thousand rows of a scan do (``ROWS_PER_PAGE_READ``, measured), so past a key
per thousand stored rows the lookup reads the stored hashes whole instead. A write smaller than
``INDEX_MIN_ROWS`` leaves its files without an index: lookups read their key hashes whole (the
table's recent small files, until a compaction rewrites them into one indexed file).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from changelake.catalog.model import DataFile, LiveFile
from changelake.schema import KEY_HASHES
from changelake.spark import native
from changelake.storage.deletion import read_positions
from changelake.storage.warehouse import Warehouse

# A write of fewer rows leaves its files without an index.
INDEX_MIN_ROWS = 100_000
# Rows per page of an index file: about what a lookup reads per key and index file.
PAGE_ROWS = 128
# Up to this many keys a lookup reads the index (their hashes are held on the driver, as
# deleted positions are); past it, the stored key hashes whole.
LOOKUP_KEYS = 200_000
# What reading one page of an index costs, in rows of a scan of the stored hashes (10M rows:
# the index of 10,000 keys read as fast as the scan, 1.6 s for the refresh either way)
ROWS_PER_PAGE_READ = 1000
DATA = "_cl_data"  # an index row's data file name
AT = "_cl_at"  # its position in that file
_HASH = KEY_HASHES[0][0]  # a BIGINT
_PAGES = {
    "parquet.page.row.count.limit": str(PAGE_ROWS),
    "parquet.page.size.row.check.min": str(PAGE_ROWS),
    # hashes and positions do not repeat; a data file's name does, row after row
    f"parquet.enable.dictionary#{_HASH}": "false",
    f"parquet.enable.dictionary#{AT}": "false",
}
_HASH_FIELD = StructField(_HASH, LongType())


def index_files(
    spark: SparkSession, warehouse: Warehouse, files: Sequence[DataFile], *, directory: str
) -> list[DataFile]:
    """``files`` (the data files one write wrote into ``directory``, not committed) with their
    index, written if they hold key hashes, hold ``INDEX_MIN_ROWS`` rows or more, and the session
    has changelake's reader (which alone reads an index); else ``files`` as they are. One job:
    the files' key hashes read, sorted by one task, written as one file."""
    if (
        sum(f.row_count for f in files) < INDEX_MIN_ROWS
        or not all(_HASH in f.stats for f in files)
        or not native.reader_available(spark)
    ):
        return list(files)
    schema = StructType([_HASH_FIELD, *native.virtual_fields()])
    reads: list[native.FileRead] = [
        (posixpath.basename(f.path), (None, None, None, None), None) for f in files
    ]
    uris = [warehouse.uri(f.path) for f in files]
    rel = native.read_relation(uris, schema, reads, sizes=[f.size_bytes for f in files])
    rows = rel.select(_HASH, f"_cl_file AS {DATA}", f"_cl_pos AS {AT}").frame(spark)
    target = "index/" + directory.removeprefix("data/")
    sorted_rows = rows.repartition(1).sortWithinPartitions(_HASH)
    native.write_parquet(sorted_rows, warehouse.uri(target), options=_PAGES)
    (written,) = (path for path, _ in warehouse.list_parquet(target))
    return [replace(f, index=written) for f in files]


def stored_positions(
    spark: SparkSession,
    warehouse: Warehouse,
    files: Sequence[LiveFile],
    keys: pa.Table,
    wanted: DataFrame,
) -> dict[str, pa.Array] | None:
    """The positions of the live rows of ``files`` (each with an index) whose first key hash
    is among ``keys`` (a table of that column, as ``wanted``, a plan of the same rows, has it),
    per data file name; None where the index cannot answer (too many keys, or too many deleted
    positions to hold on the driver) or a scan of the files' hashes would cost less (a page
    read per key and index file, against ``ROWS_PER_PAGE_READ`` stored rows). One job, reading
    about ``PAGE_ROWS`` index rows per key and index file. A row another key's first hash finds
    is among them: the caller matches the rows it reads by both hashes."""
    hashes = pc.unique(keys[_HASH].combine_chunks().drop_null()).cast(pa.int64())
    indexes = sorted({f.file.index for f in files if f.file.index is not None})
    pages = len(hashes) * len(indexes)
    if len(hashes) > LOOKUP_KEYS or pages * ROWS_PER_PAGE_READ > sum(f.live_rows for f in files):
        return None
    parts = [(dv, f.file, None) for f in files for dv in f.dv_paths]
    deleted = read_positions(warehouse, parts)
    if deleted is None:
        return None
    sorted_hashes = hashes.take(pc.sort_indices(hashes))
    schema = StructType([_HASH_FIELD, StructField(DATA, StringType()), StructField(AT, LongType())])
    reads: list[native.FileRead] = [
        (posixpath.basename(ix), (None, None, None, None), sorted_hashes) for ix in indexes
    ]
    found = native.read_relation(
        [warehouse.uri(ix) for ix in indexes], schema, reads, keys=True
    ).frame(spark)
    # by the first hash alone: the stored rows found are matched by both later (a row another
    # key's first hash found is read, and left)
    wanted_hashes = wanted.select(_HASH).hint("broadcast")
    hits = found.join(wanted_hashes, found[_HASH] == wanted_hashes[_HASH], "left_semi")
    hits = hits.select(DATA, AT).toArrow()
    by_file: dict[str, pa.Array] = {}
    names = {posixpath.basename(f.file.path) for f in files}
    for name, positions in _grouped(hits).items():
        if name in names:  # an index may name data files removed since
            by_file[name] = positions
    gone: dict[str, list[pa.Array]] = {}
    for (_, data, _), pos in zip(parts, deleted, strict=True):
        gone.setdefault(posixpath.basename(data.path), []).append(pos)
    for name, arrays in gone.items():
        if name in by_file:
            dead = pa.concat_arrays(arrays)
            by_file[name] = by_file[name].filter(pc.invert(pc.is_in(by_file[name], dead)))
    return {name: pos.take(pc.sort_indices(pos)) for name, pos in by_file.items() if len(pos)}


def describe(files: Sequence[LiveFile]) -> str:
    """How a lookup finds the stored rows of ``files`` (EXPLAIN): by which index files, over
    how many of their rows."""
    indexes = {f.file.index for f in files if f.file.index is not None}
    if not indexes:
        return "stored rows found by a scan of their key hashes (no key index)"
    covered = sum(f.live_rows for f in files if f.file.index is not None)
    total = sum(f.live_rows for f in files)
    return (
        f"stored rows found by the key index ({len(indexes)} index file(s) over {covered:,} of"
        f" {total:,} rows; the others' key hashes scanned), up to a key per"
        f" {ROWS_PER_PAGE_READ:,} rows"
    )


def _grouped(hits: pa.Table) -> dict[str, pa.Array]:
    """The positions of ``hits`` (DATA, AT) per data file name."""
    if hits.num_rows == 0:
        return {}
    grouped = hits.group_by(DATA).aggregate([(AT, "list")])
    return {
        name: pa.array(positions, pa.int64())
        for name, positions in zip(
            grouped[DATA].to_pylist(), grouped[f"{AT}_list"].to_pylist(), strict=True
        )
    }
