"""COPY INTO '<dir>' FROM (query) and session.export: a stream consumed into files exactly once.

ODF Parquet keeps the CHANGES result, its INT32 ``op`` and its order; Debezium JSON lines parse;
an export moves the stream's frontier; a real process killed between the rename and the catalog
commit, and a crash before the rename, lose and repeat nothing; bad requests say what to do.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import rows

from changelake.changelog import export as export_module
from changelake.changelog.layout import MANIFEST, TEMPORARY, ExportDirectory
from changelake.errors import (
    ChangelakeError,
    ExpressionError,
    InvalidStatementError,
    TransactionError,
    UnsupportedError,
)

ODF = "SELECT * FROM s CHANGES (FORMAT => ODF)"


def _stream(session) -> None:
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("CREATE STREAM s ON TABLE t")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    session.sql("UPDATE t SET v = 'B' WHERE id = 2")
    session.sql("DELETE FROM t WHERE id = 3")


def _has_data(session) -> bool:
    return session.stream_has_data("s")


def _complete(out: Path) -> dict:
    """What a reader reads: the directories with a manifest, by name."""
    return ExportDirectory.at(str(out)).complete()


def _exported(out: Path) -> list[tuple]:
    """(op, id, v) of every row in every complete directory, directory by directory in file and
    row order."""
    found = []
    for name, manifest in sorted(_complete(out).items()):
        for f in manifest.files:
            table = pq.read_table(out / name / f.name, columns=["op", "id", "v"])
            found += [(r["op"], r["id"], r["v"]) for r in table.to_pylist()]
    return found


def test_an_odf_parquet_export_of_a_stream_equals_its_changes_and_consumes_them(session, tmp_path):
    _stream(session)
    want = session.sql(ODF).collect()
    out = tmp_path / "out"
    result = session.sql(f"COPY INTO '{out}' FROM ({ODF})").collect()[0]
    (name,) = _complete(out)
    assert name == "s-0-3"  # from frontier 0 (exclusive) to version 3
    assert result.directory == str(out / name) and result.rows == len(want) == 2
    assert result.streams_consumed == "s-0-3" and result.files >= 1
    manifest = json.loads((out / name / MANIFEST).read_text())
    assert manifest["rows"] == 2 and manifest["consumed"][0]["end_inclusive"] == [[1, 3]]
    files = [out / name / f["name"] for f in manifest["files"]]
    assert sorted(files) == sorted((out / name).glob("part-*.parquet"))
    assert str(pq.read_schema(files[0]).field("op").type) == "int32"
    back = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert [r["offset"] for r in back] == list(range(2))  # the order survives in the file
    spark_back = session.spark.read.parquet(str(out / name)).orderBy("offset").collect()
    assert [tuple(r) for r in spark_back] == [tuple(r) for r in want]
    assert [r["METADATA$ROW_ID"] for r in back] == [r["METADATA$ROW_ID"] for r in want]
    assert [(r["op"], r["id"]) for r in back] == [(0, 1), (0, 2)]  # -C/+C cancel within 0..3
    assert not _has_data(session)
    # A second export writes only what is new since.
    session.sql("UPDATE t SET v = 'A' WHERE id = 1")
    second = session.export(ODF, str(out))
    assert second.directory.endswith("/s-3-4") and second.rows == 2
    assert _exported(out) == [(0, 1, "a"), (0, 2, "B"), (2, 1, "a"), (3, 1, "A")]
    assert not _has_data(session)


def test_debezium_json_lines_have_the_envelope(session, tmp_path):
    session.sql("CREATE TABLE u (id INT, v STRING)")
    session.sql("CREATE STREAM su ON TABLE u")
    session.sql("INSERT INTO u VALUES (1, 'a'), (2, 'b')")
    session.sql("UPDATE u SET v = 'B' WHERE id = 2")  # a separate commit: Debezium "u"
    session.sql("DELETE FROM u WHERE id = 1")
    out = tmp_path / "cdc"
    result = session.sql(
        f"COPY INTO '{out}' FROM (SELECT * FROM su CHANGES (FORMAT => DEBEZIUM))"
        " FILE_FORMAT = (TYPE = JSON)"
    ).collect()[0]
    (name,) = _complete(out)
    assert name == "su-0-3"
    lines = [
        json.loads(line)
        for f in sorted((out / name).glob("part-*.json"))
        for line in f.read_text().splitlines()
    ]
    assert len(lines) == result.rows
    for event in lines:
        assert set(event) == {"op", "before", "after", "source", "ts_ms"}
        assert event["source"]["table"] == "u" and isinstance(event["ts_ms"], int)
    assert sorted((e["op"], (e["after"] or e["before"])["id"]) for e in lines) == [("c", 2)]
    assert [e["before"] for e in lines] == [None]  # written as null, not left out


def test_a_plain_export_writes_a_statement_directory(session, tmp_path):
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    result = session.export("SELECT * FROM t", str(tmp_path / "out"), file_format="json")
    assert result.directory.endswith(f"/export-{result.statement_id}") and result.rows == 2
    assert list(_complete(tmp_path / "out")) == [f"export-{result.statement_id}"]


def test_directories_are_named_by_the_frontiers_consumed(session, tmp_path):
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("CREATE TABLE u (id INT, w STRING)")
    session.sql("INSERT INTO t VALUES (1, 'a')")
    session.sql("CREATE VIEW tu AS SELECT t.id, v, w FROM t JOIN u ON t.id = u.id")
    session.sql("CREATE STREAM vs ON VIEW tu")
    session.sql("CREATE STREAM init ON TABLE t SHOW_INITIAL_ROWS = TRUE")
    session.sql("INSERT INTO u VALUES (1, 'x')")
    both = session.export("SELECT id FROM vs UNION ALL SELECT id FROM init", str(tmp_path))
    # vs: t at 1 -> 1, u at 0 -> 1 (by table id); init: t's rows at version 1
    assert both.directory.endswith("/vs-1_0-1_1__init-init-1") and both.rows == 2
    assert not session.stream_has_data("vs") and not session.stream_has_data("init")


class _Crash(BaseException):
    """A crash: nothing of the export's own error handling runs."""


