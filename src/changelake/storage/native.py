"""Two Catalyst expressions changelake adds to Spark, compiled from ``storage/jvm/`` on first use.

Why a JVM piece: applying a deletion vector or looking up a per-file constant (base row id,
version) has to happen for every row a scan reads, and Spark's own operators cost 40-90 ns a
row for it (a broadcast hash join probes per row; a literal bitmap or CASE expression did not
do better; measured in bench/ANALYSIS.md). These expressions find the row's file once per file
(rows of one file arrive together) and then cost a bit test or an array read per row.

- ``changelake_in_positions(file_name, position)``: whether the row is in a broadcast set of
  (file name, position) pairs.
- ``changelake_file_value(file_name)``: a per-file BIGINT from a broadcast table.

The tables travel as Spark broadcast variables (built on the driver from metadata the catalog
and the deletion-vector files hold), so the expressions also work on a cluster. Where the jar
cannot be built (no ``javac``) or the SparkSession was started without it, ``available`` is
false and callers use joins instead; ``spark.changelake.jvmExpressions=false`` turns them off.
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
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyspark
from pyspark.sql import Column, SparkSession

from changelake.storage.spark_private import (
    catalyst_column,
    catalyst_expression,
    jvm_broadcast,
    jvm_class,
)

SOURCES = Path(__file__).parent / "jvm"
PACKAGE = "io.changelake.spark"
ENABLED = "spark.changelake.jvmExpressions"

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


def in_positions(
    spark: SparkSession, file: Column, position: Column, positions: Mapping[str, pa.Array]
) -> Column:
    """Whether (``file``, ``position``) is one of ``positions`` (file name -> int64 positions)."""
    table = bytearray()
    for name, values in positions.items():
        values = values.cast(pa.int64())
        table += _name(name) + struct.pack("<i", len(values))
        table += values.buffers()[1].to_pybytes()[
            8 * values.offset : 8 * (values.offset + len(values))
        ]
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
