"""One catalog suite, run against SQLite and a real PostgreSQL server (the ``catalog_url`` fixture).

Drives ``changelake.catalog.Catalog`` directly: no Spark, except the last test which connects a
whole session to the catalog URL.
"""

from __future__ import annotations

import pytest
from conftest import rows

import changelake
from changelake.catalog import Catalog
from changelake.catalog.model import DataFile, NewDeletes, StatementCommits, TableInfo
from changelake.catalog.requests import (
    AddDeletes,
    AddFiles,
    CommitRequest,
    CreateTable,
    CreateView,
    DropTable,
    DropView,
    FilesUntouched,
    IfExists,
    RemoveFiles,
    RenameTable,
    ReserveRowIds,
    RowCounts,
    SetProperties,
    SetSchema,
    TableLive,
)
from changelake.clock import ManualClock
from changelake.errors import (
    ConflictError,
    DependencyError,
    ObjectExistsError,
    TableNotFoundError,
)
from changelake.schema import Column, TableSchema

T0 = 1_700_000_000.0
SCHEMA = TableSchema((Column(1, "id", "int", False), Column(2, "name", "string")))


@pytest.fixture
def catalog(catalog_url):
    c = Catalog(catalog_url)
    yield c
    c.close()


def create(
    catalog: Catalog,
    name: str = "people",
    *,
    now: float = T0,
    replace: bool = False,
    if_not_exists: bool = False,
    added: tuple[DataFile, ...] = (),
    operation: str = "CREATE TABLE",
    properties: dict[str, str] | None = None,
) -> TableInfo:
    """CREATE TABLE as a commit request; the table as created (or kept)."""
    if_exists = IfExists.REPLACE if replace else IfExists.KEEP if if_not_exists else IfExists.ERROR
    props = {"data_retention_time_in_days": "1"} if properties is None else properties
    update = CreateTable(name, SCHEMA, tuple(props.items()), tuple(added), if_exists)
    result = catalog.commit(
        [CommitRequest(f"create-{name}", operation, (update,))], clock=ManualClock(now)
    )
    return result.tables[name.lower()]


def data_file(path: str, rows: int = 10, base_row_id: int | None = None) -> DataFile:
    return DataFile(
        path=path,
        row_count=rows,
        size_bytes=100,
        base_row_id=base_row_id,
        begin_version=None,
        stats={"c1": {"min": 1, "max": rows, "nulls": 0, "bounded": True}},
    )


def commit(
    info: TableInfo,
    read_version: int,
    sid: str,
    *,
    operation: str = "INSERT",
    added: tuple[DataFile, ...] = (),
    removed_paths: tuple[str, ...] = (),
    deletes: tuple[NewDeletes, ...] = (),
    rows_inserted: int = 0,
    rows_updated: int = 0,
    rows_deleted: int = 0,
) -> CommitRequest:
    """What a DML statement that read ``read_version`` of ``info`` commits."""
    tid = info.table_id
    updates = (
        ((AddFiles(tid, added),) if added else ())
        + ((RemoveFiles(tid, removed_paths),) if removed_paths else ())
        + ((AddDeletes(tid, deletes),) if deletes else ())
    )
    touched = removed_paths + tuple(d.file_path for d in deletes)
    return CommitRequest(
        sid,
        operation,
        updates,
        (TableLive(tid, info.name), FilesUntouched(tid, info.name, touched, read_version)),
        (RowCounts(tid, rows_inserted, rows_updated, rows_deleted),),
    )


def apply(catalog: Catalog, requests: list[CommitRequest], *, now: float) -> dict[int, list[int]]:
    """Commit ``requests``; the versions made per table id."""
    return catalog.commit(requests, clock=ManualClock(now)).versions


def one(catalog: Catalog, sid: str, *updates, now: float = T0):
    return catalog.commit([CommitRequest(sid, sid.upper(), tuple(updates))], clock=ManualClock(now))


def drop_table(catalog: Catalog, name: str, *, now: float, if_exists: bool = False):
    info = catalog.find_table(name)
    if info is None:
        if if_exists:
            return None
        raise TableNotFoundError(f"Table {name!r} does not exist.")
    one(catalog, "drop table", DropTable(info.table_id), now=now)
    return info


def create_view(catalog: Catalog, name: str, sql: str, *, depends_on, now: float, replace: bool):
    if_exists = IfExists.REPLACE if replace else IfExists.ERROR
    one(catalog, "create view", CreateView(name, sql, tuple(depends_on), if_exists), now=now)


def drop_view(catalog: Catalog, name: str, *, now: float, if_exists: bool) -> bool:
    if if_exists and catalog.view_sql(name) is None:
        return False
    one(catalog, "drop view", DropView(name), now=now)
    return True


def rename_table(catalog: Catalog, name: str, new_name: str) -> None:
    one(catalog, "rename table", RenameTable(catalog.table(name).table_id, new_name))


def set_properties(catalog: Catalog, table_id: int, updates: dict[str, str]) -> TableInfo:
    one(catalog, "set properties", SetProperties(table_id, tuple(updates.items())))
    return catalog.table_by_id(table_id)


def alter_schema(catalog: Catalog, table_id, schema, *, operation, statement_id, now) -> int:
    result = catalog.commit(
        [CommitRequest(statement_id, operation, (SetSchema(table_id, schema),))],
        clock=ManualClock(now),
    )
    return result.versions[table_id][-1]


def allocate_row_ids(catalog: Catalog, table_id: int, count: int) -> int:
    return one(catalog, "reserve", ReserveRowIds(table_id, count)).row_id_bases[table_id]


