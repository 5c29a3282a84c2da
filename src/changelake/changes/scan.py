"""Executing a change plan as a Spark DataFrame: the table's columns plus METADATA$ columns."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from changelake.catalog import Catalog
from changelake.changes.plan import ChangePlan, DeletedRows, FileRows, Information
from changelake.schema import ROW_ID as ROW_ID_COLUMN
from changelake.schema import TableSchema
from changelake.storage.deletion import (
    DV_FILE,
    KEY,
    TAG,
    has_images,
    image_schema,
    join_side,
    read_registered,
)
from changelake.storage.local import local_dataframe
from changelake.storage.snapshot import (
    FILE,
    RID,
    logical_schema,
    physical_schema,
    same_address,
    scan_files,
    with_identity,
    without_deleted,
)
from changelake.storage.warehouse import Warehouse

ACTION = "METADATA$ACTION"
ISUPDATE = "METADATA$ISUPDATE"
ROW_ID = "METADATA$ROW_ID"
COMMIT_VERSION = "METADATA$COMMIT_VERSION"
COMMIT_TIMESTAMP = "METADATA$COMMIT_TIMESTAMP"


def row_id(table_id: int, rid: SparkColumn) -> SparkColumn:
    """The opaque, stable METADATA$ROW_ID of a row identity: 16 hex digits.

    The identity is scrambled with a per-table mask (a bijection, so ids stay unique) and the
    sign bit is set, so that ``hex`` alone always prints 16 digits: one cheap expression per
    row, which a large APPEND_ONLY read can afford, unlike a cryptographic hash.
    """
    mask = (table_id * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0x7FFFFFFFFFFFFFFF
    return F.hex(rid.bitwiseXOR(F.lit(mask - 2**63)))


def _columns(
    schema: TableSchema, tag: SparkColumn, *, rid: SparkColumn | None = None
) -> list[SparkColumn]:
    return [F.col(c.physical).alias(c.name) for c in schema.columns] + [
        (F.col(RID) if rid is None else rid).alias(RID),
        tag.alias(TAG),
    ]


def _rows(spark: SparkSession, wh: Warehouse, schema: TableSchema, part: FileRows) -> DataFrame:
    """One scan of all the part's files, its DVs applied by one broadcast anti-join."""
    df = scan_files(spark, wh, physical_schema(schema), part.files, positions=True)
    if part.inserted_only:
        df = df.where(F.col(ROW_ID_COLUMN).isNull())
    if part.minus_dvs:
        files = {f.path: f for f in part.files}
        df = without_deleted(df, wh, [(dv, files[data], None) for dv, data in part.minus_dvs])
    df = with_identity(df, part.files, tags=part.tags)
    return df.select(*_columns(schema, F.col("_i_tag")))


def _deleted(
    spark: SparkSession, wh: Warehouse, schema: TableSchema, part: DeletedRows
) -> DataFrame:
    """The deleted rows: from the before-images of the DV files that carry them (no data file
    read), else from one scan of the data files joined with the positions."""
    by_path = {f.path: f for f in part.files}
    parts = [(dv, by_path[data], v) for v, dv, data in part.dvs]
    imaged = [p for p in parts if has_images(wh, p[0])]
    plain = [p for p in parts if not has_images(wh, p[0])]
    physical = physical_schema(schema)
    frames = []
    if imaged:
        images = read_registered(spark, wh, image_schema(physical), imaged)
        frames.append(images.select(*_columns(schema, F.col(TAG), rid=F.col(ROW_ID_COLUMN))))
    if plain:
        files = list({data.path: data for _, data, _ in plain}.values())
        df = scan_files(spark, wh, physical, files, positions=True)
        dv = join_side(spark, wh, plain, tagged=True)
        cond = same_address(df[KEY], df[FILE], dv[KEY], dv[DV_FILE])
        df = with_identity(df.join(dv, cond, "inner"), files)
        frames.append(df.select(*_columns(schema, F.col(TAG))))
    return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])


