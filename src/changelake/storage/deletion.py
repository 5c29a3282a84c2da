"""Deletion-vector files: the deleted (data file name, position) pairs of one statement, and,
beside each pair, the row that was deleted (its *before-image*: columns, identity, version).

A DV file always has ``file_name`` and ``pos``; one with before-images also has the table's
physical columns and the materialized identity columns, so change queries read deleted rows from
it instead of re-reading data files. Whether a file carries images is read from its own schema:
DV files written before images existed keep working.

Positions for a statement are read on the driver with PyArrow into a local relation (no Spark
job, one broadcast); past ``DRIVER_POSITIONS`` rows they are read by Spark instead, so a huge DV
never goes through the driver.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from changelake.catalog.model import DataFile
from changelake.schema import STORED_ROW_ID, quoted
from changelake.spark import native
from changelake.spark.local import lookup_relation
from changelake.spark.native import ROW_HEX
from changelake.spark.relation import Relation
from changelake.storage.row_ids import mask, row_id_sql
from changelake.storage.warehouse import Warehouse

DV_FILE = "file_name"
DV_POS = "pos"
KEY = "_cl_key"
TAG = "_cl_tag"
DRIVER_POSITIONS = 2_000_000  # ~50 MB of (name, position) pairs in the driver at most
# Past this many positions a join with them shuffles: a broadcast would not fit in memory.
BROADCAST_POSITIONS = 1_000_000
POSITIONS = StructType([StructField(DV_FILE, StringType()), StructField(DV_POS, LongType())])

_ARROW = {DV_FILE: pa.string(), DV_POS: pa.int64(), KEY: pa.int64(), TAG: pa.int64()}

# A registered DV part: (DV path, data file, tag); the tag labels its rows (a version).
Part = tuple[str, DataFile, int | None]


def _name(path: str) -> str:
    return posixpath.basename(path)


@lru_cache(maxsize=4096)
def _footer(warehouse: Warehouse, dv_path: str) -> tuple[bool, int]:
    """(carries images, rows) of a DV file; DV files are immutable, so this is cached."""
    with warehouse.fs.open_input_file(warehouse.fs_path(dv_path)) as f:
        meta = pq.ParquetFile(f).metadata
    return STORED_ROW_ID in meta.schema.names, meta.num_rows


def has_images(warehouse: Warehouse, dv_path: str) -> bool:
    return _footer(warehouse, dv_path)[0]


def _rows(warehouse: Warehouse, dv_paths: Sequence[str]) -> int:
    return sum(_footer(warehouse, p)[1] for p in dv_paths)


def counted(spark: SparkSession, warehouse: Warehouse, dv_path: str) -> tuple[dict[str, int], bool]:
    """(positions per data file name, whether a position appears twice) of one DV file: read on
    the driver with PyArrow up to ``DRIVER_POSITIONS`` rows (metadata, no Spark job), else
    counted by a Spark job. A write's counts come from what it wrote, not from a job before it."""
    if _footer(warehouse, dv_path)[1] > DRIVER_POSITIONS:
        df = spark.read.parquet(warehouse.uri(dv_path))
        got = df.groupBy(DV_FILE).agg(F.count("*").alias("n"), F.countDistinct(DV_POS).alias("d"))
        rows = got.collect()
        return {r[DV_FILE]: r["n"] for r in rows}, any(r["n"] != r["d"] for r in rows)
    table = pq.read_table(
        warehouse.fs_path(dv_path), columns=[DV_FILE, DV_POS], filesystem=warehouse.fs
    )
    per_file = table.group_by(DV_FILE).aggregate([(DV_POS, "count")])
    counts = dict(
        zip(per_file[DV_FILE].to_pylist(), per_file[f"{DV_POS}_count"].to_pylist(), strict=True)
    )
    distinct = table.group_by([DV_FILE, DV_POS]).aggregate([]).num_rows
    return counts, distinct != table.num_rows


def address_key(size: str, pos: str) -> str:
    """A row's address as one long, as SQL text over its data file's size and its position: the
    size (low 32 bits) above the position.

    Rows of two files share a key only if the files' sizes agree in their low 32 bits, so joins
    on it also compare file names (see ``snapshot.same_address``)."""
    return f"(shiftleft(CAST({size} AS BIGINT), 32) | {pos})"


def read_positions(warehouse: Warehouse, parts: Sequence[Part]) -> list[pa.Array] | None:
    """The deleted positions of each registered part (int64, in the order of ``parts``), read
    on the driver with PyArrow; None past ``DRIVER_POSITIONS`` rows. A DV file may hold
    positions of several data files (some removed outright by its statement): only the
    registered (DV, data file) pairs count."""
    dv_paths = sorted({dv for dv, _, _ in parts})
    if _rows(warehouse, dv_paths) > DRIVER_POSITIONS:
        return None
    tables = {
        dv: pq.read_table(warehouse.fs_path(dv), columns=[DV_FILE, DV_POS], filesystem=warehouse.fs)
        for dv in dv_paths
    }
    found = []
    for dv, data, _ in parts:
        table = tables[dv]
        rows = table.filter(pc.equal(table[DV_FILE], _name(data.path)))
        found.append(rows[DV_POS].combine_chunks().cast(pa.int64()))
    return found