# -- tables ---------------------------------------------------------------------------------------


def test_create_find_list_drop(catalog):
    people = create(catalog)
    items = create(catalog, "Items")
    assert (people.name, people.current_version, people.created_at) == ("people", 0, T0)
    assert items.name == "items"  # names are case-insensitive, stored lower case
    assert catalog.find_table("PEOPLE") == people
    assert catalog.table("items").table_id == items.table_id
    assert catalog.table_by_id(people.table_id) == people
    assert [t.name for t in catalog.list_tables()] == ["items", "people"]
    assert catalog.versions(people.table_id)[0].operation == "CREATE TABLE"

    dropped = drop_table(catalog, "people", now=T0 + 1)
    assert dropped.table_id == people.table_id
    assert catalog.find_table("people") is None
    assert [t.name for t in catalog.list_tables()] == ["items"]
    assert drop_table(catalog, "people", now=T0 + 2, if_exists=True) is None
    with pytest.raises(TableNotFoundError):
        drop_table(catalog, "people", now=T0 + 2)

    again = create(catalog, now=T0 + 3)  # the name is free again, for a new table
    assert again.table_id != people.table_id and again.current_version == 0


def test_unknown_table_suggests_closest_name(catalog):
    create(catalog)
    with pytest.raises(TableNotFoundError, match="Did you mean people") as caught:
        catalog.table("peple")
    assert isinstance(caught.value, KeyError)  # callers may catch the builtin too
    assert "Did you mean" not in str(pytest.raises(TableNotFoundError, catalog.table, "zzz").value)


def test_name_clashes(catalog):
    first = create(catalog)
    with pytest.raises(ObjectExistsError, match="people.*already exists"):
        create(catalog)
    assert create(catalog, if_not_exists=True) == first
    create_view(catalog, "v", "SELECT 1", depends_on=[], now=T0, replace=False)
    with pytest.raises(ObjectExistsError, match="View 'v' already exists"):
        create(catalog, "v")
    with pytest.raises(ObjectExistsError, match="Table 'people' already exists"):
        create_view(catalog, "people", "SELECT 1", depends_on=[], now=T0, replace=False)
    with pytest.raises(ObjectExistsError):
        rename_table(catalog, "people", "v")

    replaced = create(catalog, replace=True, now=T0 + 5)
    assert replaced.table_id != first.table_id and replaced.created_at == T0 + 5
    assert [t.table_id for t in catalog.list_tables()] == [replaced.table_id]


def test_rename_and_properties(catalog):
    info = create(catalog)
    rename_table(catalog, "people", "persons")
    assert catalog.find_table("people") is None
    assert catalog.table("persons").table_id == info.table_id
    updated = set_properties(catalog, info.table_id, {"data_retention_time_in_days": "7"})
    assert updated.retention_days() == 7.0
    assert catalog.table("persons").properties["data_retention_time_in_days"] == "7"


def test_schema_versions(catalog):
    info = create(catalog)
    wider = TableSchema(SCHEMA.columns + (Column(3, "age", "bigint"),))
    v1 = alter_schema(
        catalog, info.table_id, wider, operation="ADD COLUMN", statement_id="s1", now=T0 + 1
    )
    renamed = TableSchema(
        (SCHEMA.columns[0], Column(2, "full_name", "string"), Column(3, "age", "bigint"))
    )
    v2 = alter_schema(
        catalog, info.table_id, renamed, operation="RENAME COLUMN", statement_id="s2", now=T0 + 2
    )
    assert (v1, v2) == (1, 2)
    assert catalog.schema_at(info.table_id, 0) == SCHEMA
    assert catalog.schema_at(info.table_id, 1) == wider
    assert catalog.schema_at(info.table_id, 2) == renamed
    assert catalog.schema_at(info.table_id, 2).columns[0].nullable is False
    assert catalog.table("people").current_version == 2
    assert [v.operation for v in catalog.versions(info.table_id)] == [
        "CREATE TABLE",
        "ADD COLUMN",
        "RENAME COLUMN",
    ]


# -- commits --------------------------------------------------------------------------------------


