"""A class-data-sharing archive of the classes Spark loads, so that a local Spark starts faster.

A new JVM spends most of its first seconds loading and verifying Spark's classes one by one from
its jars. Java maps them ready-made from a class-data-sharing (CDS) archive instead: measured on
a worker that connects and runs a dozen small transactions, the connect went from 13 to 9 s
and the first statement from 11.5 to 8 s (bench/ANALYSIS.md).

The archive is built once per user and setup (in the same cache as the expressions jar, keyed by
the Java and PySpark versions) by ``build()``, which ``scripts/bootstrap.sh``
runs: a child process starts Spark with ``-XX:ArchiveClassesAtExit``,
runs a few statements of every kind, and stops; Java writes the classes it loaded at exit, about
200 MB. Every local SparkSession changelake starts then maps it (``java_options``). The JVM
checks the archive against its class path and Java build, and ignores one that does not match,
silently: Spark then starts as it would without one.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
from functools import cache
from pathlib import Path

import pyspark

from changelake.spark import native

# Statements whose classes the archive should hold: reads and writes of every kind.
_WORKLOAD = textwrap.dedent(
    """
    import sys
    import changelake
    from changelake.spark.setup import default_spark

    spark = default_spark()
    s = changelake.connect(sys.argv[1], spark=spark)
    for statement in [
        "CREATE TABLE t (id INT, v BIGINT, s STRING)",
        "INSERT INTO t VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c')",
        "CREATE VIEW w AS SELECT t.s, SUM(t.v) AS total FROM t JOIN t AS u ON t.id = u.id GROUP BY t.s",
        "CREATE STREAM st ON TABLE t",
        "UPDATE t SET v = v + 1 WHERE id = 1",
        "DELETE FROM t WHERE id = 2",
        "MERGE INTO t USING (SELECT 3 AS id, 5 AS v) x ON t.id = x.id"
        " WHEN MATCHED THEN UPDATE SET v = x.v WHEN NOT MATCHED THEN INSERT (id, v) VALUES (x.id, x.v)",
        "SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)",
        "SELECT * FROM w CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)",
        "CREATE TABLE archived AS SELECT id, v, s FROM st",
        "SELECT s, count(*) FROM t GROUP BY s ORDER BY s",
    ]:
        result = s.sql(statement)
        if statement.startswith("SELECT"):
            result.collect()
    s.close()
    spark.stop()
    """
)
_BUILD_SECONDS = 900


@cache
def archive_path() -> Path:
    """Where the archive of this Java and Spark lives (it may not exist yet)."""
    digest = hashlib.sha256(pyspark.__version__.encode())
    digest.update(os.environ.get("SPARK_HOME", "").encode())
    java = native.java_executable()
    if java is not None:
        digest.update(os.path.realpath(java).encode())
        try:
            digest.update(native.java_version(java).encode())
        except OSError:  # Spark will not start either; check_java says why
            pass
    return native.cache_dir() / f"spark-classes-{digest.hexdigest()[:16]}.jsa"


def java_options() -> str | None:
    """The JVM options that map the archive, or None while there is none."""
    path = archive_path()
    if not path.exists():
        return None
    # off: a JVM that cannot use the archive says so on stdout, and starts as it would without;
    # quoted: Spark splits the options on spaces outside quotes
    return f'"-XX:SharedArchiveFile={path}" -Xlog:cds=off -Xlog:cds+dynamic=off'


def build() -> Path:
    """Build the archive unless it exists; its path. Raises RuntimeError when the workload fails."""
    target = archive_path()
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    env = os.environ | {
        "PYSPARK_SUBMIT_ARGS": shlex.join(
            [
                "--driver-java-options",
                f'"-XX:ArchiveClassesAtExit={partial}" -Xlog:cds=off -Xlog:cds+dynamic=off',
                "pyspark-shell",
            ]
        ),
        "CHANGELAKE_SPARK_MASTER": "local[1]",
    }
    # Java writes the archive as its JVM exits; the JVM holds the child's output pipes until
    # then, so run() returns once the archive is complete.
    try:
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [sys.executable, "-c", _WORKLOAD, str(Path(tmp) / "wh")],
                capture_output=True,
                text=True,
                env=env,
                check=False,
                timeout=_BUILD_SECONDS,
            )
    except subprocess.TimeoutExpired as e:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the archive's workload ran past {_BUILD_SECONDS} s") from e
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the archive's workload failed:\n{done.stderr[-3000:]}")
    os.replace(partial, target)  # atomic: a concurrent builder writes an equivalent archive
    return target
