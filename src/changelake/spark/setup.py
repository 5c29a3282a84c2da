"""Starting a local SparkSession the way changelake needs it, after checking for Java."""

from __future__ import annotations

import contextlib
import logging
import os
import re

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway
from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

from changelake.errors import JavaNotFoundError, SparkStartError
from changelake.spark import class_archive, native
from changelake.spark.private import (
    cache_class_lookups,
    cache_function_lookups,
    context_running,
    quiet_task_failure_logs,
)

SPARK_CONF = {
    # pools share the cores between threads (the scheduler's refreshes and task runs); inside a
    # pool, and with one thread, jobs run first come first served as before
    "spark.scheduler.mode": "FAIR",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.summary.metadata.level": "NONE",
    "spark.sql.parquet.enableVectorizedReader": "true",
    # Otherwise every DataFrame and Column call records its Python call site in the JVM (about
    # five more py4j round trips each); changelake builds its plans in thousands of such calls,
    # and call sites inside changelake tell users nothing. PySpark reads it once per process.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # changelake reads tables as lists of files; past 32 paths Spark lists them with a Spark
    # job (0.2-0.4 s here) where the driver takes milliseconds for local files and few hundred
    # object-store paths
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "512",
    # Local files without Hadoop's .crc side files: the checksummed file system re-reads a
    # checksum chunk at every seek, so a read of scattered pages (an index lookup, a late read)
    # took 5x as long (the pages of 10,000 keys: 3.0 s against 0.6 s)
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
}
JVM_OPTIONS = "CHANGELAKE_JVM_OPTIONS"
EXTENSIONS, ONE_TASK = "spark.sql.extensions", "io.changelake.spark.OneTask"
# Spark prepends these to the user's spark.driver.extraJavaOptions; setting that one instead
# would replace what a user's spark-defaults.conf gives.
DRIVER_OPTIONS = "spark.driver.defaultJavaOptions"
# A log file past this size is moved aside (to ``<log>.1``) when the next Spark starts.
LOG_BYTES = 16 << 20
# Settings every changelake session needs, also on a SparkSession the user brings.
RUNTIME_CONF = ("spark.sql.parquet.outputTimestampType",)


# JDBC drivers of external tables' sources, from Debian packages (libpostgresql-jdbc-java)
JDBC_DRIVERS = ("/usr/share/java/postgresql.jar",)


def spark_conf(jvm_options: str | None = None) -> dict[str, str]:
    """The settings of a SparkSession for changelake: ``SPARK_CONF`` and, where it can be built,
    the jar of changelake's Spark expressions (spark/native.py). A session started without
    them still works, with slower reads of deletion vectors. The JDBC drivers installed
    (``JDBC_DRIVERS``) are added for external tables.

    The driver's JVM options map the class archive (spark/class_archive.py) when it has been
    built, followed by ``jvm_options``: ``None`` reads ``CHANGELAKE_JVM_OPTIONS``, ``""`` adds
    none (e.g. ``-XX:TieredStopAtLevel=1`` starts short scripts faster and runs long jobs
    slower). They go after ``spark.driver.defaultJavaOptions`` of ``spark-defaults.conf``, and
    Spark puts the user's ``spark.driver.extraJavaOptions`` after them: every option survives,
    and where two disagree the user's (the last) wins."""
    conf = dict(SPARK_CONF)
    built = native.jar()
    jars = [str(built)] if built is not None else []
    jars += [j for j in JDBC_DRIVERS if os.path.exists(j)]
    if jars:
        conf["spark.jars"] = ",".join(jars)
    if built is not None:  # small plans run as one stage (OneTask.java); a user's come first
        conf[EXTENSIONS] = ",".join(filter(None, [configured(EXTENSIONS), ONE_TASK]))
    extra = os.environ.get(JVM_OPTIONS) if jvm_options is None else jvm_options
    ours = [o for o in (class_archive.java_options(), extra) if o]
    if ours:
        conf[DRIVER_OPTIONS] = " ".join([*filter(None, [configured(DRIVER_OPTIONS)]), *ours])
    return conf