def join_side(
    spark: SparkSession, warehouse: Warehouse, parts: Sequence[Part], *, tagged: bool = False
) -> DataFrame:
    """``positions``, hinted to be broadcast to a join when there are few enough of them."""
    found = positions(spark, warehouse, parts, tagged=tagged)
    few = _rows(warehouse, sorted({dv for dv, _, _ in parts})) <= BROADCAST_POSITIONS
    return F.broadcast(found) if few else found


def positions(
    spark: SparkSession, warehouse: Warehouse, parts: Sequence[Part], *, tagged: bool = False
) -> DataFrame:
    """The deleted (``file_name``, ``pos``, ``_cl_key``) addresses the registered ``parts``
    record, with ``_cl_tag`` if ``tagged``: a local relation, or a distributed read of the DV
    files past ``DRIVER_POSITIONS``."""
    found = read_positions(warehouse, parts)
    if found is None:
        return _distributed(spark, warehouse, parts, tagged=tagged)
    schema = StructType(
        [*POSITIONS.fields, StructField(KEY, LongType())]
        + ([StructField(TAG, LongType())] if tagged else [])
    )
    arrow = pa.schema([(f.name, _ARROW[f.name]) for f in schema])
    tables = []
    for (_, data, tag), pos in zip(parts, found, strict=True):
        shifted = (data.size_bytes & 0xFFFFFFFF) << 32
        if shifted >= 2**63:
            shifted -= 2**64
        columns = {
            DV_FILE: pa.array([_name(data.path)] * len(pos), pa.string()),
            DV_POS: pos,
            KEY: pc.bit_wise_or(pos, pa.scalar(shifted, pa.int64())),
        }
        if tagged:
            columns[TAG] = pa.array([tag] * len(pos), pa.int64())
        tables.append(pa.table(columns).cast(arrow))
    if not tables:
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(pa.concat_tables(tables), schema)


def image_schema(physical: StructType) -> StructType:
    """The schema of a DV file with before-images of rows whose data files have ``physical``."""
    return StructType(list(POSITIONS.fields) + list(physical.fields))


def read_registered(
    spark: SparkSession,
    warehouse: Warehouse,
    schema: StructType,
    parts: Sequence[Part],
    *,
    row_ids_of: int | None = None,
    sized: bool = True,
) -> Relation:
    """The rows (``schema``: DV columns) of the DV files of ``parts`` that belong to a registered
    pair, with ``_d_size`` (the data file's size; not unless ``sized``: a value the plan would
    not use is left out of its text, where it would keep the plan from being bound into a kept
    optimized one) and ``_cl_tag``: one scan of all the DV files
    (by changelake's reader, whose ``_cl_file`` is the DV file's name, where the session has it).
    ``row_ids_of``: a table whose before-images these are (``schema`` has their identity), whose
    METADATA$ROW_IDs are added as ``ROW_HEX``."""
    uris = sorted({warehouse.uri(dv) for dv, _, _ in parts})
    own = [quoted(f.name) for f in schema.fields]
    shown = [] if row_ids_of is None else [ROW_HEX]
    if native.reader_available(spark):
        virtual = [StructField(native.VIRTUAL[0], StringType()), StructField(ROW_HEX, StringType())]
        constants = (None, None, None, None if row_ids_of is None else mask(row_ids_of))
        dvs = sorted({_name(dv) for dv, _, _ in parts}) if row_ids_of is not None else []
        files: list[native.FileRead] = [(dv, constants, None) for dv in dvs]
        read = native.read_relation(uris, StructType([*schema.fields, *virtual]), files)
        rel = read.select(*own, *shown, f"{native.VIRTUAL[0]} AS _d_dv")
    else:
        df = spark.read.schema(schema).parquet(*uris)
        df = df.select("*", F.col("_metadata.file_name").alias("_d_dv"))
        rel = Relation.of_frame(df, [*schema.fieldNames(), "_d_dv"])
        if row_ids_of is not None:
            rel = rel.select(*own, f"{row_id_sql(row_ids_of, STORED_ROW_ID)} AS {ROW_HEX}", "_d_dv")
    sizes = [("_d_size", "bigint")] if sized else []
    pairs = sorted(
        {
            (_name(data.path), _name(dv), *([data.size_bytes] if sized else []), tag)
            for dv, data, tag in parts
        }
    )
    return lookup_relation(
        rel, [(DV_FILE, "string"), ("_d_dv", "string")], [*sizes, (TAG, "bigint")], pairs
    ).drop("_d_dv")


def _distributed(
    spark: SparkSession, warehouse: Warehouse, parts: Sequence[Part], *, tagged: bool
) -> DataFrame:
    rel = read_registered(spark, warehouse, POSITIONS, parts)
    key = f"{address_key('_d_size', DV_POS)} AS {KEY}"
    return rel.select(DV_FILE, DV_POS, key, *([TAG] if tagged else [])).frame(spark)
