"""External tables FROM FILES: each file under the location is read once, in the commit that
registers it (oracle: the files' rows as PyArrow reads them); PATTERN filters; changed and
vanished files are reported, not read again; a bad file commits nothing; streams see each file's
rows once; users cannot write the table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest
from tests.conftest import rows
from tests.dynamic.test_scheduler import _scheduler

from changelake.errors import (
    ConflictError,
    ExternalTableError,
    InvalidStatementError,
    SourceError,
)
from changelake.external.directory import files
from changelake.runtime.env import Env


def parquet(path: Path, ids: list[int], *, names: list[str] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    names = names or [f"n{i}" for i in ids]
    pq.write_table(
        pa.table(
            {"id": pa.array(ids, pa.int32()), "amount": [i * 1.5 for i in ids], "name": names}
        ),
        path,
    )


def write_csv(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))


def write_json(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def oracle(paths: list[Path], read=pq.read_table) -> list[tuple]:
    """The union of the files' rows as PyArrow reads them."""
    table = pa.concat_tables([read(p) for p in paths])
    return sorted(zip(*(c.to_pylist() for c in table.columns), strict=True))


def version(session, name: str) -> int:
    return session.catalog.table(name).current_version


def shown(session, name: str) -> dict:
    return next(r.asDict() for r in session.sql("SHOW EXTERNAL TABLES").collect() if r.name == name)


def test_parquet_columns_inferred_and_each_new_file_read_once(session, tmp_path):
    src = tmp_path / "src"
    parquet(src / "a.parquet", [1, 2])
    parquet(src / "day=2" / "b.parquet", [3])
    (src / "_SUCCESS").write_text("")  # skipped, as Spark skips it
    session.sql(f"CREATE EXTERNAL TABLE t FROM FILES '{src}' FILE_FORMAT = (TYPE = PARQUET)")
    described = dict(session.sql("DESCRIBE EXTERNAL TABLE t").collect())
    assert (described["column id"], described["column amount"]) == ("INT", "DOUBLE")
    assert described["files_registered"] == "2" and described["kind"] == "FILES"
    read = [src / "a.parquet", src / "day=2" / "b.parquet"]
    assert rows(session.sql("SELECT id, amount, name FROM t")) == oracle(read)

    parquet(src / "c.parquet", [4, 5])
    before = version(session, "t")
    result = session.sql("ALTER EXTERNAL TABLE t REFRESH").collect()[0]
    assert result.rows_inserted == 2 and version(session, "t") == before + 1  # one commit
    read.append(src / "c.parquet")
    assert rows(session.sql("SELECT id, amount, name FROM t")) == oracle(read)
    session.sql("ALTER EXTERNAL TABLE t REFRESH")  # nothing new: no commit, no rows twice
    assert version(session, "t") == before + 1
    assert rows(session.sql("SELECT id, amount, name FROM t")) == oracle(read)
    assert shown(session, "t")["source_position"] == "3"
    assert [
        f.path for f in session.catalog.external_files(session.catalog.table("t").table_id)
    ] == [
        "a.parquet",
        "c.parquet",
        "day=2/b.parquet",
    ]


def test_csv_with_header_column_list_and_pattern(session, tmp_path):
    src = tmp_path / "csv"
    write_csv(src / "2024" / "a.csv", ["id|name", "1|x", "2|y"])
    write_csv(src / "notes.txt", ["id|name", "99|not data"])
    session.sql(
        f"CREATE EXTERNAL TABLE t (id BIGINT, name STRING) FROM FILES 'file://{src}'"
        " FILE_FORMAT = (TYPE = CSV, SKIP_HEADER = 1, FIELD_DELIMITER = '|')"
        " PATTERN = '.*[.]csv'"
    )
    write_csv(src / "2024" / "b.csv", ["id|name", "3|z"])
    session.sql("ALTER EXTERNAL TABLE t REFRESH")

    def read(p):
        return pacsv.read_csv(p, parse_options=pacsv.ParseOptions(delimiter="|"))

    expected = oracle([src / "2024" / "a.csv", src / "2024" / "b.csv"], read)
    assert rows(session.sql("SELECT id, name FROM t")) == expected
    assert shown(session, "t")["source_position"] == "2"  # notes.txt does not match

    session.sql(  # the header names inferred columns; without PARSE_HEADER they are c1, c2
        f"CREATE EXTERNAL TABLE named FROM FILES '{src}' FILE_FORMAT = (TYPE = CSV,"
        " PARSE_HEADER = TRUE, FIELD_DELIMITER = '|') PATTERN = '2024/a[.]csv'"
    )
    assert rows(session.sql("SELECT id, name FROM named")) == [(1, "x"), (2, "y")]
    write_csv(src / "plain" / "p.csv", ["7,q"])
    session.sql(
        f"CREATE EXTERNAL TABLE plain FROM FILES '{src / 'plain'}' FILE_FORMAT = (TYPE = CSV)"
    )
    assert rows(session.sql("SELECT c1, c2 FROM plain")) == [(7, "q")]


