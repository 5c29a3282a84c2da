"""A deletion vector made in the version that added its file (a bootstrap's: snapshot rows a
later change of their key superseded, `external/postgresql/applied.py`) deletes rows the table
never showed: the change plans take the file's rows as that version left them, in every format,
and a later deletion vector of the same file is a change as any other. The end-to-end oracle is
`tests/external/test_snapshot_once.py`; these pin the plans against a hand-made file history."""

from __future__ import annotations

import pytest

from changelake.catalog.model import DataFile, TrackedFile
from changelake.changes.plan import Information, Shape, only_inserts, plan_changes

# a file of 10 rows added at version 3 with 2 rows superseded in it, and 1 more deleted at 5
ADDED = DataFile("data/a.parquet", 10, 100, 0, 3)
FILE = TrackedFile(ADDED, None, dvs=((3, "dv/own.parquet", 2), (5, "dv/later.parquet", 1)))


def _plan(information: str, start: int, end: int):
    return plan_changes(
        table_id=1,
        table_name="t",
        start_version=start,
        end_version=end,
        information=Information.parse(information),
        touched=[FILE],
    )


@pytest.mark.parametrize("information", ["DEFAULT", "APPEND_ONLY", "REDO"])
def test_the_version_that_added_the_file_inserts_its_rows_less_its_own_deletes(information):
    plan = _plan(information, 2, 3)
    assert plan.shape is Shape.ADDED_ONLY
    assert plan.after_files.rows == 8
    assert plan.after_files.minus_dvs == (("dv/own.parquet", ADDED.path),)
    assert only_inserts([FILE], start=2, end=3)


def test_a_later_deletion_vector_is_a_change():
    assert not only_inserts([FILE], start=2, end=5)
    redo = _plan("REDO", 2, 5)
    assert redo.before_deleted.dvs == ((5, "dv/later.parquet", ADDED.path),)
    assert redo.before_deleted.rows == 1
    assert redo.after_files.rows == 8  # as added: the later delete is the before side's
    default = _plan("DEFAULT", 3, 5)
    assert default.before_deleted.dvs == ((5, "dv/later.parquet", ADDED.path),)
    appended = _plan("APPEND_ONLY", 2, 5)
    assert appended.after_files.rows == 8 and not appended.before_deleted.dvs
    whole = _plan("DEFAULT", 2, 5)  # the file added and deleted from within the interval
    assert whole.shape is Shape.ADDED_ONLY and whole.after_files.rows == 7
