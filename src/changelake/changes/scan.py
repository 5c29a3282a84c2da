"""Executing a change plan as a Spark DataFrame: the table's columns plus METADATA$ columns."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

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
from changelake.changes.columns import (
    METADATA_ACTION,
    METADATA_COMMIT_TIMESTAMP,
    METADATA_COMMIT_VERSION,
    METADATA_ISUPDATE,
    METADATA_ROW_ID,
)
from changelake.changes.plan import ChangePlan, DeletedRows, FileRows, Information
from changelake.schema import STORED_ROW_ID, TableSchema, quoted
from changelake.storage import native
from changelake.storage.deletion import (
    DV_FILE,
    KEY,
    TAG,
    has_images,
    image_schema,
    join_side,
    read_registered,
)
from changelake.storage.env import Env
from changelake.storage.local import local_dataframe
from changelake.storage.snapshot import (
    FILE,
    RID,
    logical_schema,
    physical_schema,
    same_address,
    scan_files,
)
from changelake.storage.warehouse import Warehouse


def row_id(table_id: int, rid: str) -> str:
    """The opaque, stable METADATA$ROW_ID of a row identity: 16 hex digits.

    The identity is scrambled with a per-table mask (a bijection, so ids stay unique) and the
    sign bit is set, so that ``hex`` alone always prints 16 digits: one cheap expression per
    row, which a large APPEND_ONLY read can afford, unlike a cryptographic hash. SQL text over
    the identity column ``rid``.
    """
    return f"hex({_scrambled_sql(table_id, rid)})"


def table_row_id(table_id: int, schema: TableSchema) -> str:
    """The METADATA$ROW_ID of rows read with their identity (``_cl_rid``, and the row key of a
    dynamic table, whose rows keep their defining query's ROW_IDs), as SQL text."""
    key = schema.row_key
    return row_id(table_id, RID) if key is None else quoted(key.name)


def _mask(table_id: int) -> int:
    return ((table_id * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0x7FFFFFFFFFFFFFFF) - 2**63


def _scrambled_sql(table_id: int, rid: str) -> str:
    """The long whose hex is the ROW_ID, as SQL text over the identity ``rid``. Every such long
    is negative, so their order as longs is the order of the ROW_ID strings."""
    return f"({rid} ^ CAST({_mask(table_id)} AS BIGINT))"


def _columns(schema: TableSchema, tag: str, *, rid: str = RID) -> list[str]:
    """SQL expressions: the user's columns by their names, ``_cl_rid`` and ``_cl_tag``."""
    return [f"{quoted(c.physical)} AS {quoted(c.name)}" for c in schema.columns] + [
        f"{rid} AS {RID}",
        f"{tag} AS {TAG}",
    ]


def _rows(spark: SparkSession, wh: Warehouse, schema: TableSchema, part: FileRows) -> DataFrame:
    """One scan of all the part's files, less the positions of the DVs it subtracts."""
    files = {f.path: f for f in part.files}
    df = scan_files(
        spark,
        wh,
        physical_schema(schema),
        part.files,
        positions=False,
        identity=True,
        deleted=[(dv, files[data], None) for dv, data in part.minus_dvs],
        tags=part.tags,
    )
    if part.inserted_only:
        df = df.where(f"{STORED_ROW_ID} IS NULL")
    return native.select(df, _columns(schema, "_i_tag"))


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
        frames.append(native.select(images, _columns(schema, TAG, rid=STORED_ROW_ID)))
    if plain:
        files = list({data.path: data for _, data, _ in plain}.values())
        df = scan_files(spark, wh, physical, files, positions=True, identity=True)
        dv = join_side(spark, wh, plain, tagged=True)
        cond = same_address(df[KEY], df[FILE], dv[KEY], dv[DV_FILE])
        df = df.join(dv, cond, "inner")
        frames.append(native.select(df, _columns(schema, TAG)))
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


ROWS_PER_PARTITION = 500_000
_X, _P = "_cl_x", "_cl_part"  # the scrambled identity (the ROW_ID as a long), its partition


@dataclass(frozen=True)
class RowOrder:
    """Partitions change rows so that they come out in ROW_ID order with no global sort:
    partition ``i`` holds only smaller ROW_IDs than partition ``i + 1``, and each partition is
    sorted (by the merge join that pairs the two sides, or by a local sort).

    Every row identity of the files read is below ``2**width`` (a file's rows have ids below
    its base row id plus its row count: the base is taken from the table's counter after every
    id its rows carry). Above that width all scrambled ids share the mask's bits, so the top
    ``bits`` bits below it order the partitions.
    """

    width: int
    bits: int

    @staticmethod
    def for_plan(plan: ChangePlan, most: int) -> RowOrder:
        """One partition per ``ROWS_PER_PARTITION`` rows read, at most ``most``, times two (the
        scramble can leave half of the id space empty). Without a bound (a file with no base
        row id yet: not seen in practice) the order still holds, in one partition."""
        files = plan.before_files.files + plan.before_deleted.files + plan.after_files.files
        ends = [f.base_row_id + f.row_count for f in files if f.base_row_id is not None]
        width = max(ends, default=1).bit_length() if len(ends) == len(files) else 63
        rows = plan.before_rows + plan.after_files.rows
        partitions = min(most, -(-rows // ROWS_PER_PARTITION))
        bits = 0 if partitions <= 1 else (partitions - 1).bit_length() + 1
        return RowOrder(width, min(width, bits))

    @property
    def partitions(self) -> int:
        return 1 << self.bits

    def spread(self, df: DataFrame, table_id: int) -> DataFrame:
        """``df`` (with ``RID``) plus ``_X`` and ``_P``, partitioned by ``_P``."""
        x = F.expr(_scrambled_sql(table_id, RID))
        low = x.bitwiseAND(F.lit((1 << self.width) - 1))
        part = F.shiftright(low, self.width - self.bits).cast("int")
        out = df.select("*", x.alias(_X), part.alias(_P))
        return out.repartitionById(self.partitions, F.col(_P))


def _labelled(
    df: DataFrame, schema: TableSchema, action: str, table_id: int, order: RowOrder | None
) -> DataFrame:
    if order is not None:
        df = order.spread(df, table_id).sortWithinPartitions(_X)
    return native.select(
        df,
        [quoted(c.name) for c in schema.columns]
        + [
            f"'{action}' AS {quoted(METADATA_ACTION)}",
            f"false AS {quoted(METADATA_ISUPDATE)}",
            f"{row_id(table_id, RID)} AS {quoted(METADATA_ROW_ID)}",
            TAG,
        ],
    )


def _minimize(
    before: DataFrame,
    after: DataFrame,
    schema: TableSchema,
    table_id: int,
    order: RowOrder | None,
) -> DataFrame:
    """Pairs the two sides by identity, in one merge join: its output is sorted by (tag, ROW_ID)
    in each partition, and each pair yields its DELETE half first.

    A table whose rows carry a row key (a dynamic or external table) pairs them by that key, the
    rows' ROW_ID: a key deleted and written again (a group gone and back, a source key deleted
    and inserted again) gets a new physical identity, and is still one row. Each side holds a
    key at most once: the rows at the start that left, the rows at the end that arrived.
    """
    key = schema.row_key
    if key is None:
        identity, shown = _scrambled_sql(table_id, RID), f"hex({_X})"
    else:
        identity, shown = quoted(key.name), _X
    cols = ", ".join(quoted(c.name) for c in schema.columns)
    # a dynamic table's state columns alone changing is no change of its rows
    state = {c.name for c in schema.state}
    compared = ", ".join(quoted(c.name) for c in schema.columns if c.name not in state)

    def side(df: DataFrame, image: str) -> DataFrame:
        if order is not None:
            df = order.spread(df, table_id)
            keys = [_X, _P]
        else:
            keys = [f"{identity} AS {_X}", f"0 AS {_P}"]
        return native.select(
            df,
            [TAG, *keys, f"struct({cols}) AS {image}", f"struct({compared}) AS {image}c"],
        )

    joined = side(before, "_b").join(side(after, "_a"), [TAG, _X, _P], "full_outer")
    events = native.select(joined.where("NOT (_bc <=> _ac)"), [TAG, _X, f"{PAIR_EVENTS} AS _e"])
    return native.select(
        events.where("_e IS NOT NULL"),
        [f"_e.v.{quoted(c.name)} AS {quoted(c.name)}" for c in schema.columns]
        + [
            f"_e.a AS {quoted(METADATA_ACTION)}",
            f"_e.u AS {quoted(METADATA_ISUPDATE)}",
            f"{shown} AS {quoted(METADATA_ROW_ID)}",
            TAG,
        ],
    )


# Per row of a pairing of old row images ``_b`` (or NULL) with new ones ``_a`` (or NULL): its
# DELETE event then its INSERT event (``a``: action, ``u``: is an update, ``v``: the image), one
# row each, and a NULL event for a missing side, to filter out.
PAIR_EVENTS = (
    "explode(array("
    "CASE WHEN _b IS NOT NULL THEN named_struct('a', 'DELETE', 'u', _a IS NOT NULL, 'v', _b) END,"
    " CASE WHEN _a IS NOT NULL THEN named_struct('a', 'INSERT', 'u', _b IS NOT NULL, 'v', _a) END"
    "))"
)


def output_schema(schema: TableSchema, information: Information) -> StructType:
    shown = {c.name for c in schema.visible}
    fields = [f for f in logical_schema(schema).fields if f.name in shown] + [
        StructField(METADATA_ACTION, StringType(), False),
        StructField(METADATA_ISUPDATE, BooleanType(), False),
        StructField(METADATA_ROW_ID, StringType(), False),
    ]
    if information is Information.REDO:
        fields += [
            StructField(METADATA_COMMIT_VERSION, LongType(), False),
            StructField(METADATA_COMMIT_TIMESTAMP, TimestampType(), False),
        ]
    return StructType(fields)


def execute_plan(
    env: Env,
    plan: ChangePlan,
    schema: TableSchema,
    *,
    ordered: bool = False,
) -> DataFrame:
    """The changes ``plan`` describes, as a lazy DataFrame (the catalog: commit times for REDO).

    ``ordered``: in changelog order, partition after partition: by commit version (REDO), then
    ROW_ID, the DELETE half of an update first.
    """
    spark = env.spark
    before = _side(spark, env.warehouse, schema, [plan.before_files, plan.before_deleted])
    after = _side(spark, env.warehouse, schema, [plan.after_files])
    # REDO is sorted below anyway; the ROW_IDs of rows with a row key are their keys, which
    # ``RowOrder`` does not order: those are sorted at the end
    spread = ordered and plan.information is not Information.REDO and schema.row_key is None
    order = None
    if spread:
        order = RowOrder.for_plan(plan, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))
    if before is not None and after is not None:
        df = _minimize(before, after, schema, plan.table_id, order)
    elif after is not None:
        df = _labelled(after, schema, "INSERT", plan.table_id, order)
    elif before is not None:
        df = _labelled(before, schema, "DELETE", plan.table_id, order)
    else:
        empty = StructType(list(logical_schema(schema).fields) + [StructField(TAG, LongType())])
        df = _labelled(
            spark.createDataFrame([], empty).withColumn(RID, F.lit(None).cast("bigint")),
            schema,
            "INSERT",
            plan.table_id,
            None,
        )
    df = _keyed(df, schema)
    if plan.information is Information.REDO:
        return _with_commit_info(spark, env.catalog, plan, df)
    if ordered and not spread:
        df = df.orderBy(METADATA_ROW_ID, METADATA_ACTION)  # DELETE before INSERT
    return df.drop(TAG)


def _keyed(df: DataFrame, schema: TableSchema) -> DataFrame:
    """A dynamic table's changes: their ROW_ID is the row key (the defining query's ROW_ID),
    which is not a column of the output, nor are its state columns."""
    key = schema.row_key
    if key is None:
        return df
    keyed = df.withColumn(METADATA_ROW_ID, F.col(quoted(key.name)))
    return keyed.drop(key.name, *[c.name for c in schema.state])


def _with_commit_info(
    spark: SparkSession, catalog: Catalog, plan: ChangePlan, df: DataFrame
) -> DataFrame:
    versions = catalog.versions(
        plan.table_id, after_exclusive=plan.start_version, upto_inclusive=plan.end_version
    )
    commits = local_dataframe(
        spark,
        [(v.version, dt.datetime.fromtimestamp(v.committed_at)) for v in versions],
        [(TAG, "bigint"), (METADATA_COMMIT_TIMESTAMP, "timestamp")],
    )
    out = df.join(F.broadcast(commits), TAG, "left")
    return out.select(
        *[c for c in df.columns if c != TAG],
        F.col(TAG).alias(METADATA_COMMIT_VERSION),
        F.col(METADATA_COMMIT_TIMESTAMP),
    ).orderBy(METADATA_COMMIT_VERSION, METADATA_ROW_ID, METADATA_ACTION)
