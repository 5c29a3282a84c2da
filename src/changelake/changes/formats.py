"""Changes rendered as the changelogs other systems speak (``CHANGES (..., FORMAT => f)``).

Input: a change result with the user's columns and ``METADATA$ACTION``, ``METADATA$ISUPDATE``,
``METADATA$ROW_ID`` (plus ``METADATA$COMMIT_VERSION`` / ``_TIMESTAMP`` for REDO). Output order is
defined: by commit version, then ROW_ID, the deleting half of an update before its inserting
half; an ``offset`` column carries that order through files: unique and increasing in that
order, but not dense (each Spark partition numbers its rows from ``partition * 2**33``),
so that no step has to see every row. ODF's own offsets are assigned by the dataset that ingests
the changelog; this one only has to order it. With ``KEYS => (...)``
rows are identified by those columns instead of ROW_ID: a key that one commit deletes and inserts
is corrected (-C/+C, -U/+U, one Debezium "u"), whichever rows held it, and the order is by key.

- ODF (Open Data Fabric's ``op`` column, a two-event changelog): ``op`` 0 append (+A), 1 retract
  (-R), 2 correct-from (-C), 3 correct-to (+C); an update is -C directly followed by +C. ODF's
  Arrow type is uint8 and its Parquet type INT32; changelake's ``op`` is an INT (INT32 in
  Parquet, as ODF implementations store it).
- FLINK: ``op`` is the RowKind short string (+I, -U, +U, -D) and ``op_code`` its byte value
  (INSERT 0, UPDATE_BEFORE 1, UPDATE_AFTER 2, DELETE 3), mapped by name.
- RETRACT: ODF's +A / -R only (an update is -R of the old row, then +A of the new one).
- UPSERT (needs KEYS): per key and commit, the new image (+A), or -R when the key's rows are only
  deleted; when several new images share a key in one commit, the last in ROW_ID order wins.
- DEBEZIUM: one row per change: ``op`` c / u / d (r: the rows of a SHOW_INITIAL_ROWS stream's
  first read), ``before`` and ``after`` images (structs of the
  user's columns), ``source`` (table, version, ts_ms, row_id, offset) and ``ts_ms`` (the commit
  time in milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from changelake.catalog import Catalog
from changelake.catalog.model import TableInfo
from changelake.changes.columns import (
    METADATA_ACTION,
    METADATA_COMMIT_TIMESTAMP,
    METADATA_COMMIT_VERSION,
    METADATA_ISUPDATE,
    METADATA_ROW_ID,
)
from changelake.errors import ColumnNotFoundError, InvalidStatementError, did_you_mean, member_named
from changelake.schema import quoted

OFFSET = "offset"
OP = "op"
META = (
    METADATA_ACTION,
    METADATA_ISUPDATE,
    METADATA_ROW_ID,
    METADATA_COMMIT_VERSION,
    METADATA_COMMIT_TIMESTAMP,
)

# ODF op values.
APPEND, RETRACT, CORRECT_FROM, CORRECT_TO = 0, 1, 2, 3
# Flink RowKind: short string and byte value.
FLINK_KINDS = {"INSERT": ("+I", 0), "UPDATE_BEFORE": ("-U", 1), "UPDATE_AFTER": ("+U", 2),
               "DELETE": ("-D", 3)}  # fmt: skip


class Format(Enum):
    ODF = "ODF"
    FLINK = "FLINK"
    DEBEZIUM = "DEBEZIUM"
    RETRACT = "RETRACT"
    UPSERT = "UPSERT"

    @staticmethod
    def parse(text: str) -> Format:
        return member_named(Format, text, "changelog FORMAT")


@dataclass(frozen=True)
class Rendering:
    """How a change result is handed out: ``format``, and the ``keys`` identifying a row
    (required by UPSERT; without keys a row is identified by its ROW_ID)."""

    format: Format
    keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.format is Format.UPSERT and not self.keys:
            raise InvalidStatementError(
                "FORMAT => UPSERT needs the columns that identify a row: add KEYS => (c1, ...)."
            )

    @property
    def row_by_row(self) -> bool:
        """Whether the changes come out one row per change row, identified by ROW_ID: then a
        change scan in changelog order (``change_relation(ordered=True)``) needs no sort here."""
        return not self.keys and self.format in (Format.ODF, Format.FLINK, Format.RETRACT)


@dataclass(frozen=True)
class Commit:
    """The commit a DEFAULT or APPEND_ONLY change result is stamped with (REDO rows carry
    their own): the interval's last version and its commit time, when known."""

    source: str
    version: int | None = None
    committed_at: float | None = None
    initial_rows: bool = False  # a SHOW_INITIAL_ROWS stream's first read: Debezium op "r"


