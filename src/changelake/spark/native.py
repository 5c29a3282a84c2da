"""changelake's JVM piece, compiled from ``spark/jvm/`` on first use: a Parquet file format and
two Catalyst expressions.

Why a JVM piece: applying a deletion vector or looking up a per-file constant (base row id,
version) has to happen for every row a scan reads, and Spark's own operators cost 40-90 ns a
row for it (a broadcast hash join probes per row; a literal bitmap or CASE expression did not
do better; measured in bench/ANALYSIS.md).

- ``ChangelakeParquet`` (``read_relation``): Spark's Parquet file format with each file's
  deleted positions skipped inside the reader, batch by batch, the per-file constants as
  constant columns of the batch and the rows' METADATA$ROW_IDs written per batch
  (``ROW_HEX``): a scan has no join, no ``_metadata`` struct and no per-row lookup or
  expression, and keeps Spark's vectorized reading, pruning and filter pushdown.
- ``changelake_in_positions(file_name, position)``: whether the row is in a broadcast set of
  (file name, position) pairs; ``changelake_file_value(file_name)``: a per-file BIGINT from a
  broadcast table. They serve Spark's own Parquet reader when the format is off
  (``spark.changelake.parquetReader=false``): they find the row's file once per file and then
  cost a bit test or an array read per row.

The tables are built on the driver from metadata the catalog and the deletion-vector files hold
and travel with the tasks (the reader's, up to 64 KiB) or as Spark broadcast variables, so all of
it also works on a cluster. Where the jar cannot
be built (no ``javac``) or the SparkSession was started without it, ``available`` is false and
callers use joins instead; ``spark.changelake.jvmExpressions=false`` turns the piece off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import struct
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyspark
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from changelake.spark.private import (
    catalyst_column,
    catalyst_expression,
    frame_of,
    jvm_broadcast,
    jvm_class,
    jvm_frame,
)
from changelake.spark.relation import Read, Relation

SOURCES = Path(__file__).parent / "jvm"
PACKAGE = "io.changelake.spark"
ENABLED = "spark.changelake.jvmExpressions"
READER = "spark.changelake.parquetReader"
# The reader's columns that are not in the Parquet files (ChangelakeParquet.java).
# The reader's virtual column holding a row's METADATA$ROW_ID (``snapshot.scan_files``); the
# same string as ``storage.row_ids.row_id_sql`` computes from an identity column.
ROW_HEX = "_cl_row_hex"
VIRTUAL = ("_cl_file", "_cl_pos", "_cl_size", "_i_base", "_i_version", "_i_tag", ROW_HEX)


def virtual_fields() -> list[StructField]:
    """The ``VIRTUAL`` columns with their types, for a read's schema."""
    strings = {VIRTUAL[0], ROW_HEX}
    return [StructField(n, StringType() if n in strings else LongType()) for n in VIRTUAL]


_log = logging.getLogger(__name__)


def _spark_jars() -> Path:
    home = os.environ.get("SPARK_HOME")
    return Path(home) / "jars" if home else Path(pyspark.__file__).parent / "jars"


def java_executable() -> str | None:
    """The ``java`` Spark starts: JAVA_HOME's, else the one on the PATH; None if there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else None
    return java if java and os.path.exists(java) else shutil.which("java")


@cache
def java_version(java: str) -> str:
    """What ``java -version`` prints (on stderr). Raises OSError when it cannot run."""
    return subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr


def cache_dir() -> Path:
    """changelake's per-user cache of built artifacts (the expressions jar, the class archive)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "changelake"