def test_commit_files_deletes_and_removals(catalog):
    info = create(catalog)
    tid = info.table_id
    made = apply(
        catalog,
        [
            commit(
                info,
                0,
                "ins",
                added=(data_file("data/a.parquet"), data_file("data/b.parquet", 5)),
                rows_inserted=15,
            )
        ],
        now=T0 + 1,
    )
    assert made == {tid: [1]}
    files = catalog.snapshot_files(tid, 1)
    assert [(f.file.path, f.file.base_row_id, f.file.begin_version) for f in files] == [
        ("data/a.parquet", 0, 1),
        ("data/b.parquet", 10, 1),
    ]
    assert files[0].file.stats == {"c1": {"min": 1, "max": 10, "nulls": 0, "bounded": True}}

    delete = NewDeletes(file_path="data/a.parquet", dv_path="dv/d1.parquet", row_count=3)
    catalog.commit(
        [commit(info, 1, "del", operation="DELETE", deletes=(delete,), rows_deleted=3)],
        clock=ManualClock(T0 + 2),
    )
    delete2 = NewDeletes(file_path="data/a.parquet", dv_path="dv/d2.parquet", row_count=2)
    catalog.commit(
        [
            commit(
                info,
                2,
                "upd",
                operation="UPDATE",
                deletes=(delete2,),
                added=(data_file("data/c.parquet", 2, base_row_id=3),),
                rows_updated=2,
            )
        ],
        clock=ManualClock(T0 + 3),
    )
    catalog.commit(
        [commit(info, 3, "rm", operation="DELETE", removed_paths=("data/b.parquet",))],
        clock=ManualClock(T0 + 4),
    )

    def live(version):
        return {
            f.file.path: (f.dv_paths, f.live_rows) for f in catalog.snapshot_files(tid, version)
        }

    assert live(1) == {"data/a.parquet": ((), 10), "data/b.parquet": ((), 5)}
    assert live(2) == {"data/a.parquet": (("dv/d1.parquet",), 7), "data/b.parquet": ((), 5)}
    assert live(3) == {
        "data/a.parquet": (("dv/d1.parquet", "dv/d2.parquet"), 5),
        "data/b.parquet": ((), 5),
        "data/c.parquet": ((), 2),
    }
    assert live(4) == {
        "data/a.parquet": (("dv/d1.parquet", "dv/d2.parquet"), 5),
        "data/c.parquet": ((), 2),
    }
    # a materialized base row id is kept; the counter only moves for fresh files
    assert {f.file.path: f.file.base_row_id for f in catalog.snapshot_files(tid, 4)} == {
        "data/a.parquet": 0,
        "data/c.parquet": 3,
    }
    history = catalog.versions(tid)
    assert [
        (
            v.version,
            v.operation,
            v.statement_id,
            v.rows_inserted,
            v.rows_updated,
            v.rows_deleted,
            v.files_added,
            v.files_removed,
        )
        for v in history
    ] == [
        (0, "CREATE TABLE", "create-people", 0, 0, 0, 0, 0),
        (1, "INSERT", "ins", 15, 0, 0, 2, 0),
        (2, "DELETE", "del", 0, 0, 3, 0, 0),
        (3, "UPDATE", "upd", 0, 2, 0, 1, 0),
        (4, "DELETE", "rm", 0, 0, 0, 0, 1),
    ]
    assert catalog.table("people").current_version == 4
    assert [v.version for v in catalog.versions(tid, after_exclusive=1, upto_inclusive=3)] == [2, 3]


def test_create_table_as_select_files(catalog):
    info = create(
        catalog,
        "ctas",
        properties={},
        now=T0,
        added=(data_file("data/x.parquet", 4),),
        operation="CREATE TABLE AS SELECT",
    )
    (only,) = catalog.snapshot_files(info.table_id, 0)
    assert (only.file.path, only.file.base_row_id, only.live_rows) == ("data/x.parquet", 0, 4)
    assert catalog.versions(info.table_id)[0].rows_inserted == 4
    assert allocate_row_ids(catalog, info.table_id, 1) == 4


def test_versions_by_time_and_statement(catalog):
    info = create(catalog)
    for i in (1, 2, 3):
        catalog.commit(
            [commit(info, i - 1, f"s{i}", added=(data_file(f"data/{i}.parquet"),))],
            clock=ManualClock(T0 + 10 * i),
        )
    tid = info.table_id
    assert catalog.version_as_of(tid, T0 + 20, inclusive=True) == 2
    assert catalog.version_as_of(tid, T0 + 20, inclusive=False) == 1
    assert catalog.version_as_of(tid, T0 + 25, inclusive=False) == 2
    assert catalog.version_as_of(tid, T0 - 1, inclusive=True) is None
    assert catalog.version_as_of(tid, T0 + 1e6, inclusive=True) == 3
    assert catalog.statement_commit("s2") == StatementCommits({tid: 2}, {tid: 2}, 3, 3)  # 1: CREATE
    assert catalog.statement_commit("nope") is None
    assert catalog.version_info(tid, 3).committed_at == T0 + 30
    assert catalog.version_info(tid, 4) is None


def test_commit_times_never_go_backwards(catalog):
    info = create(catalog, now=T0 + 100)
    catalog.commit(
        [commit(info, 0, "late", added=(data_file("data/1.parquet"),))], clock=ManualClock(T0)
    )
    assert catalog.version_info(info.table_id, 1).committed_at >= T0 + 100


def test_statement_over_two_tables_commits_atomically(catalog):
    a, b = create(catalog, "a"), create(catalog, "b")
    made = apply(
        catalog,
        [
            commit(a, 0, "multi", added=(data_file("data/a1.parquet"),)),
            commit(b, 0, "multi", added=(data_file("data/b1.parquet"),)),
        ],
        now=T0 + 1,
    )
    assert made == {a.table_id: [1], b.table_id: [1]}
    found = catalog.statement_commit("multi")
    assert found.last_versions == found.first_versions == {a.table_id: 1, b.table_id: 1}


def test_a_statement_of_several_commits_spans_them(catalog):
    # ALTER DYNAMIC TABLE ... REFRESH commits each refresh of a cascade as the same statement
    a, b = create(catalog, "a"), create(catalog, "b")
    catalog.commit(
        [commit(a, 0, "refresh", added=(data_file("a1.parquet"),))], clock=ManualClock(T0)
    )
    catalog.commit([commit(b, 0, "other", added=(data_file("b1.parquet"),))], clock=ManualClock(T0))
    a = catalog.table("a")
    catalog.commit(
        [commit(a, 1, "refresh", added=(data_file("a2.parquet"),))], clock=ManualClock(T0)
    )
    found = catalog.statement_commit("refresh")
    assert (found.first_versions, found.last_versions) == ({a.table_id: 1}, {a.table_id: 2})
    assert (found.first_commit, found.last_commit) == (3, 5)  # 1, 2: the CREATEs


# -- optimistic concurrency -----------------------------------------------------------------------