def test_json_lines_stream_sees_each_files_rows_once_and_the_scheduler_follows(
    session, tmp_path, clock
):
    src = tmp_path / "json"
    write_json(src / "a.json", [{"id": 1, "name": "a"}])
    session.sql(
        f"CREATE EXTERNAL TABLE t FROM FILES '{src}' FILE_FORMAT = (TYPE = JSON)"
        " FOLLOW_LAG = '1 second'"
    )
    session.sql("CREATE STREAM s ON EXTERNAL TABLE t INSERT_ONLY = TRUE")
    session.sql("CREATE TABLE sink (id BIGINT, name STRING)")
    added = [src / "b.json"]
    write_json(added[0], [{"id": 2, "name": "b"}, {"id": 3, "name": "c"}])
    session.sql("ALTER EXTERNAL TABLE t REFRESH")
    assert rows(session.sql("SELECT id, name FROM s")) == oracle(added, pajson.read_json)
    session.sql("INSERT INTO sink SELECT id, name FROM s")

    added.append(src / "c.json")
    write_json(added[-1], [{"id": 4, "name": "d"}])
    clock.advance(seconds=2)
    _scheduler(session).step()  # the scheduler refreshes FILES tables too
    session.sql("ALTER EXTERNAL TABLE t REFRESH")  # nothing new
    assert rows(session.sql("SELECT id, name FROM s")) == [(4, "d")]
    session.sql("INSERT INTO sink SELECT id, name FROM s")
    assert rows(session.sql("SELECT * FROM sink")) == oracle(added, pajson.read_json)
    assert rows(session.sql("SELECT id, name FROM t")) == oracle(
        [src / "a.json", *added], pajson.read_json
    )


