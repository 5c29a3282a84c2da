"""ALTER TABLE racing with writers in other processes: a write commits against the schema it was
planned for or is refused with a clear error; no committed file's columns disagree with the
table's schema at the version that added it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import changelake
from changelake.errors import ChangelakeError
from changelake.ingest import Client

WORKER = Path(__file__).with_name("schema_worker.py")
CHANGES = {
    "insert": "ALTER TABLE t ADD COLUMN added1 INT",
    "merge": "ALTER TABLE t DROP COLUMN n",
    "apply": "ALTER TABLE t ADD COLUMN added2 STRING",
}


def _files_agree_with_schema(session: changelake.Session, root: Path, table: str) -> None:
    """Every data file holds the table's columns at the version that added it: all of them for
    a statement's files, NULL-able ones possibly missing for an ingest channel's."""
    info = session.catalog.table(table)
    for version in range(info.current_version + 1):
        schema = session.catalog.schema_at(info.table_id, version)
        expected = {c.physical for c in schema.columns}
        required = {c.physical for c in schema.columns if not c.nullable}
        for live in session.catalog.snapshot_files(info.table_id, version):
            if live.file.begin_version != version:
                continue
            names = {n for n in pq.read_schema(root / live.file.path).names if n.startswith("c")}
            assert required <= names <= expected, (version, live.file.path, names, expected)


def test_alter_table_racing_with_insert_merge_and_apply_changes(tmp_path, spark, clock):
    root = tmp_path / "wh"
    session = changelake.connect(str(root), spark=spark, clock=clock)
    session.sql("CREATE TABLE t (id INT, name STRING, n INT)")
    session.sql("INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20)")
    go = tmp_path / "go"
    go.mkdir()
    env = os.environ | {"CHANGELAKE_SPARK_MASTER": "local[1]", "PYTHONUNBUFFERED": "1"}
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(root), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert worker.stdout is not None
    outcomes = {}
    for line in worker.stdout:
        kind, name, *rest = line.strip().split(" ", 2)
        if kind == "HOLD":
            session.sql(CHANGES[name])  # while the statement's files wait for their commit
            (go / name).touch()
        elif kind in ("RESULT", "RETRY"):
            outcomes[(kind, name)] = " ".join(rest)
    _, err = worker.communicate(timeout=300)
    assert worker.returncode == 0, err[-3000:]

    for name in CHANGES:
        refused = outcomes[("RESULT", name)]
        assert refused.startswith("conflict Table t's columns changed at version"), refused
        assert "it changed nothing. Run it again" in refused
        assert outcomes[("RETRY", name)] == "committed"
    got = {tuple(r) for r in session.sql("SELECT id, name, added1, added2 FROM t").collect()}
    assert got == {
        (1, "merged", None, None),
        (2, "b", None, None),
        (100, "inserted", None, None),
        (200, "applied", None, None),
    }
    _files_agree_with_schema(session, root, "t")
    session.close()


def test_an_ingest_channel_whose_column_is_dropped_commits_nothing(tmp_path, spark, clock):
    root = tmp_path / "wh"
    session = changelake.connect(str(root), spark=spark, clock=clock)
    session.sql("CREATE TABLE t (id INT, name STRING, n INT)")
    with Client(str(root), max_client_lag=3600, compact_after_files=None) as client:
        channel = client.open_channel("c", table="t")
        channel.insert_rows([{"id": 1, "name": "a", "n": 1}], end_offset_token="1")
        client.flush()
        channel.insert_rows([{"id": 2, "name": "b", "n": 2}], end_offset_token="2")
        session.sql("ALTER TABLE t ADD COLUMN note STRING")  # NULL-able: the channel goes on
        client.flush()
        channel.insert_rows([{"id": 3, "name": "c", "n": 3}], end_offset_token="3")
        session.sql("ALTER TABLE t DROP COLUMN name")  # the channel's rows hold it
        with pytest.raises(ChangelakeError, match="Column name of table t was dropped"):
            client.flush()
        assert channel.latest_committed_offset_token() == "2"
        with pytest.raises(ChangelakeError, match="Column name of table t was dropped"):
            channel.insert_rows([{"id": 4, "name": "d", "n": 4}], end_offset_token="4")
        reopened = client.open_channel("c", table="t")
        reopened.insert_rows([{"id": 3, "n": 3, "note": "again"}], end_offset_token="3")
        client.flush()
    got = {tuple(r) for r in session.sql("SELECT id, n, note FROM t").collect()}
    assert got == {(1, 1, None), (2, 2, None), (3, 3, "again")}
    _files_agree_with_schema(session, root, "t")
    session.close()