def test_conflicting_writers_one_wins(catalog):
    info = create(catalog)
    catalog.commit(
        [commit(info, 0, "ins", added=(data_file("data/a.parquet"),))], clock=ManualClock(T0 + 1)
    )
    first = commit(
        info,
        1,
        "w1",
        operation="DELETE",
        deletes=(NewDeletes("data/a.parquet", "dv/w1.parquet", 1),),
    )
    second = commit(
        info,
        1,
        "w2",
        operation="UPDATE",
        removed_paths=("data/a.parquet",),
        added=(data_file("data/w2.parquet", 10, base_row_id=0),),
    )
    assert apply(catalog, [first], now=T0 + 2) == {info.table_id: [2]}
    with pytest.raises(ConflictError) as caught:
        catalog.commit([second], clock=ManualClock(T0 + 3))
    message = str(caught.value)
    assert "people" in message and "version 2" in message and "read version 1" in message
    # the loser changed nothing
    assert catalog.table("people").current_version == 2
    assert [f.file.path for f in catalog.snapshot_files(info.table_id, 2)] == ["data/a.parquet"]
    assert catalog.statement_commit("w2") is None


def test_conflict_on_a_file_removed_concurrently(catalog):
    info = create(catalog)
    catalog.commit(
        [commit(info, 0, "ins", added=(data_file("data/a.parquet"),))], clock=ManualClock(T0 + 1)
    )
    catalog.commit(
        [
            commit(
                info,
                1,
                "opt",
                operation="OPTIMIZE",
                removed_paths=("data/a.parquet",),
                added=(data_file("data/o.parquet", 10, base_row_id=0),),
            )
        ],
        clock=ManualClock(T0 + 2),
    )
    late = commit(
        info,
        1,
        "late",
        operation="DELETE",
        deletes=(NewDeletes("data/a.parquet", "dv/late.parquet", 1),),
    )
    with pytest.raises(ConflictError, match="version 2"):
        catalog.commit([late], clock=ManualClock(T0 + 3))
    assert catalog.table("people").current_version == 2


def test_concurrent_appends_and_disjoint_deletes_both_commit(catalog):
    info = create(catalog)
    catalog.commit(
        [commit(info, 0, "ins", added=(data_file("data/a.parquet"), data_file("data/b.parquet")))],
        clock=ManualClock(T0 + 1),
    )
    results = [
        apply(catalog, [commit(info, 1, "app1", added=(data_file("data/x.parquet"),))], now=T0 + 2),
        apply(catalog, [commit(info, 1, "app2", added=(data_file("data/y.parquet"),))], now=T0 + 3),
        apply(
            catalog,
            [
                commit(
                    info,
                    1,
                    "d1",
                    operation="DELETE",
                    deletes=(NewDeletes("data/a.parquet", "dv/1.parquet", 1),),
                )
            ],
            now=T0 + 4,
        ),
        apply(
            catalog,
            [
                commit(
                    info,
                    1,
                    "d2",
                    operation="DELETE",
                    deletes=(NewDeletes("data/b.parquet", "dv/2.parquet", 1),),
                )
            ],
            now=T0 + 5,
        ),
    ]
    assert results == [{info.table_id: [v]} for v in (2, 3, 4, 5)]
    assert sum(f.live_rows for f in catalog.snapshot_files(info.table_id, 5)) == 38


def test_failed_commit_leaves_every_table_unchanged(catalog):
    a, b = create(catalog, "a"), create(catalog, "b")
    catalog.commit(
        [commit(b, 0, "ins", added=(data_file("data/b.parquet"),))], clock=ManualClock(T0 + 1)
    )
    catalog.commit(
        [
            commit(
                b,
                1,
                "del",
                operation="DELETE",
                deletes=(NewDeletes("data/b.parquet", "dv/1.parquet", 1),),
            )
        ],
        clock=ManualClock(T0 + 2),
    )
    both = [
        commit(a, 0, "txn", added=(data_file("data/a.parquet"),)),
        commit(
            b,
            1,
            "txn",
            operation="DELETE",
            deletes=(NewDeletes("data/b.parquet", "dv/2.parquet", 1),),
        ),
    ]
    with pytest.raises(ConflictError, match="Conflict on table b"):
        catalog.commit(both, clock=ManualClock(T0 + 3))
    assert catalog.table("a").current_version == 0
    assert catalog.snapshot_files(a.table_id, 0) == []
    assert catalog.statement_commit("txn") is None


def test_commit_to_dropped_table_conflicts(catalog):
    info = create(catalog)
    drop_table(catalog, "people", now=T0 + 1)
    with pytest.raises(ConflictError, match="dropped"):
        catalog.commit(
            [commit(info, 0, "ins", added=(data_file("data/a.parquet"),))],
            clock=ManualClock(T0 + 2),
        )


# -- row identity ---------------------------------------------------------------------------------