def test_changed_and_vanished_files_are_reported_and_not_read_again(session, tmp_path):
    src = tmp_path / "src"
    for name, ids in (("a", [1]), ("b", [2]), ("c", [3])):
        parquet(src / f"{name}.parquet", ids)
    session.sql(f"CREATE EXTERNAL TABLE t FROM FILES '{src}' FILE_FORMAT = (TYPE = PARQUET)")
    before = rows(session.sql("SELECT id, name FROM t"))
    parquet(src / "a.parquet", [1], names=["m1"])  # same size: only its time says it changed
    stat = os.stat(src / "a.parquet")
    os.utime(src / "a.parquet", ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    parquet(src / "b.parquet", [2, 20])  # grown
    (src / "c.parquet").unlink()
    parquet(src / "d.parquet", [4])
    session.sql("ALTER EXTERNAL TABLE t REFRESH")
    assert rows(session.sql("SELECT id, name FROM t")) == sorted([*before, (4, "n4")])
    error = shown(session, "t")["error"]
    assert "changed: a.parquet, b.parquet; vanished: c.parquet" in error
    assert "d.parquet" not in error and shown(session, "t")["state"] == "ACTIVE"
    assert dict(session.sql("DESCRIBE EXTERNAL TABLE t").collect())["error"] == error
    made = version(session, "t")
    session.sql("ALTER EXTERNAL TABLE t REFRESH")  # still reported, still not read
    assert version(session, "t") == made and shown(session, "t")["error"] == error


def test_a_bad_file_fails_the_refresh_and_commits_nothing(session, tmp_path):
    src = tmp_path / "csv"
    write_csv(src / "a.csv", ["1,x"])
    session.sql(
        f"CREATE EXTERNAL TABLE t (id INT, name STRING) FROM FILES '{src}'"
        " FILE_FORMAT = (TYPE = CSV)"
    )
    table_id, before = session.catalog.table("t").table_id, version(session, "t")
    data = sorted(os.listdir(tmp_path / "wh" / "data"))
    write_csv(src / "b.csv", ["2,y"])
    write_csv(src / "bad.csv", ["3,z", "not a number,w"])
    with pytest.raises(SourceError, match=r"File bad\.csv .*nothing was committed"):
        session.sql("ALTER EXTERNAL TABLE t REFRESH")
    assert version(session, "t") == before
    assert [f.path for f in session.catalog.external_files(table_id)] == ["a.csv"]
    assert sorted(os.listdir(tmp_path / "wh" / "data")) == data  # no file left behind
    (src / "bad.csv").unlink()
    session.sql("ALTER EXTERNAL TABLE t REFRESH")
    assert rows(session.sql("SELECT id, name FROM t")) == [(1, "x"), (2, "y")]

    pq_src = tmp_path / "pq"
    parquet(pq_src / "a.parquet", [1])
    session.sql(f"CREATE EXTERNAL TABLE p FROM FILES '{pq_src}' FILE_FORMAT = (TYPE = PARQUET)")
    pq.write_table(pa.table({"id": [2]}), pq_src / "b.parquet")
    with pytest.raises(SourceError, match=r"File b\.parquet .*no column\(s\) amount, name"):
        session.sql("ALTER EXTERNAL TABLE p REFRESH")


def test_two_refreshes_cannot_both_register_a_file(session, tmp_path, clock, monkeypatch):
    src = tmp_path / "src"
    parquet(src / "a.parquet", [1])
    session.sql(f"CREATE EXTERNAL TABLE t FROM FILES '{src}' FILE_FORMAT = (TYPE = PARQUET)")
    parquet(src / "b.parquet", [2])
    args = (Env.of(session.catalog, clock, session.spark, session.warehouse),)
    write_data = files.write_data

    def racing(*a, **k):  # another refresh commits while this one copies b.parquet
        monkeypatch.setattr(files, "write_data", write_data)
        assert files.refresh(*args, session.catalog.find_external_table("t")).inserted == 1
        return write_data(*a, **k)

    monkeypatch.setattr(files, "write_data", racing)
    with pytest.raises(ConflictError, match="another follow"):
        files.refresh(*args, session.catalog.find_external_table("t"))
    assert rows(session.sql("SELECT id FROM t")) == [(1,), (2,)]


def test_writes_are_refused_bad_definitions_explained_and_drop_keeps_the_files(session, tmp_path):
    src = tmp_path / "src"
    parquet(src / "a.parquet", [1])
    session.sql(f"CREATE EXTERNAL TABLE t FROM FILES '{src}' FILE_FORMAT = (TYPE = PARQUET)")
    for statement in ("INSERT INTO t VALUES (1, 1.0, 'x')", "DELETE FROM t", "DROP TABLE t"):
        with pytest.raises(ExternalTableError, match="external table"):
            session.sql(statement)
    empty = tmp_path / "empty"
    with pytest.raises(SourceError, match="give the table a column list"):
        session.sql(f"CREATE EXTERNAL TABLE e FROM FILES '{empty}' FILE_FORMAT = (TYPE = JSON)")
    with pytest.raises(InvalidStatementError, match="supported options are: SKIP_HEADER"):
        session.sql(
            f"CREATE EXTERNAL TABLE e (a INT) FROM FILES '{empty}'"
            " FILE_FORMAT = (TYPE = CSV, SKIP_BLANK_LINES = TRUE)"
        )
    session.sql(f"CREATE EXTERNAL TABLE e (a INT) FROM FILES '{empty}' FILE_FORMAT = (TYPE = CSV)")
    assert rows(session.sql("SELECT * FROM e")) == []
    session.sql("DROP EXTERNAL TABLE t")
    assert session.catalog.find_table("t") is None and (src / "a.parquet").exists()
