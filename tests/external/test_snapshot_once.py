"""A bootstrap's snapshot is written once, by the JDBC partitions, as the table's own data files:
the final step commits those files as written, with a deletion vector in the same commit for the
rows of keys the transactions after the snapshot touched, and nothing is staged elsewhere or
written twice. Oracles: the source's rows under the scope, the table's CHANGES in every format,
the files."""

from __future__ import annotations

import pytest
from tests.conftest import spark_jobs
from tests.external.conftest import write
from tests.external.test_scope import BIG, EU, held, scoped, source_under  # noqa: F401

from changelake.external.postgresql import scope

pytestmark = pytest.mark.usefixtures("scoped")


def _live_paths(session) -> set[str]:
    info = session.catalog.table("orders")
    return {
        f.file.path for f in session.catalog.snapshot_files(info.table_id, info.current_version)
    }


def _uncommitted(session) -> set[str]:
    """Parquet files under the warehouse's data directory that no version of the table has."""
    import pyarrow.fs as pafs

    wh = session.warehouse
    selector = pafs.FileSelector(wh.fs_path("data"), recursive=True, allow_not_found=True)
    root = wh.fs_path("")
    found = {
        i.path[len(root) :].lstrip("/")
        for i in wh.fs.get_file_info(selector)
        if i.is_file and i.path.endswith(".parquet")
    }
    info = session.catalog.table("orders")
    kept = set()
    for version in range(info.current_version + 1):
        kept |= {f.file.path for f in session.catalog.snapshot_files(info.table_id, version)}
    return found - kept


class Bases(list):
    """The files each bootstrap's snapshot wrote; ``hooks`` run right after they are written
    (the snapshot point is then in the past: the source's writes come after it)."""

    hooks: list


@pytest.fixture
def bases(monkeypatch) -> Bases:
    written = Bases()
    written.hooks = []
    real = scope._write_base

    def recorded(*args, **kwargs):
        files = real(*args, **kwargs)
        written.append(files)
        for hook in written.hooks:
            hook()
        return files

    monkeypatch.setattr(scope, "_write_base", recorded)
    return written


def _changes(session, before: int) -> dict[tuple, bool]:
    found = session.sql(
        "SELECT id, METADATA$ACTION, METADATA$ISUPDATE FROM orders"
        f" CHANGES(INFORMATION => DEFAULT) AT(VERSION => {before}) WHERE {BIG} OR {EU}"
    ).collect()
    assert len(found) == len({(r[0], r[1]) for r in found})  # one event per key and kind
    return {(r[0], r[1]): r[2] for r in found}


def test_a_quiet_source_s_snapshot_files_are_the_table_s(scoped, source, bases):  # noqa: F811
    dsn = source[0]
    scoped.sql(f"CREATE VIEW eu AS SELECT * FROM orders WHERE {EU}")
    before = scoped.catalog.table("orders").current_version
    with spark_jobs(scoped.spark) as jobs:
        scoped.sql(f"CREATE VIEW big AS SELECT * FROM orders WHERE {BIG}")
        # the snapshot's write, and nothing else: the files it wrote are committed as they are
        assert jobs() == 1
    assert held(scoped) == source_under(dsn, f"({EU}) OR ({BIG})")
    (base,) = bases[1:]
    assert base and {f.path for f in base if f.row_count} <= _live_paths(scoped)
    added = _changes(scoped, before)
    assert set(added) == {(r[0], "INSERT") for r in source_under(dsn, f"{BIG} AND NOT {EU}")}
    assert not any(added.values())
    assert not _uncommitted(scoped)  # nothing staged, nothing left


def test_keys_touched_after_the_snapshot_point_get_their_state_at_its_end(
    scoped,  # noqa: F811
    source,
    bases,
):
    dsn = source[0]
    scoped.sql(f"CREATE VIEW eu AS SELECT * FROM orders WHERE {EU}")
    before = scoped.catalog.table("orders").current_version
    # ids 161 (US, 201.25) and 170 (US, 212.50) are in BIG AND NOT EU: in the snapshot's files
    bases.hooks.append(
        lambda: write(
            dsn,
            "UPDATE orders SET note = 'changed' WHERE id = 161",
            "DELETE FROM orders WHERE id = 170",
            "INSERT INTO orders VALUES (5000, 'US', 999, 'new')",
            "UPDATE orders SET amount = 500 WHERE id = 1",  # enters BIG
            "UPDATE orders SET note = 'eu' WHERE id = 3",  # in the old scope
        )
    )
    scoped.sql(f"CREATE VIEW big AS SELECT * FROM orders WHERE {BIG}")
    rescoped = scoped.catalog.table("orders").current_version
    scoped.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert held(scoped) == source_under(dsn, f"({EU}) OR ({BIG})")
    (base,) = bases[1:]
    live = _live_paths(scoped)
    # every file the snapshot wrote is the table's as written, and nothing else was written for
    # it: the superseded rows (161, 170) are deleted by a deletion vector of the same commit
    assert {f.path for f in base if f.row_count} <= live
    info = scoped.catalog.table("orders")
    made = scoped.catalog.files_changed_between(
        info.table_id, start_exclusive=rescoped - 1, end_inclusive=rescoped
    )
    own = [d for f in made if f.file.path in live for d in f.dvs if d[0] == rescoped]
    assert sum(n for _, _, n in own) == 2
    assert not _uncommitted(scoped)
    changes = _changes(scoped, before)
    assert (161, "INSERT") in changes and not changes[(161, "INSERT")]  # new to the table
    assert (161, "DELETE") not in changes
    assert (170, "INSERT") not in changes and (170, "DELETE") not in changes
    assert (5000, "INSERT") in changes and (1, "INSERT") in changes
    assert changes.get((3, "INSERT")) is True and changes.get((3, "DELETE")) is True
    assert [r for r in held(scoped) if r[0] == 161][0][3] == "changed"
    # a row superseded in the version that added it is no change in any format, nor a delete
    for information in ("APPEND_ONLY", "REDO"):
        rows = scoped.sql(
            f"SELECT id, METADATA$ACTION FROM orders CHANGES(INFORMATION => {information})"
            f" AT(VERSION => {before}) WHERE {BIG} OR {EU}"
        ).collect()
        assert {(r[0], r[1]) for r in rows if r[0] in (161, 170)} == {(161, "INSERT")}, information
    counts = scoped.catalog.version_info(info.table_id, rescoped)
    assert counts is not None and counts.rows_deleted == 0  # no row of the table went


def test_a_bootstrap_failing_after_its_snapshot_leaves_no_file(scoped, source, monkeypatch):  # noqa: F811
    dsn = source[0]
    scoped.sql(f"CREATE VIEW eu AS SELECT * FROM orders WHERE {EU}")
    written = []
    real = scope._write_base

    def recorded(*args, **kwargs):
        written.append(real(*args, **kwargs))
        return written[-1]

    def broken(*args, **kwargs):
        raise RuntimeError("the catalog went away")

    monkeypatch.setattr(scope, "_write_base", recorded)
    monkeypatch.setattr(scope, "_fence", broken)
    with pytest.raises(RuntimeError, match="went away"):
        scoped.sql(f"CREATE VIEW big AS SELECT * FROM orders WHERE {BIG}")
    assert written and written[0]  # the snapshot was written, then the final step failed
    assert not _uncommitted(scoped)
    assert held(scoped) == source_under(dsn, EU)