def test_row_ids_are_allocated_monotonically(catalog):
    info = create(catalog)
    tid = info.table_id
    catalog.commit(
        [commit(info, 0, "i1", added=(data_file("data/1.parquet", 10),))], clock=ManualClock(T0 + 1)
    )
    reserved = allocate_row_ids(catalog, tid, 5)
    catalog.commit(
        [commit(info, 1, "i2", added=(data_file("data/2.parquet", 7),))], clock=ManualClock(T0 + 2)
    )
    reserved2 = allocate_row_ids(catalog, tid, 3)
    catalog.commit(
        [
            commit(
                info,
                2,
                "i3",
                added=(data_file("data/3.parquet", 4), data_file("data/4.parquet", 1)),
            )
        ],
        clock=ManualClock(T0 + 3),
    )
    bases = {f.file.path: f.file.base_row_id for f in catalog.snapshot_files(tid, 3)}
    assert reserved == 10
    assert bases["data/2.parquet"] == 15
    assert reserved2 == 22
    assert (bases["data/3.parquet"], bases["data/4.parquet"]) == (25, 29)
    ranges = sorted(
        [
            (0, 10),
            (reserved, reserved + 5),
            (15, 22),
            (reserved2, reserved2 + 3),
            (25, 29),
            (29, 30),
        ]
    )
    assert all(hi <= lo for (_, hi), (lo, _) in zip(ranges, ranges[1:], strict=False)), (
        "row id ranges overlap"
    )
    # one request that reserves ids and adds files takes both from the same counter
    both = CommitRequest(
        "i4",
        "TEST",
        (
            ReserveRowIds(tid, 6),
            AddFiles(tid, (data_file("data/5.parquet", 2),)),
            ReserveRowIds(tid, 1),
        ),
    )
    result = catalog.commit([both], clock=ManualClock(T0 + 4))
    bases = {f.file.path: f.file.base_row_id for f in catalog.snapshot_files(tid, 4)}
    assert bases["data/5.parquet"] == 36 and result.row_id_bases[tid] == 38
    assert allocate_row_ids(catalog, tid, 1) == 39


# -- views ----------------------------------------------------------------------------------------


def test_views_and_dependencies(catalog):
    create(catalog)
    create(catalog, "items")
    create_view(
        catalog,
        "owners",
        "SELECT * FROM people JOIN items",
        depends_on=["People", "items"],
        now=T0,
        replace=False,
    )
    create_view(
        catalog, "top", "SELECT * FROM owners", depends_on=["owners"], now=T0, replace=False
    )
    assert catalog.view_sql("OWNERS") == "SELECT * FROM people JOIN items"
    assert [(n, s) for n, s, _ in catalog.list_views()] == [
        ("owners", "SELECT * FROM people JOIN items"),
        ("top", "SELECT * FROM owners"),
    ]
    assert sorted(catalog.object_names()) == ["items", "owners", "people", "top"]

    for action in (
        lambda: drop_table(catalog, "people", now=T0 + 1),
        lambda: rename_table(catalog, "items", "things"),
        lambda: create(catalog, "items", replace=True),
    ):
        with pytest.raises(DependencyError, match="owners"):
            action()
    with pytest.raises(DependencyError, match="top"):
        drop_view(catalog, "owners", now=T0 + 1, if_exists=False)
    assert catalog.find_table("people") is not None and catalog.view_sql("owners") is not None

    create_view(catalog, "owners", "SELECT 2", depends_on=[], now=T0 + 2, replace=True)
    assert catalog.view_sql("owners") == "SELECT 2"
    assert drop_table(catalog, "people", now=T0 + 3) is not None  # nothing depends on it now
    assert drop_view(catalog, "top", now=T0 + 4, if_exists=False)
    assert not drop_view(catalog, "top", now=T0 + 4, if_exists=True)
    with pytest.raises(TableNotFoundError, match="Did you mean owners"):
        drop_view(catalog, "ownrs", now=T0 + 4, if_exists=False)


# -- the database itself ---------------------------------------------------------------------------


def test_reopening_sees_the_same_catalog(catalog_url):
    first = Catalog(catalog_url)
    info = create(first)
    first.commit(
        [commit(info, 0, "ins", added=(data_file("data/a.parquet"),))], clock=ManualClock(T0 + 1)
    )
    first.close()
    second = Catalog(catalog_url)  # the schema migration is idempotent
    try:
        assert second.table("people").current_version == 1
        assert [f.file.path for f in second.snapshot_files(info.table_id, 1)] == ["data/a.parquet"]
    finally:
        second.close()


def test_session_on_catalog_url_end_to_end(catalog_url, spark, tmp_path):
    session = changelake.connect(str(tmp_path / "wh"), catalog=catalog_url, spark=spark)
    try:
        assert session.catalog.url == catalog_url
        session.sql("CREATE TABLE people (id INT, name STRING)")
        session.sql("INSERT INTO people VALUES (1, 'Jeff'), (2, 'Donny')")
        session.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
        assert rows(session.sql("SELECT * FROM people")) == [(1, "Jeffrey"), (2, "Donny")]
        assert rows(session.sql("SELECT * FROM people AT (VERSION => 1)")) == [
            (1, "Jeff"),
            (2, "Donny"),
        ]
        assert [r.operation for r in session.sql("DESCRIBE HISTORY people").collect()] == [
            "CREATE TABLE",
            "INSERT",
            "UPDATE",
        ]
    finally:
        session.close()
    # the metadata is in the catalog database, not in the warehouse directory
    assert not (tmp_path / "wh" / "catalog.db").exists()
    reopened = Catalog(catalog_url)
    try:
        assert reopened.table("people").current_version == 2
    finally:
        reopened.close()


# -- the commit path: each update and requirement type ---------------------------------------------


def _state(catalog: Catalog) -> tuple:
    """Everything a failed commit must leave as it was."""
    tables = catalog.list_tables()
    return (
        [(t.name, t.current_version, t.properties) for t in tables],
        {t.table_id: catalog.snapshot_files(t.table_id, t.current_version) for t in tables},
        {t.table_id: catalog.versions(t.table_id) for t in tables},
        catalog.list_streams(),
        catalog.list_views(),
    )


def test_every_update_and_requirement_type_has_a_rule():
    from changelake.catalog import commit as commit_path
    from changelake.catalog.requests import Requirement, Update

    assert set(commit_path._APPLY) == set(Update.__args__)
    assert set(commit_path._CHECKS) == set(Requirement.__args__)