def stamp(catalog: Catalog, info: TableInfo, version: int, *, initial_rows: bool = False) -> Commit:
    """The commit of ``version`` of table ``info``, to stamp its changes with."""
    done = catalog.version_info(info.table_id, version)
    return Commit(info.name, version, done.committed_at if done else None, initial_rows)


def render(
    df: DataFrame, rendering: Rendering, commit: Commit, *, ordered: bool = False
) -> DataFrame:
    """``df`` (a change result) as the changelog ``rendering`` asks for, in changelog order.

    ``ordered``: ``df`` is in changelog order already, partition after partition.
    """
    columns = [c for c in df.columns if c not in META]
    keys = [_column(k, columns, commit.source) for k in rendering.keys]
    staged = _stamped(df, commit, keys)
    if rendering.format is Format.DEBEZIUM:
        return _debezium(staged, columns, commit)
    if rendering.format is Format.UPSERT:
        staged = _upserts(staged)
    op = _OPS[rendering.format]()
    out = [F.col(OFFSET).cast("bigint").alias(OFFSET), *op, *[F.col(quoted(c)) for c in columns]]
    if not (ordered and rendering.row_by_row):
        staged = staged.orderBy(*_order())
    return _numbered(staged).select(*out, *_trailer())


def rendered_schema(fmt: Format, row: StructType) -> StructType:
    """The schema of ``render``'s output in format ``fmt`` for changes of rows of type ``row``:
    what reading a changelog back from files that do not keep types (JSON) needs."""
    if fmt is Format.DEBEZIUM:
        source = StructType(
            [StructField("table", StringType())]
            + [StructField(n, LongType()) for n in ("version", "ts_ms")]
            + [StructField("row_id", StringType()), StructField(OFFSET, LongType())]
        )
        return StructType(
            [StructField(OP, StringType()), StructField("before", row), StructField("after", row),
             StructField("source", source), StructField("ts_ms", LongType())]
        )  # fmt: skip
    if fmt is Format.FLINK:
        op = [StructField(OP, StringType()), StructField("op_code", ByteType())]
    else:
        op = [StructField(OP, IntegerType())]
    trailer = [
        StructField(METADATA_COMMIT_VERSION, LongType()),
        StructField(METADATA_COMMIT_TIMESTAMP, TimestampType()),
        StructField(METADATA_ROW_ID, StringType()),
    ]
    return StructType([StructField(OFFSET, LongType()), *op, *row.fields, *trailer])


# -- the pieces -----------------------------------------------------------------------------------

# The commit version and time, what identifies a row (ROW_ID, or the KEYS), whether the row is
# half of a correction, and the rank that puts a DELETE half first.
_V, _TS, _ID, _UPDATE, _RANK = "_cl_v", "_cl_ts", "_cl_id", "_cl_update", "_cl_rank"


def _column(key: str, columns: list[str], source: str) -> str:
    for c in columns:
        if c.lower() == key.lower():
            return c
    raise ColumnNotFoundError(
        f"KEYS column {key!r} is not a column of {source}.{did_you_mean(key, columns)}"
        f" Its columns are: {', '.join(columns)}."
    )


def _stamped(df: DataFrame, commit: Commit, keys: list[str]) -> DataFrame:
    """``df`` with the hidden columns above. With ``keys``, a row is identified by its key:
    a key deleted and inserted by one commit is a correction, whatever the ROW_IDs."""
    version = (
        F.col(METADATA_COMMIT_VERSION)
        if METADATA_COMMIT_VERSION in df.columns
        else F.lit(commit.version)
    )
    at = (
        F.col(METADATA_COMMIT_TIMESTAMP)
        if METADATA_COMMIT_TIMESTAMP in df.columns
        else F.lit(commit.committed_at).cast("timestamp")
    )
    staged = df.select(
        "*",
        version.cast("bigint").alias(_V),
        at.cast("timestamp").alias(_TS),
        (F.struct(*[F.col(quoted(k)) for k in keys]) if keys else F.col(METADATA_ROW_ID)).alias(
            _ID
        ),
        F.when(F.col(METADATA_ACTION) == "DELETE", 0).otherwise(1).alias(_RANK),
    )
    if not keys:
        return staged.withColumn(_UPDATE, F.col(METADATA_ISUPDATE))
    same_key = Window.partitionBy(_V, _ID)
    both = F.size(F.collect_set(METADATA_ACTION).over(same_key)) == 2
    return staged.withColumn(_UPDATE, both)


