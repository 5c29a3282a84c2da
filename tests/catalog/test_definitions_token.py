"""The catalog's definitions token (``Snapshot.definitions``): every commit that changes what a
name resolves to or a table's columns writes a new one, in the same catalog transaction; other
commits keep it. Bound views and queries are kept across statements by it (plan/kept.py)."""

from __future__ import annotations

import sqlalchemy as sa
from catalog.test_catalog import SCHEMA, T0, commit, create, data_file, one

from changelake.catalog import Catalog
from changelake.catalog.requests import (
    CreateView,
    DropTable,
    DropView,
    IfExists,
    RenameTable,
    ReserveRowIds,
    SetProperties,
    SetSchema,
)
from changelake.catalog.tables import SCHEMA_VERSION
from changelake.clock import ManualClock
from changelake.schema import Column, TableSchema


def test_ddl_writes_a_new_token_and_other_commits_keep_it(catalog_url):
    catalog = Catalog(catalog_url)
    try:
        seen = [catalog.snapshot().definitions]

        def changed(result=None) -> bool:
            now = catalog.snapshot().definitions
            if result is not None:
                assert result.commit.definitions == now  # the stamp carries it
            new = now != seen[-1]
            seen.append(now)
            return new

        info = create(catalog, "t")
        assert changed()
        wider = TableSchema((*SCHEMA.columns, Column(3, "age", "int")))
        ddl = [
            ("add column", SetSchema(info.table_id, wider)),
            ("set properties", SetProperties(info.table_id, (("comment", "x"),))),
            ("create view", CreateView("v", "SELECT id FROM t", ("t",))),
            ("replace view", CreateView("v", "SELECT name FROM t", ("t",), IfExists.REPLACE)),
            ("drop view", DropView("v")),
            ("rename", RenameTable(info.table_id, "u")),
        ]
        for sid, update in ddl:
            assert changed(one(catalog, sid, update, now=T0 + len(seen))), sid
        info = catalog.table("u")
        data = commit(info, info.current_version, "insert", added=(data_file("f1.parquet"),))
        assert not changed(catalog.commit([data], clock=ManualClock(T0 + 20)))
        assert not changed(one(catalog, "reserve", ReserveRowIds(info.table_id, 5), now=T0 + 21))
        assert changed(one(catalog, "drop", DropTable(info.table_id), now=T0 + 22))
        assert len(set(seen)) == len(seen) - 2  # each DDL's token is new
    finally:
        catalog.close()


def test_two_catalogs_never_share_a_token(tmp_path):
    first = Catalog(f"sqlite:///{tmp_path}/one.db")
    second = Catalog(f"sqlite:///{tmp_path}/two.db")
    try:
        assert first.snapshot().definitions != second.snapshot().definitions
        assert len(first.snapshot().definitions) == 32
    finally:
        first.close()
        second.close()


def test_a_schema_9_catalog_gets_a_token(catalog_url):
    old = Catalog(catalog_url)
    create(old, "t")
    with old.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE cl_clock DROP COLUMN definitions"))
        conn.execute(sa.text("UPDATE cl_meta SET value = '9' WHERE key = 'schema_version'"))
    old.close()
    catalog = Catalog(catalog_url)
    try:
        with catalog.engine.connect() as conn:
            version = conn.execute(
                sa.text("SELECT value FROM cl_meta WHERE key = 'schema_version'")
            ).scalar()
        assert version == str(SCHEMA_VERSION) == "12"
        before = catalog.snapshot()
        assert len(before.definitions) == 32 and before.commit_number == 1
        create(catalog, "u", now=T0 + 1)
        assert catalog.snapshot().definitions != before.definitions
    finally:
        catalog.close()