def test_requirements_that_fail_write_nothing(catalog):
    from changelake.catalog.requests import AdvanceStream, CreateStream, FrontierAt
    from changelake.errors import StreamConsumedError

    info = create(catalog)
    tid = info.table_id
    catalog.commit(
        [commit(info, 0, "ins", added=(data_file("data/a.parquet"),))], clock=ManualClock(T0 + 1)
    )
    one(catalog, "create stream", CreateStream("s", tid, ((tid, 1),)), now=T0 + 1)
    stream = catalog.stream("s")
    catalog.commit(
        [
            commit(
                info,
                1,
                "del",
                operation="DELETE",
                deletes=(NewDeletes("data/a.parquet", "dv/1.parquet", 1),),
            )
        ],
        clock=ManualClock(T0 + 2),
    )
    before = _state(catalog)
    # Each request below would also append a file and move the stream: none of it may land.
    appended = AddFiles(tid, (data_file("data/new.parquet"),))
    advanced = AdvanceStream(stream.stream_id, ((tid, 2),))
    failing = {
        "files touched": (
            FilesUntouched(tid, "people", ("data/a.parquet",), 1),
            ConflictError,
            "version 2",
        ),
        "frontier moved": (
            FrontierAt(stream.stream_id, "s", ((tid, 0),), False),
            StreamConsumedError,
            "consumed concurrently",
        ),
        "initial rows consumed": (
            FrontierAt(stream.stream_id, "s", ((tid, 1),), True),
            StreamConsumedError,
            "Stream s",
        ),
    }
    for label, (requirement, error, message) in failing.items():
        request = CommitRequest(label, "TEST", (appended, advanced), (requirement,))
        with pytest.raises(error, match=message):
            catalog.commit([request], clock=ManualClock(T0 + 3))
        assert _state(catalog) == before, label

    # the same updates under requirements that hold commit together
    holding = CommitRequest(
        "ok",
        "TEST",
        (appended, advanced),
        (
            TableLive(tid, "people"),
            FilesUntouched(tid, "people", ("data/a.parquet",), 2),
            FrontierAt(stream.stream_id, "s", ((tid, 1),), False),
        ),
    )
    assert catalog.commit([holding], clock=ManualClock(T0 + 4)).versions == {tid: [3]}
    moved = catalog.stream("s")
    assert moved.frontiers == ((tid, 2),) and moved.initial_consumed
    assert moved.consumed_at == T0 + 4

    drop_table(catalog, "people", now=T0 + 5)
    assert catalog.find_stream("s") is None  # dropping a table drops its streams
    with pytest.raises(ConflictError, match="dropped"):
        catalog.commit(
            [CommitRequest("late", "TEST", (), (TableLive(tid, "people"),))],
            clock=ManualClock(T0 + 6),
        )


def test_several_requests_commit_as_one_transaction(catalog):
    info = create(catalog)
    tid = info.table_id
    catalog.commit(
        [commit(info, 0, "ins", added=(data_file("data/a.parquet"), data_file("data/b.parquet")))],
        clock=ManualClock(T0 + 1),
    )
    # Two statements of one transaction delete from the same file: every requirement holds
    # against the state both read (version 1), checked before either applies.
    first = commit(
        info, 1, "t1", operation="DELETE", deletes=(NewDeletes("data/a.parquet", "dv/1", 2),)
    )
    second = commit(
        info,
        1,
        "t2",
        operation="UPDATE",
        deletes=(NewDeletes("data/a.parquet", "dv/2", 1),),
        added=(data_file("data/c.parquet", 1),),
        rows_updated=1,
    )
    assert apply(catalog, [first, second], now=T0 + 2) == {tid: [2, 3]}
    assert [(v.version, v.statement_id, v.operation) for v in catalog.versions(tid)][2:] == [
        (2, "t1", "DELETE"),
        (3, "t2", "UPDATE"),
    ]
    live = {f.file.path: f.live_rows for f in catalog.snapshot_files(tid, 3)}
    assert live == {"data/a.parquet": 7, "data/b.parquet": 10, "data/c.parquet": 1}
    # a failure in the last request undoes the first
    bad = commit(info, 3, "t4", removed_paths=("data/b.parquet",))
    stale = commit(info, 1, "t5", removed_paths=("data/a.parquet",))
    before = _state(catalog)
    with pytest.raises(ConflictError, match="version 2"):
        catalog.commit([bad, stale], clock=ManualClock(T0 + 3))
    assert _state(catalog) == before


def test_schema_and_files_of_one_request_make_one_version(catalog):
    info = create(catalog)
    wider = TableSchema(SCHEMA.columns + (Column(3, "age", "bigint"),))
    result = one(
        catalog,
        "evolve",
        SetSchema(info.table_id, wider),
        AddFiles(info.table_id, (data_file("data/x.parquet", 3),)),
        now=T0 + 1,
    )
    assert result.versions == {info.table_id: [1]}
    assert catalog.schema_at(info.table_id, 1) == wider
    assert catalog.schema_at(info.table_id, 0) == SCHEMA
    (v1,) = catalog.versions(info.table_id, after_exclusive=0)
    assert (v1.operation, v1.files_added) == ("EVOLVE", 1)


