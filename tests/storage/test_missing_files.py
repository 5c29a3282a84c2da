"""A file the catalog says a table holds, removed from the warehouse by hand: a statement that
reads it fails with an error naming the file and the recovery, and changes nothing."""

from __future__ import annotations

import os
import posixpath

import pytest
from conftest import state_of

from changelake.errors import MissingFileError


def _remove_data_files(session, table: str) -> list[str]:
    """Remove ``table``'s data files from the warehouse; their names."""
    files = state_of(session, session.catalog.table(table)).files
    for live in files:
        os.remove(session.warehouse.fs_path(live.file.path))
    return [posixpath.basename(live.file.path) for live in files]


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM t WHERE k = 1",
        "UPDATE t SET v = 0 WHERE k = 3",
        "ALTER DYNAMIC TABLE d REFRESH",
    ],
)
def test_a_statement_reading_a_missing_file_says_so_and_changes_nothing(session, statement):
    session.sql("CREATE TABLE t (k INT, v INT)")
    session.sql("INSERT INTO t VALUES (1, 2), (3, 4)")
    session.sql("CREATE DYNAMIC TABLE d TARGET_LAG = '1 hour' AS SELECT k, v + 1 AS w FROM t")
    session.sql("INSERT INTO t VALUES (5, 6)")
    versions = {name: session.catalog.table(name).current_version for name in ("t", "d")}
    removed = _remove_data_files(session, "t")
    with pytest.raises(MissingFileError) as raised:
        session.sql(statement)
    message = str(raised.value)
    assert any(name in message for name in removed)
    assert "nothing was changed" in message and "VACUUM" in message
    assert {n: session.catalog.table(n).current_version for n in versions} == versions
