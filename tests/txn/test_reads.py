"""StatementReads: what it keeps and reads ahead answers as the catalog does, in fewer queries."""

from __future__ import annotations

import pytest

from changelake.catalog import Catalog
from changelake.catalog.model import DataFile, NewDeletes
from changelake.catalog.requests import (
    AddDeletes,
    AddFiles,
    CommitRequest,
    CreateTable,
    CreateView,
    IfExists,
)
from changelake.clock import ManualClock
from changelake.schema import Column, TableSchema
from changelake.txn.context import StatementContext
from changelake.txn.reads import StatementReads

T0 = 1_700_000_000.0
SCHEMA = TableSchema((Column(1, "id", "int", False),))


@pytest.fixture
def catalog(catalog_url):
    c = Catalog(catalog_url)
    yield c
    c.close()


def _file(path: str) -> DataFile:
    return DataFile(path, row_count=10, size_bytes=100, base_row_id=None, begin_version=None)


def _history(catalog: Catalog, name: str) -> int:
    """A table with versions 1 (two files), 2 (a DV on one) and 3 (a third file)."""
    clock = ManualClock(T0)
    create = CreateTable(name, SCHEMA, (), (), IfExists.ERROR)
    info = catalog.commit([CommitRequest(name, "CREATE", (create,))], clock=clock).tables[name]
    t = info.table_id
    for step, update in enumerate(
        (
            AddFiles(t, (_file(f"{name}/a"), _file(f"{name}/b"))),
            AddDeletes(t, (NewDeletes(f"{name}/a", f"{name}/dv", 3),)),
            AddFiles(t, (_file(f"{name}/c"),)),
        )
    ):
        clock.advance(seconds=1)
        catalog.commit([CommitRequest(f"{name}{step}", "WRITE", (update,))], clock=clock)
    return t


def test_files_read_ahead_for_several_tables_come_from_one_query(catalog):
    ids = [_history(catalog, "one"), _history(catalog, "two")]
    reads = StatementReads(catalog)
    asked = []
    file_histories = catalog.file_histories

    def counted(ranges):
        asked.append(dict(ranges))
        return file_histories(ranges)

    catalog.file_histories = counted  # type: ignore[method-assign]
    reads.read_ahead({t: (1, 3) for t in ids})
    for t in ids:
        for v in (1, 2, 3):
            assert reads.snapshot_files(t, v) == catalog.snapshot_files(t, v)
        for s, e in ((1, 3), (1, 2), (2, 3), (3, 3)):
            between = {"start_exclusive": s, "end_inclusive": e}
            got = reads.files_changed_between(t, **between)
            assert got == catalog.files_changed_between(t, **between)
    assert asked == [{t: (1, 3) for t in ids}]
    # outside the range announced: the catalog's own answer
    assert reads.snapshot_files(ids[0], 0) == catalog.snapshot_files(ids[0], 0) == []
    assert len(asked) == 1


def test_batched_version_and_schema_reads_are_kept(catalog):
    t = _history(catalog, "one")
    reads = StatementReads(catalog)
    found = reads.version_infos([(t, 2), (t, 3), (t, 9)])
    assert found == {(t, 2): catalog.version_info(t, 2), (t, 3): catalog.version_info(t, 3)}
    assert reads.schemas_at({t: 3}) == {t: SCHEMA}
    catalog.version_info = catalog.schema_at = None  # type: ignore[assignment,method-assign]
    assert reads.version_info(t, 2) == found[(t, 2)]  # kept: not asked again
    assert reads.schema_at(t, 3) == SCHEMA


def test_what_follows_from_definitions_is_kept_by_token_across_statements(catalog_url):
    mine, theirs = Catalog(catalog_url), Catalog(catalog_url)  # two sessions' catalogs
    try:
        clock = ManualClock(T0)
        view = CreateView("v", "SELECT id FROM t", ())
        mine.commit([CommitRequest("v", "CREATE VIEW", (view,))], clock=clock)
        before = StatementContext(mine, clock)
        assert before.catalog.view_sql("v") == "SELECT id FROM t"
        assert before.catalog.find_table("v") is None

        asked: list[str] = []
        for method in ("view_sql", "find_table"):
            read = getattr(mine, method)
            setattr(mine, method, lambda name, read=read: asked.append(name) or read(name))
        again = StatementContext(mine, clock)
        assert again.catalog.view_sql("v") == "SELECT id FROM t"
        assert again.catalog.find_table("v") is None
        assert asked == []  # kept under the token both statements read

        clock.advance(seconds=1)
        redefined = CreateView("v", "SELECT 2 AS id FROM t", (), IfExists.REPLACE)
        theirs.commit([CommitRequest("v2", "CREATE VIEW", (redefined,))], clock=clock)
        assert before.catalog.view_sql("v") == "SELECT id FROM t"  # its snapshot's definitions
        after = StatementContext(mine, clock)
        assert after.catalog.view_sql("v") == "SELECT 2 AS id FROM t"
        assert asked == ["v"]

        # a statement that changes definitions itself reads what it binds next as it is now
        assert after.catalog.find_table("w") is None
        create = CreateTable("w", SCHEMA, (), (), IfExists.ERROR)
        after.commit(CommitRequest("w", "CREATE TABLE", (create,)))
        assert after.catalog.find_table("w") is not None
    finally:
        mine.close()
        theirs.close()