def test_create_view_and_stream_if_exists(catalog):
    from changelake.catalog.requests import CreateStream, DropStream
    from changelake.errors import StreamNotFoundError

    info = create(catalog)
    one(catalog, "v", CreateView("v", "SELECT 1"))
    assert one(catalog, "v", CreateView("v", "SELECT 2", (), IfExists.KEEP)).applied is False
    assert catalog.view_sql("v") == "SELECT 1"
    with pytest.raises(ObjectExistsError, match="View 'v' already exists"):
        one(catalog, "v", CreateView("v", "SELECT 3"))
    one(catalog, "v", CreateView("v", "SELECT 4", (), IfExists.REPLACE))
    assert catalog.view_sql("v") == "SELECT 4"

    one(catalog, "s", CreateStream("s", info.table_id, ((info.table_id, 0),), comment="first"))
    kept = one(
        catalog,
        "s",
        CreateStream(
            "s", info.table_id, ((info.table_id, 0),), comment="x", if_exists=IfExists.KEEP
        ),
    )
    assert kept.applied is False and catalog.stream("s").comment == "first"
    with pytest.raises(ObjectExistsError, match="Stream 's' already exists"):
        one(catalog, "s", CreateStream("s", info.table_id, ((info.table_id, 0),)))
    with pytest.raises(ObjectExistsError, match="View 'v' already exists"):
        one(catalog, "s", CreateStream("v", info.table_id, ((info.table_id, 0),)))
    first_id = catalog.stream("s").stream_id
    one(
        catalog,
        "s",
        CreateStream(
            "s", info.table_id, ((info.table_id, 0),), append_only=True, if_exists=IfExists.REPLACE
        ),
    )
    replaced = catalog.stream("s")
    assert replaced.stream_id != first_id and replaced.append_only
    assert replaced.frontiers == ((info.table_id, 0),) and replaced.frontier_version == 0
    one(catalog, "drop", DropStream("s"))
    assert catalog.stream_names() == []
    with pytest.raises(StreamNotFoundError, match="'s' does not exist"):
        one(catalog, "drop", DropStream("s"))


def test_forget_files_moves_the_vacuum_floor_forward_only(catalog):
    from changelake.catalog.requests import ForgetFiles

    info = create(catalog)
    tid = info.table_id
    catalog.commit(
        [commit(info, 0, "ins", added=(data_file("data/a.parquet"),))], clock=ManualClock(T0 + 1)
    )
    catalog.commit(
        [commit(info, 1, "rm", operation="DELETE", removed_paths=("data/a.parquet",))],
        clock=ManualClock(T0 + 2),
    )
    assert one(catalog, "vacuum", ForgetFiles(tid, ("data/a.parquet",), 2)).versions == {}
    assert catalog.all_file_paths(tid) == []
    assert "data/a.parquet" not in catalog.registered_paths()
    assert catalog.table("people").vacuumed_before_version == 2
    one(catalog, "vacuum", ForgetFiles(tid, (), 1))
    assert catalog.table("people").vacuumed_before_version == 2
    assert catalog.table("people").current_version == 2  # vacuum makes no version


def test_changed_since_reads_the_version_summary(catalog):
    info = create(catalog)
    tid = info.table_id
    assert not catalog.changed_since(tid, 0)
    alter_schema(
        catalog,
        tid,
        TableSchema(SCHEMA.columns + (Column(3, "age", "bigint"),)),
        operation="ADD COLUMN",
        statement_id="s1",
        now=T0 + 1,
    )
    assert not catalog.changed_since(tid, 0)  # a schema change changes no row
    catalog.commit(
        [commit(info, 1, "ins", added=(data_file("data/a.parquet"),))], clock=ManualClock(T0 + 2)
    )
    catalog.commit(
        [
            commit(
                info,
                2,
                "del",
                operation="DELETE",
                deletes=(NewDeletes("data/a.parquet", "dv/1", 1),),
                rows_deleted=1,
            )
        ],
        clock=ManualClock(T0 + 3),
    )
    assert catalog.changed_since(tid, 0) and catalog.changed_since(tid, 2)
    assert not catalog.changed_since(tid, 3)
    assert not catalog.changed_since(tid, 0, upto_inclusive=1)
    assert catalog.changed_since(tid, 0, inserts_only=False, upto_inclusive=2)
    assert not catalog.changed_since(tid, 2, inserts_only=True)  # only a delete after 2


def test_a_schema_1_catalog_is_migrated(catalog_url):
    import sqlalchemy as sa

    from changelake.catalog.requests import CreateStream

    first = Catalog(catalog_url)
    info = create(first)
    one(first, "s", CreateStream("s", info.table_id, ((info.table_id, 0),)))
    stream_id = first.stream("s").stream_id
    with first.engine.begin() as conn:  # back to schema 1: the frontier lived in cl_streams
        conn.execute(sa.text("ALTER TABLE cl_streams DROP COLUMN view_name"))
        conn.execute(sa.text("ALTER TABLE cl_streams DROP COLUMN view_definition"))
        conn.execute(sa.text("ALTER TABLE cl_streams ADD COLUMN frontier_version BIGINT"))
        conn.execute(sa.text("UPDATE cl_streams SET frontier_version = 7"))
        conn.execute(sa.text("DELETE FROM cl_stream_frontiers"))
        conn.execute(sa.text("UPDATE cl_meta SET value = '1' WHERE key = 'schema_version'"))
    first.close()
    second = Catalog(catalog_url)
    try:
        assert second.stream("s").frontiers == ((info.table_id, 7),)
        assert second.stream("s").stream_id == stream_id
        columns = {c["name"] for c in sa.inspect(second.engine).get_columns("cl_streams")}
        assert "frontier_version" not in columns
        assert {"view_name", "view_definition"} <= columns  # schema 3: streams on views
        assert second.stream("s").view is None
    finally:
        second.close()