def _crash(directory: str) -> None:
    raise _Crash(directory)


def test_a_crash_before_the_rename_leaves_only_a_temporary_directory(
    session, tmp_path, monkeypatch
):
    _stream(session)
    out = tmp_path / "out"
    monkeypatch.setattr(export_module, "before_rename", _crash)
    with pytest.raises(_Crash):
        session.export(ODF, str(out))
    assert [p.name.startswith(TEMPORARY) for p in out.iterdir()] == [True]
    assert _complete(out) == {} and _has_data(session)
    monkeypatch.undo()
    session.export(ODF, str(out))
    assert [p.name for p in out.iterdir()] == ["s-0-3"]  # the temporary directory is gone
    assert len(_exported(out)) == 2


def test_a_crash_after_the_rename_is_replaced_by_the_same_interval(session, tmp_path, monkeypatch):
    _stream(session)
    out = tmp_path / "out"
    monkeypatch.setattr(export_module, "before_commit", _crash)
    with pytest.raises(_Crash):
        session.export(ODF, str(out))
    first = _complete(out)["s-0-3"].statement_id
    monkeypatch.undo()
    session.export(ODF, str(out))
    assert list(_complete(out)) == ["s-0-3"] and _complete(out)["s-0-3"].statement_id != first
    assert _exported(out) == [(0, 1, "a"), (0, 2, "B")]


def test_bad_exports_say_what_to_do(session, tmp_path):
    _stream(session)
    out = tmp_path / "out"
    session.sql("BEGIN")
    with pytest.raises(TransactionError, match="COMMIT or ROLLBACK first"):
        session.sql(f"COPY INTO '{out}' FROM ({ODF})")
    session.sql("ROLLBACK")
    inside = f"{session.warehouse.root}/data/exports"
    with pytest.raises(InvalidStatementError, match="outside the warehouse"):
        session.sql(f"COPY INTO '{inside}' FROM ({ODF})")
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ChangelakeError, match="could not write"):
        session.export(ODF, str(tmp_path / "a_file"))
    with pytest.raises(InvalidStatementError, match="Did you mean JSON"):
        session.sql(f"COPY INTO '{out}' FROM ({ODF}) FILE_FORMAT = (TYPE = JSONN)")
    with pytest.raises(InvalidStatementError, match="only option is FILE_FORMAT"):
        session.sql(f"COPY INTO '{out}' FROM ({ODF}) OVERWRITE = TRUE")
    with pytest.raises(InvalidStatementError, match="FROM \\(SELECT"):
        session.sql(f"COPY INTO '{out}' FROM s")
    with pytest.raises(UnsupportedError, match="loading files"):
        session.sql("COPY INTO t FROM '/somewhere'")
    with pytest.raises(ExpressionError, match="division by zero"):
        session.sql(f"COPY INTO '{out}' FROM (SELECT id DIV 0 AS q FROM s)")
    assert list(out.iterdir()) == []  # the failed export removed its temporary directory
    assert _has_data(session)  # nothing was consumed
    assert rows(session.sql("SELECT id, v FROM t")) == [(1, "a"), (2, "B")]


# The exporter to kill starts its Spark (the slow part) while the test prepares, then waits.
_CHILD = """
import os, signal, sys
import changelake
from changelake.changelog import export
from changelake.spark.setup import default_spark

default_spark()
print("READY", flush=True)
warehouse, out = sys.stdin.readline().rstrip("\\n").split("\\t")
export.before_commit = lambda directory: os.kill(os.getpid(), signal.SIGKILL)
changelake.connect(warehouse).export("SELECT * FROM s CHANGES (FORMAT => ODF)", out)
print("NOT KILLED", flush=True)
"""
_QUICK_SPARK = {
    "CHANGELAKE_SPARK_MASTER": "local[1]",
    "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false --driver-memory 1g pyspark-shell",
}


@pytest.fixture(scope="module")
def exporter_to_kill(tmp_path_factory) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    log = tmp_path_factory.mktemp("child") / "stderr.txt"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=os.environ | _QUICK_SPARK,
        )
    yield proc, log
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def test_a_process_killed_before_the_commit_loses_and_repeats_nothing(
    session, tmp_path, exporter_to_kill
):
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("CREATE STREAM s ON TABLE t")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    session.export(ODF, str(tmp_path / "out"))  # committed: 0-1
    session.sql("INSERT INTO t VALUES (3, 'c'), (4, 'd')")
    child, log = exporter_to_kill
    assert child.stdout.readline() == "READY\n", log.read_text()
    out, _ = child.communicate(f"{session.warehouse.root}\t{tmp_path / 'out'}\n", timeout=120)
    assert child.returncode == -signal.SIGKILL, out + log.read_text()
    # The killed export's directory is complete, but the stream did not move.
    assert sorted(_complete(tmp_path / "out")) == ["s-0-1", "s-1-2"]
    assert _has_data(session)
    session.sql("INSERT INTO t VALUES (5, 'e')")  # the re-run reads a longer interval
    session.export(ODF, str(tmp_path / "out"))
    assert sorted(_complete(tmp_path / "out")) == ["s-0-1", "s-1-3"]
    exported = _exported(tmp_path / "out")
    assert sorted(exported) == [(0, i, v) for i, v in enumerate("abcde", 1)]  # each exactly once
    assert not _has_data(session)