@cache
def jar() -> Path | None:
    """The jar of the expressions, compiled against this PySpark's jars when its sources or
    PySpark changed (cached per user); None, with a warning, if it cannot be built."""
    sources = sorted(SOURCES.glob("*.java"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    for source in sources:
        digest.update(source.read_bytes())
    target = cache_dir() / f"changelake-expressions-{digest.hexdigest()[:16]}.jar"
    if target.exists():
        return target
    javac = shutil.which("javac")
    if javac is None:
        _log.warning(
            "javac was not found, so changelake reads deletion vectors with joins (slower);"
            " install a JDK (for example `apt-get install openjdk-17-jdk-headless`)"
        )
        return None
    with tempfile.TemporaryDirectory() as tmp:
        command = [javac, "--release", "17", "-nowarn", "-cp", str(_spark_jars() / "*")]
        command += ["-d", tmp, *map(str, sources)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            _log.warning("compiling changelake's Spark expressions failed:\n%s", done.stderr)
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w") as out:
            for cls in sorted(Path(tmp).rglob("*.class")):
                out.write(cls, cls.relative_to(tmp).as_posix())
        os.replace(partial, target)  # atomic: concurrent builders write the same bytes
    return target


def available(spark: SparkSession) -> bool:
    """Whether ``spark`` can run the expressions (its JVM loaded the jar) and they are on."""
    if spark.conf.get(ENABLED, "true").lower() != "true":
        return False
    return jvm_class(spark, f"{PACKAGE}.InPositions") is not None


def _name(name: str) -> bytes:
    encoded = name.encode()
    return struct.pack("<i", len(encoded)) + encoded


def _longs(values: pa.Array) -> bytes:
    """The values as little-endian int64s (Arrow's own buffer, which is little-endian)."""
    values = values.cast(pa.int64())
    return values.buffers()[1].to_pybytes()[8 * values.offset : 8 * (values.offset + len(values))]


def in_positions(
    spark: SparkSession, file: Column, position: Column, positions: Mapping[str, pa.Array]
) -> Column:
    """Whether (``file``, ``position``) is one of ``positions`` (file name -> int64 positions)."""
    table = bytearray()
    for name, values in positions.items():
        table += _name(name) + struct.pack("<i", len(values)) + _longs(values)
    make = jvm_class(spark, f"{PACKAGE}.InPositions")
    built = make(
        catalyst_expression(spark, file),
        catalyst_expression(spark, position),
        jvm_broadcast(spark, bytes(table)),
    )
    return catalyst_column(spark, built)


def file_values(
    spark: SparkSession, file: Column, rows: Mapping[str, Sequence[int | None]], count: int
) -> list[Column]:
    """``count`` BIGINT columns: the values of the row's file in ``rows`` (file name -> values),
    NULL for a file not in ``rows``."""
    table = bytearray()
    for name, values in rows.items():
        mask = sum(1 << i for i, v in enumerate(values) if v is None)
        table += _name(name) + struct.pack("<qi", mask, count)
        table += struct.pack(f"<{count}q", *[0 if v is None else v for v in values])
    shared = jvm_broadcast(spark, bytes(table))
    make = jvm_class(spark, f"{PACKAGE}.FileValue")
    name = catalyst_expression(spark, file)
    return [catalyst_column(spark, make(name, shared, i)) for i in range(count)]


def reader_available(spark: SparkSession) -> bool:
    """Whether ``spark`` can read with changelake's Parquet file format (the jar is loaded, the
    expressions and the reader are on); ``spark.changelake.parquetReader=false`` turns it off."""
    if spark.conf.get(READER, "true").lower() != "true":
        return False
    return available(spark) and jvm_class(spark, f"{PACKAGE}.ChangelakeParquet") is not None


# One data file for ``read_relation``: its name, its four constants (base row id, version, tag,
# the table's ROW_ID mask: ``row_ids.mask``; None for NULL), and the positions of its rows to
# skip (None: none).
FileRead = tuple[str, tuple[int | None, int | None, int | None, int | None], pa.Array | None]


def read_relation(
    uris: Sequence[str],
    schema: StructType,
    files: Sequence[FileRead],
    *,
    keep: bool = False,
    keys: bool = False,
    sizes: Sequence[int] = (),
    late: bool = False,
) -> Relation:
    """The rows of the Parquet files ``uris`` read with changelake's file format: ``schema``'s
    physical columns and any of the ``VIRTUAL`` columns, each file's positions skipped
    inside the reader, or, if ``keep``, only the rows at each file's positions read (and only
    they decoded where the files have a page index: late materialization), or, if ``keys``,
    the "positions" are sorted key hashes and only the pages of an index file that may hold one
    are read (``storage.index``). ``sizes``: each file's size in bytes, if the catalog knows
    them (then the file system is not asked). ``late``: a filter directly over the read is
    evaluated in the reader first, the other columns decoded at its matches only
    (``ReaderCondition.java``). A leaf of a relation: built by the JVM with the statement's
    plan."""
    table = bytearray()
    any_positions = False
    flags = (-(2**63) if keep else 0) + (2**62 if keys else 0)
    for name, constants, positions in files:
        mask = sum(1 << i for i, v in enumerate(constants) if v is None) + flags
        values = [0 if v is None else v for v in constants]
        count = 0 if positions is None else len(positions)
        any_positions |= count > 0 and not keys
        table += _name(name) + struct.pack("<q4qi", mask, *values, count)
        if count:
            table += _longs(positions)
    read = Read(tuple(uris), schema.json(), bytes(table), any_positions, tuple(sizes), late)
    return Relation.of_read(read, schema.fieldNames())


def select(df: DataFrame, exprs: Sequence[str]) -> DataFrame:
    """``df.selectExpr(*exprs)`` in one call to the JVM where the jar is loaded (PySpark's takes
    one per expression, and more)."""
    spark = df.sparkSession
    frames = jvm_class(spark, f"{PACKAGE}.Frames") if available(spark) else None
    if frames is None:
        return df.selectExpr(*exprs)
    return frame_of(spark, frames.select(jvm_frame(df), "\x01".join(exprs)))


def write_parquet(
    df: DataFrame,
    uri: str,
    *,
    one_file_if_small: bool = False,
    options: Mapping[str, str] | None = None,
) -> None:
    """Append ``df`` as Parquet files to the directory ``uri``, written in place (no staging and
    renames: ``DirectCommitProtocol``) where the jar is loaded; else by Spark's own protocol.
    ``one_file_if_small``: a plan ``Relation.frame`` ran as small is written as one file;
    ``options``: the writer's (Parquet's settings)."""
    frames = jvm_class(df.sparkSession, f"{PACKAGE}.Frames")
    if frames is None:
        df.write.mode("append").options(**(options or {})).parquet(uri)
    else:
        lines = "\n".join(f"{k}={v}" for k, v in (options or {}).items())
        frames.write(jvm_frame(df), uri, one_file_if_small, lines)


@dataclass(frozen=True)
class EventsWritten:
    """What ``write_events`` wrote: counts of the events by kind (``unresolved``, ``deleting``,
    ``updated_away``, ``inserting``, ``updating``), the positions written per data file name
    and whether one was written twice."""

    counts: dict[str, int]
    deleted: dict[str, int]
    repeated: bool


_EVENT_COUNTS = ("unresolved", "deleting", "updated_away", "inserting", "updating")


def write_events(
    df: DataFrame, data_uri: str, dv_uri: str, *, options: Mapping[str, str] | None = None
) -> EventsWritten | None:
    """Write a delta's events in one pass (``OnePass``: ``df`` has its ``_k``, ``_u``, ``_d``
    and ``_v`` columns): the new rows to a data file in ``data_uri``, the deleted positions to
    a DV file in ``dv_uri``. None, having written nothing, where the jar is not loaded or
    ``df``'s plan is not small."""
    one_pass = jvm_class(df.sparkSession, f"{PACKAGE}.OnePass")
    if one_pass is None:
        return None
    lines = "\n".join(f"{k}={v}" for k, v in (options or {}).items())
    text = one_pass.write(jvm_frame(df), data_uri, dv_uri, lines)
    if text is None:
        return None
    first, *files = text.split("\n")
    *counts, repeated = (int(v) for v in first.split())
    deleted = {name: int(n) for name, n in (line.rsplit("\t", 1) for line in files)}
    return EventsWritten(dict(zip(_EVENT_COUNTS, counts, strict=True)), deleted, repeated == 1)