def test_a_newer_catalog_is_refused(catalog_url):
    import sqlalchemy as sa

    from changelake.errors import CatalogVersionError, ChangelakeError

    first = Catalog(catalog_url)
    with first.engine.begin() as conn:
        conn.execute(sa.text("UPDATE cl_meta SET value = '99' WHERE key = 'schema_version'"))
    first.close()
    with pytest.raises(CatalogVersionError, match="schema version 99.*upgrade changelake") as e:
        Catalog(catalog_url)
    assert isinstance(e.value, ChangelakeError)


def test_two_transactions_consuming_one_stream_cannot_both_commit(catalog):
    """The second consumer waits for the first one's catalog transaction, then sees the moved
    frontier and fails; without the stream's row lock both read the old frontier and both commit."""
    import threading

    from changelake.catalog import commit as commit_path
    from changelake.catalog.db import writing
    from changelake.catalog.requests import AdvanceStream, CreateStream, FrontierAt
    from changelake.errors import StreamConsumedError

    info = create(catalog)
    tid = info.table_id
    catalog.commit(
        [commit(info, 0, "ins", added=(data_file("data/a.parquet"),))], clock=ManualClock(T0 + 1)
    )
    one(catalog, "create stream", CreateStream("s", tid, ((tid, 0),)), now=T0 + 1)
    stream = catalog.stream("s")
    consume = CommitRequest(
        "consume",
        "INSERT",
        (AdvanceStream(stream.stream_id, ((tid, 1),)),),
        (FrontierAt(stream.stream_id, "s", ((tid, 0),), False),),
    )
    postgres = catalog_is_postgres(catalog)
    second: dict[str, object] = {}

    def second_consumer() -> None:
        try:
            second["result"] = catalog.commit([consume], clock=ManualClock(T0 + 3))
        except StreamConsumedError as e:
            second["error"] = e

    with writing(catalog.engine) as conn:
        commit_path.commit(conn, [consume], clock=ManualClock(T0 + 2), postgres=postgres)
        racer = threading.Thread(target=second_consumer)
        racer.start()
        racer.join(timeout=1.0)
        assert racer.is_alive(), "the second consumer must wait for the first transaction"
    racer.join(timeout=30)
    assert not racer.is_alive()
    assert "result" not in second and "consumed concurrently" in str(second["error"])
    assert catalog.stream("s").frontiers == ((tid, 1),)
    assert catalog.stream("s").consumed_at == T0 + 2


def catalog_is_postgres(catalog: Catalog) -> bool:
    return catalog.engine.dialect.name == "postgresql"


def test_batched_reads_answer_as_the_per_table_reads_do(catalog):
    """Oracle: ``file_histories`` over a range, for several tables in one query, answers what
    ``snapshot_files`` and ``files_changed_between`` answer for every version and interval in
    it; ``versions_as_of`` and ``version_infos`` what ``version_as_of`` and ``version_info`` do."""
    infos = [create(catalog, "one"), create(catalog, "two", now=T0 + 0.5)]
    now = T0 + 1
    for info in infos:
        name = info.name
        steps = [
            {"added": (data_file(f"{name}/a"), data_file(f"{name}/b", 5))},
            {"deletes": (NewDeletes(f"{name}/a", f"{name}/dv1", 3),)},
            {
                "deletes": (NewDeletes(f"{name}/a", f"{name}/dv2", 2),),
                "added": (data_file(f"{name}/c", 2),),
            },
            {"removed_paths": (f"{name}/b",)},
            {"deletes": (NewDeletes(f"{name}/c", f"{name}/dv3", 1),)},
            {"removed_paths": (f"{name}/a",), "added": (data_file(f"{name}/d", 4),)},
        ]
        for version, step in enumerate(steps):
            apply(catalog, [commit(info, version, f"{name}-{version}", **step)], now=now)
            now += 1
    ids = [i.table_id for i in infos]
    last = 6
    for since in range(last + 1):
        for until in range(since, last + 1):
            histories = catalog.file_histories({t: (since, until) for t in ids})
            for t in ids:
                history = histories[t]
                for v in range(since, until + 1):
                    assert history.live_at(v) == catalog.snapshot_files(t, v)
                    for e in range(v, until + 1):
                        assert history.changed_between(
                            start_exclusive=v, end_inclusive=e
                        ) == catalog.files_changed_between(t, start_exclusive=v, end_inclusive=e)
    for at in (T0 - 1, T0 + 0.5, T0 + 3, T0 + 3.5, now + 1):
        for inclusive in (True, False):
            found = catalog.versions_as_of(ids, at, inclusive=inclusive)
            each = {t: catalog.version_as_of(t, at, inclusive=inclusive) for t in ids}
            assert found == {t: v for t, v in each.items() if v is not None}
    wanted = [(t, v) for t in ids for v in (0, 3, 6, 7)]
    assert catalog.version_infos(wanted) == {
        (t, v): catalog.version_info(t, v) for t, v in wanted if v < 7
    }
    wider = TableSchema((*SCHEMA.columns, Column(3, "age", "int")))
    alter_schema(catalog, ids[0], wider, operation="ALTER", statement_id="alter", now=now + 2)
    assert catalog.find_tables(["ONE", "two", "nope"]) == {
        "one": catalog.table("one"),
        "two": catalog.table("two"),
    }
    for versions in ({ids[0]: 6, ids[1]: 6}, {ids[0]: 7, ids[1]: 0}, {ids[0]: 0}):
        assert catalog.schemas_at(versions) == {
            t: catalog.schema_at(t, v) for t, v in versions.items()
        }
    assert catalog.schemas_at({ids[0]: 7})[ids[0]] == wider
