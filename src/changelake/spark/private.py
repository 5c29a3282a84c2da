"""The private PySpark APIs changelake uses, each with why, and a public fallback where one exists.

Private APIs break under Spark Connect (a remote cluster), so nothing else may touch them.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable
from typing import Any

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import DataType

# Spark loggers that print a Java stack trace when a task fails; the failure itself reaches the
# caller as an exception, which changelake translates (a bad value, a NULL in a NOT NULL column).
_TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.util.Utils",
)


@functools.lru_cache(maxsize=1024)
def parse_type(type_name: str) -> DataType:
    """The Spark DataType of a type name such as ``decimal(10,2)``.

    ``_parse_datatype_string`` parses without a Spark job; the public ``DataType.fromDDL`` needs
    an active session (and a round trip under Spark Connect). Both ask the JVM (a few ms), and a
    statement asks for its tables' types many times: the answers are kept (DataTypes are values).
    """
    try:
        from pyspark.sql.types import _parse_datatype_string
    except ImportError:  # a future PySpark without it
        return DataType.fromDDL(type_name)
    return _parse_datatype_string(type_name)


def quiet_task_failure_logs(spark: SparkSession) -> None:
    """Silence task-failure stack traces in the console of a Spark session changelake started.

    log4j levels are only reachable through the JVM gateway (``_jvm``); there is no public API,
    and under Spark Connect there is no local JVM, so this is skipped there.
    """
    jvm = getattr(spark.sparkContext, "_jvm", None) if _has_context(spark) else None
    if jvm is None:
        return
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    for name in _TASK_FAILURE_LOGGERS:
        configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.OFF)


def context_running() -> bool:
    """Whether this process already runs a SparkContext (then no other can start in it).

    PySpark keeps it in the private ``SparkContext._active_spark_context``; the public
    ``SparkSession.getActiveSession()`` sees only sessions active in the calling thread."""
    return SparkContext._active_spark_context is not None


def _has_context(spark: SparkSession) -> bool:
    try:
        spark.sparkContext  # noqa: B018 - raises under Spark Connect
    except Exception:  # noqa: BLE001 - any failure means no local JVM
        return False
    return True


def physical_plan_lines(df: DataFrame) -> list[str]:
    """Spark's plan of ``df`` as lines of text, for EXPLAIN.

    ``DataFrame.explain`` only prints; the text itself comes from the JVM query execution
    (``_jdf``). Under Spark Connect (no ``_jdf``) the public explain output is captured instead.
    """
    jdf = getattr(df, "_jdf", None)
    if jdf is not None:
        return str(jdf.queryExecution().simpleString()).splitlines()
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        df.explain()
    return buffer.getvalue().splitlines()


def catalyst_expression(spark: SparkSession, column: Column) -> Any:
    """The JVM Catalyst expression of ``column``, to build one of changelake's own expressions
    (spark/native.py) on: Spark has no public API for adding expressions."""
    return _expression_utils(spark).expression(column._jc)


def catalyst_column(spark: SparkSession, expression: Any) -> Column:
    """A PySpark Column for a JVM Catalyst expression."""
    from pyspark.sql.classic.column import Column as ClassicColumn

    return ClassicColumn(_expression_utils(spark).column(expression))


def _expression_utils(spark: SparkSession) -> Any:
    # By its full name: one round trip to the JVM, where walking the package path makes six.
    return getattr(spark.sparkContext._jvm, "org.apache.spark.sql.classic.ExpressionUtils")


# Class lookups by JVM (each lookup is a round trip): {name: (the JVM view, class or None)}.
_classes: dict[str, tuple[Any, Any]] = {}


def jvm_class(spark: SparkSession, name: str) -> Any | None:
    """The JVM class ``name`` if the driver's JVM can load it, else None."""
    from py4j.java_gateway import JavaClass

    if not _has_context(spark):
        return None
    jvm = spark.sparkContext._jvm
    known = _classes.get(name)
    if known is not None and known[0] is jvm:
        return known[1]
    found = getattr(jvm, name, None)
    found = found if isinstance(found, JavaClass) else None
    _classes[name] = (jvm, found)
    return found


def jvm_session(spark: SparkSession) -> Any:
    """The JVM SparkSession behind ``spark``, for changelake's JVM piece to build plans on."""
    return spark._jsparkSession


def jvm_frame(df: DataFrame) -> Any:
    """The JVM Dataset behind ``df``."""
    return df._jdf


