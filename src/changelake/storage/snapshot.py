"""A table's state at one version as a Spark DataFrame: files minus deletion vectors, with identity.

Hidden columns, present only when asked for:
``_cl_file`` / ``_cl_pos`` (the row's file name and position: what a deletion vector records),
``_cl_rid`` (stable row identity) and ``_cl_ver`` (version that last changed the row).
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType

from changelake.catalog.model import DataFile, LiveFile
from changelake.schema import ROW_ID, ROW_VERSION, TableSchema
from changelake.storage.local import local_dataframe
from changelake.storage.spark_private import parse_type
from changelake.storage.warehouse import Warehouse
from changelake.txn.snapshot import TableState

FILE = "_cl_file"
POS = "_cl_pos"
RID = "_cl_rid"
VER = "_cl_ver"
TAG = "_cl_tag"  # which version a change-scan row belongs to
HIDDEN = (FILE, POS, RID, VER)
# Up to this many files, reads that need row positions scan file by file (see file_scan).
PER_FILE_LIMIT = 64

DV_SCHEMA = StructType([StructField("file_name", StringType()), StructField("pos", LongType())])


def spark_type(type_name: str) -> DataType:
    return parse_type(type_name)


def physical_schema(schema: TableSchema) -> StructType:
    """The Parquet schema of data files: ``c<id>`` columns plus the materialized identity columns."""
    fields = [StructField(c.physical, spark_type(c.type), True) for c in schema.columns]
    fields += [StructField(ROW_ID, LongType(), True), StructField(ROW_VERSION, LongType(), True)]
    return StructType(fields)


def logical_schema(schema: TableSchema) -> StructType:
    return StructType([StructField(c.name, spark_type(c.type), c.nullable) for c in schema.columns])


def file_name(path: str) -> str:
    return posixpath.basename(path)


def read_state(
    spark: SparkSession,
    warehouse: Warehouse,
    state: TableState,
    *,
    identity: bool = False,
) -> DataFrame:
    """The live rows of ``state`` with logical column names (and hidden columns if ``identity``)."""
    physical = physical_schema(state.schema)
    logical = [F.col(c.physical).alias(c.name) for c in state.schema.columns]
    hidden = [F.col(h) for h in HIDDEN] if identity else []
    if not state.files:
        empty = StructType(
            list(physical.fields)
            + [
                StructField(FILE, StringType()),
                StructField(POS, LongType()),
                StructField("_b", LongType()),
            ]
        )
        df = spark.createDataFrame([], empty)
        df = df.withColumn(RID, F.lit(None).cast("bigint")).withColumn(
            VER, F.lit(None).cast("bigint")
        )
        return df.select(*logical, *hidden)

    clean = [f for f in state.files if not f.dv_paths]
    dirty = [f for f in state.files if f.dv_paths]
    one_by_one = state.files if identity else dirty
    if len(one_by_one) <= PER_FILE_LIMIT:
        parts = [
            file_scan(
                spark,
                warehouse,
                physical,
                f.file,
                identity=identity,
                minus=positions_in(spark, warehouse, f.dv_paths, f.file.path)
                if f.dv_paths
                else None,
            ).select(*logical, *hidden)
            for f in one_by_one
        ]
        if not identity and clean:
            parts.append(
                scan_files(spark, warehouse, physical, clean, positions=False).select(*logical)
            )
        return union_all(parts)
    parts = []
    if clean:
        parts.append(scan_files(spark, warehouse, physical, clean, positions=identity))
    if dirty:
        df = scan_files(spark, warehouse, physical, dirty, positions=True)
        dv_paths = sorted({p for f in dirty for p in f.dv_paths})
        df = without_positions(df, read_dvs(spark, warehouse, dv_paths))
        parts.append(df)
    df = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    if identity:
        df = with_identity(spark, df, [f.file for f in state.files])
    return df.select(*logical, *hidden)


def union_all(parts: Sequence[DataFrame]) -> DataFrame:
    """The union of DataFrames with the same columns in the same order."""
    return functools.reduce(DataFrame.union, parts)


def positions_in(
    spark: SparkSession,
    warehouse: Warehouse,
    dv_paths: Sequence[str],
    data_path: str,
    *,
    tag: int | None = None,
) -> DataFrame:
    """The positions (``_cl_pos``) of data file ``data_path`` recorded in the DV files
    ``dv_paths``; with ``tag``, also a constant ``_cl_tag`` column."""
    df = (
        read_dvs(spark, warehouse, dv_paths)
        .where(F.col("file_name") == file_name(data_path))
        .select(F.col("pos").alias(POS))
    )
    return df if tag is None else df.withColumn(TAG, F.lit(tag).cast("bigint"))


def file_scan(
    spark: SparkSession,
    warehouse: Warehouse,
    physical: StructType,
    file: DataFile,
    *,
    identity: bool,
    minus: DataFrame | None = None,
    only: DataFrame | None = None,
) -> DataFrame:
    """The rows of one data file, without the positions in ``minus`` / at the positions in
    ``only`` (DataFrames with ``_cl_pos``), with hidden identity columns if ``identity``.

    One file at a time, deletion vectors join on the row position alone (a long key, which
    Spark probes as an array) and the file's constants are literals, not a per-row join.
    """
    df = spark.read.schema(physical).parquet(warehouse.uri(file.path))
    if identity or minus is not None or only is not None:
        df = df.select("*", F.col("_metadata.row_index").alias(POS))
    if minus is not None:
        df = df.join(F.broadcast(minus), POS, "left_anti")
    if only is not None:
        df = df.join(F.broadcast(only), POS, "inner")
    if identity:
        df = df.select(
            "*",
            F.lit(file_name(file.path)).alias(FILE),
            F.coalesce(F.col(ROW_ID), F.lit(file.base_row_id).cast("bigint") + F.col(POS)).alias(
                RID
            ),
            F.coalesce(F.col(ROW_VERSION), F.lit(file.begin_version).cast("bigint")).alias(VER),
        )
    return df


def read_dvs(spark: SparkSession, warehouse: Warehouse, dv_paths: Sequence[str]) -> DataFrame:
    """Deleted (``file_name``, ``pos``) pairs stored in the given DV files."""
    return spark.read.schema(DV_SCHEMA).parquet(*[warehouse.uri(p) for p in dv_paths])


def without_positions(df: DataFrame, dv: DataFrame) -> DataFrame:
    """Rows of ``df`` (with ``_cl_file``/``_cl_pos``) whose position is not in ``dv``."""
    cond = (df[FILE] == dv["file_name"]) & (df[POS] == dv["pos"])
    return df.join(F.broadcast(dv), cond, "left_anti")


def scan_files(
    spark: SparkSession,
    warehouse: Warehouse,
    physical: StructType,
    files: Sequence[LiveFile | DataFile],
    *,
    positions: bool,
) -> DataFrame:
    """All rows of the given files (deletion vectors not applied), physical column names."""
    paths = [f.file.path if isinstance(f, LiveFile) else f.path for f in files]
    df = spark.read.schema(physical).parquet(*[warehouse.uri(p) for p in paths])
    if positions:
        df = df.select(
            "*",
            F.col("_metadata.file_name").alias(FILE),
            F.col("_metadata.row_index").alias(POS),
        )
    else:
        df = df.select(
            "*", F.lit(None).cast("string").alias(FILE), F.lit(None).cast("bigint").alias(POS)
        )
    return df


def with_identity(
    spark: SparkSession,
    df: DataFrame,
    files: Sequence[DataFile],
    *,
    tags: Sequence[int] | None = None,
) -> DataFrame:
    """Add ``_cl_rid`` and ``_cl_ver`` to rows of ``files`` (which carry ``_cl_file``/``_cl_pos``),
    and ``_i_tag`` (one value per file) when ``tags`` are given."""
    tag_values = list(tags) if tags is not None else [None] * len(files)
    info = local_dataframe(
        spark,
        [
            (file_name(f.path), f.base_row_id, f.begin_version, tag)
            for f, tag in zip(files, tag_values, strict=True)
        ],
        [
            ("_i_file", "string"),
            ("_i_base", "bigint"),
            ("_i_version", "bigint"),
            ("_i_tag", "bigint"),
        ],
    )
    df = df.join(F.broadcast(info), df[FILE] == info["_i_file"])
    return df.withColumn(RID, F.coalesce(F.col(ROW_ID), F.col("_i_base") + F.col(POS))).withColumn(
        VER, F.coalesce(F.col(ROW_VERSION), F.col("_i_version"))
    )
