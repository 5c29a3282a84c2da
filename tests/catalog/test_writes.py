"""A write to one table as a value: its updates and the requirements chosen by what it did, and
the one commit request made of a statement's writes (catalog/writes.py)."""

from __future__ import annotations

import pytest

from changelake.catalog.alters import (
    AlterDynamicTable,
    AlterExternalTable,
    AlterTask,
    FinishTaskRun,
    fields_set,
)
from changelake.catalog.model import DataFile, NewDeletes
from changelake.catalog.requests import (
    AddDeletes,
    AddFiles,
    AdvanceStream,
    ColumnsWritable,
    CreateTable,
    FilesUntouched,
    FrontierAt,
    IfExists,
    RemoveFiles,
    RowCounts,
    SchemaUnchanged,
    SetSchema,
    TableLive,
)
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.schema import Column, TableSchema


def _file(path: str, rows: int = 10) -> DataFile:
    return DataFile(path, rows, 100, None, None)


COLUMNS = (Column(1, "a", "int"),)


def test_an_append_requires_the_table_and_its_columns_and_touches_no_file():
    write = TableWrite(1, "t", 4, WriteKind.APPEND, added=(_file("f1"),), inserted=10)
    assert write.updates() == (AddFiles(1, (_file("f1"),)),)
    assert write.requirements() == (TableLive(1, "t"), SchemaUnchanged(1, "t", 4))


def test_a_change_requires_the_files_it_deletes_from_untouched_since_it_read():
    dv = NewDeletes(file_path="f2", dv_path="dv1", row_count=1)
    write = TableWrite(
        1, "t", 4, WriteKind.CHANGE, added=(_file("f3"),), removed=("f1",), deletes=(dv,)
    )
    assert write.updates() == (
        AddFiles(1, (_file("f3"),)),
        RemoveFiles(1, ("f1",)),
        AddDeletes(1, (dv,)),
    )
    assert write.requirements() == (
        TableLive(1, "t"),
        SchemaUnchanged(1, "t", 4),
        FilesUntouched(1, "t", ("f1", "f2"), 4),
    )


def test_a_channel_requires_its_columns_not_a_version():
    write = TableWrite(1, "t", None, WriteKind.CHANNEL, added=(_file("f"),), columns=COLUMNS)
    assert write.requirements() == (TableLive(1, "t"), ColumnsWritable(1, "t", COLUMNS))


def test_a_schema_change_sets_the_schema_under_the_columns_it_read():
    schema = TableSchema(COLUMNS)
    write = TableWrite(1, "t", 2, WriteKind.SCHEMA, schema=schema)
    assert write.updates() == (SetSchema(1, schema),)
    assert write.requirements() == (TableLive(1, "t"), SchemaUnchanged(1, "t", 2))


def test_a_write_that_changed_nothing_requires_nothing():
    write = TableWrite(1, "t", 4, WriteKind.CHANGE)
    assert not write.changed and write.updates() == () and write.requirements() == ()


def test_a_channel_that_adds_nothing_still_requires_its_table_its_token_moves():
    write = TableWrite(1, "t", None, WriteKind.CHANNEL, columns=COLUMNS)
    assert write.updates() == () and write.requirements() == (TableLive(1, "t"),)


def test_a_creation_makes_its_table_holding_its_files_and_requires_nothing():
    schema = TableSchema(COLUMNS)
    table = CreateTable("t", schema, (("comment", "c"),), if_exists=IfExists.REPLACE)
    write = TableWrite.creating(table, (_file("a", rows=3), _file("b", rows=4)))
    assert write.changed and write.inserted == 7
    created = CreateTable(
        "t", schema, (("comment", "c"),), (_file("a", rows=3), _file("b", rows=4)), IfExists.REPLACE
    )
    assert write.updates() == (created,) and write.requirements() == ()
    advance = AdvanceStream(9, ((1, 4),))
    frontier = FrontierAt(9, "s", ((1, 3),), initial_consumed=True)
    request = write_request("st", "CTAS", [write], updates=(advance,), requirements=(frontier,))
    # version 0 counts its files' rows itself (CreateTable): the request counts none
    assert request.updates == (created, advance) and request.requirements == (frontier,)
    assert request.row_counts == ()


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(kind=WriteKind.APPEND, removed=("f",)), "removes no row"),
        (dict(kind=WriteKind.CHANNEL, added=(_file("f"),)), "names the columns"),
        (dict(kind=WriteKind.COMPACT, deleted=3), "changes no row"),
        (dict(kind=WriteKind.CHANGE, since=None), "names the version"),
        (dict(kind=WriteKind.CHANGE, schema=TableSchema(COLUMNS)), "if and only if SCHEMA"),
        (dict(kind=WriteKind.CREATE, since=None), "if and only if CREATE"),
        (
            dict(kind=WriteKind.CREATE, since=None, creates=CreateTable("t", TableSchema(COLUMNS))),
            "TableWrite.creating",
        ),
    ],
)
def test_a_write_is_checked_when_built(kw, message):
    args = dict(table_id=1, name="t", since=3) | kw
    with pytest.raises(ValueError, match=message):
        TableWrite(**args)


def test_one_request_of_a_statements_writes_and_its_own_updates_and_requirements():
    first = TableWrite(
        1, "t", None, WriteKind.CHANNEL, added=(_file("a"),), inserted=2, columns=COLUMNS
    )
    second = TableWrite(
        1, "t", None, WriteKind.CHANNEL, added=(_file("b"),), inserted=3, columns=COLUMNS
    )
    other = TableWrite(2, "u", 7, WriteKind.CHANGE, removed=("x",), deleted=5)
    advance = AdvanceStream(9, ((1, 4),))
    frontier = FrontierAt(9, "s", ((1, 3),), initial_consumed=True)
    request = write_request(
        "st", "OP", [first, second, other], updates=(advance,), requirements=(frontier,)
    )
    assert request.statement_id == "st" and request.operation == "OP"
    assert request.updates == (
        AddFiles(1, (_file("a"),)),
        AddFiles(1, (_file("b"),)),
        RemoveFiles(2, ("x",)),
        advance,
    )
    # the statement's own requirement first; what both channels' writes require, once
    assert request.requirements == (
        frontier,
        TableLive(1, "t"),
        ColumnsWritable(1, "t", COLUMNS),
        TableLive(2, "u"),
        SchemaUnchanged(2, "u", 7),
        FilesUntouched(2, "u", ("x",), 7),
    )
    assert request.row_counts == (RowCounts(1, inserted=5), RowCounts(2, deleted=5))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: AlterExternalTable(1), "sets nothing"),
        (lambda: AlterExternalTable(1, state="RUNNING"), "state = 'RUNNING'"),
        (lambda: AlterExternalTable(1, follow_lag=0), "follow_lag = 0"),
        (lambda: AlterDynamicTable(1, target_lag=-5.0), "target_lag"),
        (lambda: AlterDynamicTable(1, refresh_mode="SOMETIMES"), "refresh_mode"),
        (lambda: AlterTask(1, failures=-1), "failures"),
        (lambda: FinishTaskRun(1, "DONE"), "state = 'DONE'"),
    ],
)
def test_typed_updates_are_checked_when_built(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_typed_update_sets_only_what_it_names():
    update = AlterExternalTable(3, scope=None, position="0/16")
    assert fields_set(update) == {"scope": None, "position": "0/16"}
    assert fields_set(AlterDynamicTable(2, target_lag=None)) == {"target_lag": None}
    assert fields_set(FinishTaskRun(5, "FAILED", error="x")) == {"state": "FAILED", "error": "x"}
