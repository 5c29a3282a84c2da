"""The class archive's JVM options: mapped when built, ignored quietly when they do not fit."""

from __future__ import annotations

import shlex
import shutil
import subprocess

from changelake.spark import class_archive, native, setup


def test_the_driver_maps_the_archive_when_it_exists_then_the_extra_options(tmp_path, monkeypatch):
    archive = tmp_path / "spark-classes.jsa"
    monkeypatch.setattr(class_archive, "archive_path", lambda: archive)
    monkeypatch.delenv(setup.JVM_OPTIONS, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # no spark-defaults.conf
    key = setup.DRIVER_OPTIONS
    assert key not in setup.spark_conf()
    assert setup.spark_conf("-Xss4m")[key] == "-Xss4m"
    archive.write_bytes(b"built")
    monkeypatch.setenv(setup.JVM_OPTIONS, "-XX:TieredStopAtLevel=1")
    options = shlex.split(setup.spark_conf()[key])
    assert options[0] == f"-XX:SharedArchiveFile={archive}"
    assert options[-1] == "-XX:TieredStopAtLevel=1"
    assert shlex.split(setup.spark_conf("")[key]) == options[:-1]
    # after an administrator's defaults, which Spark would otherwise lose
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.defaultJavaOptions -Da=1 -Db=2\n")
    assert shlex.split(setup.spark_conf("")[key]) == ["-Da=1", "-Db=2", *options[:-1]]


def test_a_jvm_ignores_an_archive_that_does_not_fit_without_a_word(tmp_path, monkeypatch):
    # e.g. one built before Java or PySpark were upgraded: Spark starts as without one
    archive = tmp_path / "a cache" / "spark-classes.jsa"  # a space: the options quote the path
    archive.parent.mkdir()
    archive.write_bytes(b"not an archive of this JVM")
    monkeypatch.setattr(class_archive, "archive_path", lambda: archive)
    options = class_archive.java_options()
    assert options is not None
    java = shutil.which("java")
    done = subprocess.run(
        [java, *shlex.split(options), "-version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout == ""
    assert "warning" not in done.stderr.lower() and "version" in done.stderr


def test_the_archive_key_changes_with_pyspark(monkeypatch):
    class_archive.archive_path.cache_clear()
    now = class_archive.archive_path()
    monkeypatch.setattr(class_archive.pyspark, "__version__", "0.0.1")
    class_archive.archive_path.cache_clear()
    try:
        other = class_archive.archive_path()
    finally:
        monkeypatch.undo()
        class_archive.archive_path.cache_clear()
    assert other != now and other.parent == now.parent == native.cache_dir()
    assert class_archive.archive_path() == now
