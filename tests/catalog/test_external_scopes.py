"""The scopes an external table has had, by version: what a time-travel read is checked
against. A scope is set with or without new rows (a new version); a version has the last scope
set while it was current. A catalog from before the record knows only the current scope."""

from __future__ import annotations

import sqlalchemy as sa
from catalog.test_catalog import SCHEMA, create, data_file

from changelake.catalog import Catalog
from changelake.catalog.alters import AlterExternalTable
from changelake.catalog.model import ExternalDefinition
from changelake.catalog.requests import (
    AddFiles,
    CommitRequest,
    CreateTable,
    DefineExternalTable,
)
from changelake.catalog.tables import SCHEMA_VERSION
from changelake.clock import ManualClock

DEFINITION = ExternalDefinition(
    kind="POSTGRES",
    connection=None,
    source="public.orders",
    spec={"columns": [["id", "int"], ["name", "string"]]},
    scope_mode="DEPENDENTS",
    follow_lag=60.0,
)


def _commit(catalog: Catalog, sid: str, *updates) -> None:
    catalog.commit([CommitRequest(sid, "RESCOPE", tuple(updates))], clock=ManualClock(1e9))


def _history(catalog: Catalog) -> int:
    """orders: FALSE at version 0; 'id = 1' with rows (v1); 'id < 3' without (still v1);
    rows (v2); 'id < 5' with rows (v3). Its table id."""
    table = CreateTable("orders", SCHEMA)
    define = DefineExternalTable("orders", DEFINITION, "FALSE", None)
    catalog.commit([CommitRequest("c", "CREATE", (table, define))], clock=ManualClock(1e9))
    tid = catalog.table("orders").table_id
    _commit(catalog, "r1", AddFiles(tid, (data_file("a"),)), _scope(tid, "id = 1"))
    _commit(catalog, "r2", _scope(tid, "id < 3"))
    _commit(catalog, "f", AddFiles(tid, (data_file("b"),)))
    _commit(catalog, "r3", AddFiles(tid, (data_file("c"),)), _scope(tid, "id < 5"))
    return tid


def _scope(table_id: int, scope: str) -> AlterExternalTable:
    return AlterExternalTable(table_id, scope=scope)


def _scopes(catalog: Catalog, table_id: int) -> list[str | None]:
    found = [catalog.external_scope_of_version(table_id, v) for v in range(4)]
    return [None if r is None else r.scope for r in found]


def test_a_version_has_the_last_scope_set_while_it_was_current(catalog_url):
    catalog = Catalog(catalog_url)
    try:
        create(catalog, "other")  # another table's commits number in between
        tid = _history(catalog)
        assert catalog.table("orders").current_version == 3
        assert _scopes(catalog, tid) == ["FALSE", "id < 3", "id < 3", "id < 5"]
        assert catalog.find_external_table("orders").scope == "id < 5"
    finally:
        catalog.close()


def test_a_catalog_from_before_the_record_knows_the_current_scope(catalog_url):
    first = Catalog(catalog_url)
    tid = _history(first)
    with first.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE cl_external_scopes"))
        conn.execute(sa.text("UPDATE cl_meta SET value = '8' WHERE key = 'schema_version'"))
    first.close()
    second = Catalog(catalog_url)
    try:
        with second.engine.begin() as conn:
            version = conn.execute(sa.text("SELECT value FROM cl_meta")).scalar()
        assert version == str(SCHEMA_VERSION)
        assert _scopes(second, tid) == [None, None, None, "id < 5"]
    finally:
        second.close()