def configured(key: str) -> str | None:
    """The value of ``key`` in the ``spark-defaults.conf`` that spark-submit reads (in
    ``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``; PySpark's own directory is its SPARK_HOME):
    a setting changelake gives replaces it, so changelake extends it instead."""
    home = os.environ.get("SPARK_HOME") or os.path.dirname(os.path.abspath(pyspark.__file__))
    directory = os.environ.get("SPARK_CONF_DIR") or os.path.join(home, "conf")
    try:
        with open(os.path.join(directory, "spark-defaults.conf"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        # java.util.Properties: "key value", "key=value" or "key: value"; # and ! comment
        parts = re.split(r"\s*[=:\s]\s*", line.strip(), maxsplit=1)
        if parts[0] == key and not line.lstrip().startswith(("#", "!")):
            found = parts[1].strip() if len(parts) > 1 else ""
    return found


def check_java() -> None:
    """Raise JavaNotFoundError unless Java 17 or newer can be started."""
    java = native.java_executable()
    how = (
        "changelake runs on Apache Spark, which needs Java 17 or newer: install it (for example"
        " `sudo apt-get install -y openjdk-17-jre-headless`) or set JAVA_HOME, then try again."
    )
    if java is None:
        raise JavaNotFoundError(f"Java was not found. {how}")
    try:
        out = native.java_version(java)
    except OSError as e:
        raise JavaNotFoundError(f"Java at {java} could not run ({e}). {how}") from e
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(found.group(1)) if found else 0
    if major == 1 and found and found.group(2):
        major = int(found.group(2))
    if major < 17:
        raise JavaNotFoundError(f"Found Java {major or 'of unknown version'} at {java}. {how}")


def default_spark(log: str | None = None) -> SparkSession:
    """The active SparkSession, or a new local one configured for changelake.

    ``log``: a file that takes the JVM's console output (Spark's and log4j's lines, the JVM's
    own warnings), appended to, instead of this process's stderr; a command line that prints
    results gives it, a library user sees Spark's lines as with any SparkSession."""
    # (the default session too: a thread of the user's, such as dbt's, has no active one)
    with contextlib.suppress(PySparkRuntimeError):
        return SparkSession.active()
    check_java()
    conf = {
        "spark.master": os.environ.get("CHANGELAKE_SPARK_MASTER", "local[*]"),
        "spark.app.name": "changelake",
        "spark.driver.memory": "4g",
        **spark_conf(),
    }
    if log is None or context_running():
        # (a running SparkContext keeps its JVM: a second one cannot start in this process)
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    else:
        spark = _logging_to(log, conf)
    quiet_task_failure_logs(spark)
    return spark


def _logging_to(log: str, settings: dict[str, str]) -> SparkSession:
    """A SparkSession whose JVM writes its stdout and stderr to the file ``log``."""
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    if os.path.exists(log) and os.path.getsize(log) > LOG_BYTES:
        os.replace(log, log + ".1")
    conf = SparkConf().setAll(list(settings.items()))
    with open(log, "ab") as out:
        out.write(f"--- changelake: Spark starting (process {os.getpid()})\n".encode())
        out.flush()
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
        except Exception as e:  # noqa: BLE001 - any failure to start is reported with the log
            raise SparkStartError(
                f"Spark did not start ({e}); its output is in {log}. Run with --verbose to see"
                " it here."
            ) from e
    try:
        context = SparkContext(conf=conf, gateway=gateway)
    except BaseException:
        gateway.shutdown()
        raise
    return SparkSession(context)


def prepare(spark: SparkSession) -> SparkSession:
    """Apply the settings changelake relies on to ``spark``."""
    cache_function_lookups()
    cache_class_lookups()
    for key in RUNTIME_CONF:
        spark.conf.set(key, SPARK_CONF[key])
    return spark


def quiet_query_context_loggers() -> None:
    """Stop PySpark logging a Java stack trace for every analysis error it raises.

    changelake catches those errors and reports them in its own words.
    """
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