def _order() -> list[Column]:
    return [F.col(_V).asc_nulls_first(), F.col(_ID), F.col(_RANK), F.col(METADATA_ROW_ID)]


def _numbered(df: DataFrame) -> DataFrame:
    """``df`` (in changelog order) with ``offset``: no job sees every row."""
    return df.withColumn(OFFSET, F.monotonically_increasing_id())


def _trailer() -> list[Column]:
    return [
        F.col(_V).alias(METADATA_COMMIT_VERSION),
        F.col(_TS).alias(METADATA_COMMIT_TIMESTAMP),
        F.col(METADATA_ROW_ID),
    ]


def _is(action: str, *, update: bool) -> Column:
    return (F.col(METADATA_ACTION) == action) & (F.col(_UPDATE) == F.lit(update))


def _odf_op() -> list[Column]:
    op = (
        F.when(_is("DELETE", update=True), CORRECT_FROM)
        .when(_is("INSERT", update=True), CORRECT_TO)
        .when(F.col(METADATA_ACTION) == "DELETE", RETRACT)
        .otherwise(APPEND)
    )
    return [op.cast("int").alias(OP)]


def _retract_op() -> list[Column]:
    return [
        F.when(F.col(METADATA_ACTION) == "DELETE", RETRACT).otherwise(APPEND).cast("int").alias(OP)
    ]


def _flink_op() -> list[Column]:
    def kind(name: str) -> tuple[Column, Column]:
        short, code = FLINK_KINDS[name]
        return F.lit(short), F.lit(code)

    conditions = [
        (_is("DELETE", update=True), kind("UPDATE_BEFORE")),
        (_is("INSERT", update=True), kind("UPDATE_AFTER")),
        (F.col(METADATA_ACTION) == "DELETE", kind("DELETE")),
    ]
    short, code = kind("INSERT")
    for condition, (s, c) in reversed(conditions):
        short, code = F.when(condition, s).otherwise(short), F.when(condition, c).otherwise(code)
    return [short.alias(OP), code.cast("tinyint").alias("op_code")]


_OPS = {
    Format.ODF: _odf_op,
    Format.RETRACT: _retract_op,
    Format.UPSERT: _retract_op,
    Format.FLINK: _flink_op,
}


def _upserts(df: DataFrame) -> DataFrame:
    """Per commit and key, the last new image, else (only deletes) one retraction."""
    last = Window.partitionBy(_V, _ID).orderBy(F.col(_RANK).desc(), F.col(METADATA_ROW_ID).desc())
    kept = df.withColumn("_cl_n", F.row_number().over(last)).where(F.col("_cl_n") == 1)
    return kept.drop("_cl_n")


def _debezium(df: DataFrame, columns: list[str], commit: Commit) -> DataFrame:
    image = F.struct(*[F.col(quoted(c)) for c in columns])

    def half(action: str, value: Column) -> Column:
        return F.first(F.when(F.col(METADATA_ACTION) == action, value), ignorenulls=True)

    changes = df.groupBy(_V, _ID).agg(
        half("DELETE", image).alias("before"),
        half("INSERT", image).alias("after"),
        F.coalesce(
            half("INSERT", F.col(METADATA_ROW_ID)), half("DELETE", F.col(METADATA_ROW_ID))
        ).alias(METADATA_ROW_ID),
        F.max(_TS).alias(_TS),
    )
    created = "r" if commit.initial_rows else "c"
    op = F.when(F.col("before").isNull(), created).when(F.col("after").isNull(), "d").otherwise("u")
    ts_ms = (F.unix_micros(F.col(_TS)) / 1000).cast("bigint")
    numbered = _numbered(changes.orderBy(F.col(_V).asc_nulls_first(), F.col(_ID)))
    source = F.struct(
        F.lit(commit.source).alias("table"),
        F.col(_V).alias("version"),
        ts_ms.alias("ts_ms"),
        F.col(METADATA_ROW_ID).alias("row_id"),
        F.col(OFFSET).cast("bigint").alias(OFFSET),
    )
    return numbered.select(
        op.alias(OP), "before", "after", source.alias("source"), ts_ms.alias("ts_ms")
    )