def _side(
    spark: SparkSession, wh: Warehouse, schema: TableSchema, parts: list[FileRows | DeletedRows]
) -> DataFrame | None:
    frames = []
    for part in parts:
        if part.empty:
            continue
        if isinstance(part, FileRows):
            frames.append(_rows(spark, wh, schema, part))
        else:
            frames.append(_deleted(spark, wh, schema, part))
    if not frames:
        return None
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _labelled(df: DataFrame, schema: TableSchema, action: str, table_id: int) -> DataFrame:
    return df.select(
        *[F.col(f"`{c.name}`") for c in schema.columns],
        F.lit(action).alias(ACTION),
        F.lit(False).alias(ISUPDATE),
        row_id(table_id, F.col(RID)).alias(ROW_ID),
        F.col(TAG),
    )


def _minimize(before: DataFrame, after: DataFrame, schema: TableSchema, table_id: int) -> DataFrame:
    cols = [F.col(f"`{c.name}`") for c in schema.columns]
    b = before.select(F.col(TAG), F.col(RID), F.struct(*cols).alias("_b"))
    a = after.select(F.col(TAG), F.col(RID), F.struct(*cols).alias("_a"))
    joined = b.join(a, [TAG, RID], "full_outer").where(~F.col("_b").eqNullSafe(F.col("_a")))
    has_b, has_a = F.col("_b").isNotNull(), F.col("_a").isNotNull()
    event = F.explode(
        F.array(
            F.when(
                has_b,
                F.struct(F.lit("DELETE").alias("a"), has_a.alias("u"), F.col("_b").alias("v")),
            ),
            F.when(
                has_a,
                F.struct(F.lit("INSERT").alias("a"), has_b.alias("u"), F.col("_a").alias("v")),
            ),
        )
    )
    events = joined.select(F.col(TAG), F.col(RID), event.alias("_e")).where(F.col("_e").isNotNull())
    return events.select(
        *[F.col("_e").getField("v").getField(c.name).alias(c.name) for c in schema.columns],
        F.col("_e").getField("a").alias(ACTION),
        F.col("_e").getField("u").alias(ISUPDATE),
        row_id(table_id, F.col(RID)).alias(ROW_ID),
        F.col(TAG),
    )


def output_schema(schema: TableSchema, information: Information) -> StructType:
    fields = list(logical_schema(schema).fields) + [
        StructField(ACTION, StringType(), False),
        StructField(ISUPDATE, BooleanType(), False),
        StructField(ROW_ID, StringType(), False),
    ]
    if information is Information.REDO:
        fields += [
            StructField(COMMIT_VERSION, LongType(), False),
            StructField(COMMIT_TIMESTAMP, TimestampType(), False),
        ]
    return StructType(fields)


def execute_plan(
    spark: SparkSession, wh: Warehouse, catalog: Catalog, plan: ChangePlan, schema: TableSchema
) -> DataFrame:
    """The changes ``plan`` describes, as a lazy DataFrame (``catalog``: commit times for REDO)."""
    before = _side(spark, wh, schema, [plan.before_files, plan.before_deleted])
    after = _side(spark, wh, schema, [plan.after_files])
    if before is not None and after is not None:
        df = _minimize(before, after, schema, plan.table_id)
    elif after is not None:
        df = _labelled(after, schema, "INSERT", plan.table_id)
    elif before is not None:
        df = _labelled(before, schema, "DELETE", plan.table_id)
    else:
        empty = StructType(list(logical_schema(schema).fields) + [StructField(TAG, LongType())])
        df = _labelled(
            spark.createDataFrame([], empty).withColumn(RID, F.lit(None).cast("bigint")),
            schema,
            "INSERT",
            plan.table_id,
        )
    if plan.information is Information.REDO:
        return _with_commit_info(spark, catalog, plan, df)
    return df.drop(TAG)


def _with_commit_info(
    spark: SparkSession, catalog: Catalog, plan: ChangePlan, df: DataFrame
) -> DataFrame:
    versions = catalog.versions(
        plan.table_id, after_exclusive=plan.start_version, upto_inclusive=plan.end_version
    )
    commits = local_dataframe(
        spark,
        [(v.version, dt.datetime.fromtimestamp(v.committed_at)) for v in versions],
        [(TAG, "bigint"), (COMMIT_TIMESTAMP, "timestamp")],
    )
    out = df.join(F.broadcast(commits), TAG, "left")
    return out.select(
        *[c for c in df.columns if c != TAG],
        F.col(TAG).alias(COMMIT_VERSION),
        F.col(COMMIT_TIMESTAMP),
    ).orderBy(COMMIT_VERSION, ROW_ID, ACTION)