def frame_of(spark: SparkSession, jdf: Any) -> DataFrame:
    """A PySpark DataFrame of the JVM Dataset ``jdf`` (PySpark has no public constructor)."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    return ClassicDataFrame(jdf, spark)


def deferred_frame(spark: SparkSession, make: Callable[[], DataFrame]) -> DataFrame:
    """The DataFrame ``make`` returns, made when it is first used (its rows, schema or plan).

    What a non-query statement returns is a one-row DataFrame that is often never read, and
    making one asks the JVM to parse and analyse a query (10-20 ms, more than a NO_DATA refresh
    of a dynamic table costs). A classic PySpark DataFrame reaches its JVM Dataset only through
    ``_jdf``; this subclass makes that on first access. The fallback, for Spark Connect (no
    ``_jdf``) or a PySpark whose DataFrame is built otherwise, makes it at once.
    """
    if not _has_context(spark):
        return make()
    try:
        return _deferred_frame_class()(spark, make)
    except Exception:  # noqa: BLE001 - the constructor changed: no deferral
        return make()


@functools.cache
def _deferred_frame_class() -> type:
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    class DeferredFrame(ClassicDataFrame):
        def __init__(self, spark: SparkSession, make: Callable[[], DataFrame]):
            super().__init__(None, spark)  # type: ignore[arg-type]
            del self.__dict__["_jdf"]  # so that the property below makes it
            self._make = make

        @functools.cached_property
        def _jdf(self) -> Any:  # type: ignore[override]
            return jvm_frame(self._make())

    return DeferredFrame


def jobs_in_group(spark: SparkSession, group: str) -> int:
    """How many jobs the job group ``group`` has run: the JVM's array's length (PySpark's
    ``getJobIdsForGroup`` copies it into a list, a round trip per job)."""
    return len(spark.sparkContext._jsc.sc().statusTracker().getJobIdsForGroup(group))


def jvm_broadcast(spark: SparkSession, data: bytes) -> Any:
    """A JVM ``Broadcast<byte[]>`` of ``data``, for a JVM expression to read on the executors
    (PySpark's own broadcast variables hold pickled Python objects)."""
    return spark.sparkContext._jsc.broadcast(data)


def cache_class_lookups() -> None:
    """Make PySpark's ``sc._jvm.PythonUtils.toSeq(...)`` one round trip to the JVM instead of three.

    py4j resolves each name of such a chain with a round trip, and a short name such as
    ``PythonUtils`` first as a class of that name in every jar of Spark's class path (8% of the
    CPU of the JVM thread that serves Python, measured with Java Flight Recorder). PySpark does
    this for every list of columns it hands over. Packages, classes and static methods are the
    same for as long as the JVM is, so each answer is kept per gateway; field values are not.
    """
    try:
        from py4j import java_gateway, protocol
    except ImportError:  # Spark Connect without py4j
        return
    if getattr(java_gateway.JVMView.__getattr__, "cached_by_changelake", False):
        return
    found: dict[tuple[str, str], tuple[Any, Any]] = {}  # (scope, name) -> (gateway, answer)

    def keep(look_up: Any, scope: Any) -> Any:
        def cached(self: Any, name: str) -> Any:
            key = (scope(self), name)
            entry = found.get(key)
            if entry is not None and entry[0] is self._gateway_client:
                return entry[1]
            answer = look_up(self, name)
            if isinstance(answer, (java_gateway.JavaClass, java_gateway.JavaPackage)) or (
                isinstance(answer, java_gateway.JavaMember)
                and answer.target_id.startswith(protocol.STATIC_PREFIX)
            ):
                found[key] = (self._gateway_client, answer)
            return answer

        cached.cached_by_changelake = True  # type: ignore[attr-defined]
        return cached

    for cls, scope in (
        (java_gateway.JVMView, lambda view: "view " + view._id),
        (java_gateway.JavaPackage, lambda package: "package " + package._fqn),
        (java_gateway.JavaClass, lambda cls: "class " + cls._fqn),
    ):
        cls.__getattr__ = keep(cls.__getattr__, scope)


def cache_function_lookups() -> None:
    """Make each call of ``pyspark.sql.functions`` one round trip to the JVM instead of three.

    PySpark looks ``org.apache.spark.sql.functions`` and then the method up by reflection on
    every call (``_get_jvm_function``), and changelake builds its plans from thousands of such
    calls; the method found is the same every time, for as long as the JVM is. Skipped where
    the private hook is missing (Spark Connect builds columns without a JVM).
    """
    try:
        from pyspark.sql.functions import builtin
    except ImportError:
        return
    look_up = getattr(builtin, "_get_jvm_function", None)
    if look_up is None or getattr(look_up, "cached_by_changelake", False):
        return
    found: dict[str, tuple[Any, Any]] = {}

    def cached(name: str, sc: Any) -> Any:
        jvm = sc._jvm
        entry = found.get(name)
        if entry is None or entry[0] is not jvm:  # a new gateway: look it up again
            entry = found[name] = (jvm, look_up(name, sc))
        return entry[1]

    cached.cached_by_changelake = True  # type: ignore[attr-defined]
    builtin._get_jvm_function = cached
