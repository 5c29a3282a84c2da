"""The py4j lookups changelake keeps: the same answers as PySpark's, in fewer round trips."""

from __future__ import annotations

from contextlib import contextmanager

import py4j.clientserver
import pytest
from py4j.protocol import Py4JError
from pyspark.sql import functions as F

from changelake.spark.private import cache_class_lookups, cache_function_lookups


@contextmanager
def round_trips():
    counted = [0]
    send = py4j.clientserver.ClientServerConnection.send_command

    def counting(self, command):
        counted[0] += 1
        return send(self, command)

    py4j.clientserver.ClientServerConnection.send_command = counting
    try:
        yield counted
    finally:
        py4j.clientserver.ClientServerConnection.send_command = send


def test_a_column_list_and_a_function_call_take_one_round_trip_each(spark):
    cache_function_lookups()
    cache_class_lookups()
    jvm = spark.sparkContext._jvm
    jvm.PythonUtils.toSeq(["a"])  # the first lookups go to the JVM
    F.upper(F.lit("x"))
    with round_trips() as counted:
        seq = jvm.PythonUtils.toSeq(["a", "b"])
    assert counted[0] == 4  # a Java list, one add per item, and the call: no lookup
    assert seq.size() == 2
    with round_trips() as counted:
        column = F.upper(F.lit("x"))
    assert counted[0] == 2  # lit and upper, no reflection
    assert spark.range(1).select(column.alias("u")).first()["u"] == "X"


def test_packages_classes_and_static_methods_are_kept_but_field_values_are_not(spark):
    cache_class_lookups()
    jvm = spark.sparkContext._jvm
    assert jvm.java.lang.Integer is jvm.java.lang.Integer
    assert jvm.java.lang.Integer.parseInt is jvm.java.lang.Integer.parseInt
    assert jvm.java.lang.Integer.parseInt("42") == 42
    # a static field is read each time: its value may change
    with round_trips() as counted:
        assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
        assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    assert counted[0] == 2
    # and a name that is not there is still an error, every time
    for _ in range(2):
        with pytest.raises(Py4JError, match="does not exist"):
            jvm.java.lang.Integer.noSuchMember  # noqa: B018
