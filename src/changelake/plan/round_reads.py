"""A round's shared reads of changes (``storage.shared``): the key a view plan's read of a
table's changes has among them, and what a refresh's delta is read as when it is handed to the
round's readers of its table instead of a scan."""

from __future__ import annotations

from changelake.changes.columns import METADATA_ACTION, METADATA_ROW_ID
from changelake.changes.plan import Information
from changelake.plan.compile import VIEW_ACTION, VIEW_ROW_ID
from changelake.schema import TableSchema, quoted
from changelake.spark.relation import Relation


def changes_key(
    table_id: int, *, start: int, end: int, information: Information = Information.DEFAULT
) -> tuple[str, int, int, int, str]:
    """The key of a view plan's read of the changes of table ``table_id`` over ``(start, end]``
    among a round's shared reads (``storage.shared``)."""
    return ("changes", table_id, start, end, information.value)


def written_changes(delta: Relation, schema: TableSchema) -> Relation:
    """What a view plan reads as a table's changes (``Leaves``), from a delta that was the one
    commit of the interval: a minimum delta with the table's visible columns, METADATA$ACTION and
    METADATA$ROW_ID (a refresh's). A pair of events that changed only hidden columns may be
    left in it: a view plan's changes may be redundant, its result is the minimum delta."""
    return delta.select(
        *[f"CAST({quoted(c.name)} AS {c.type}) AS {quoted(c.name)}" for c in schema.visible],
        f"{quoted(METADATA_ROW_ID)} AS {VIEW_ROW_ID}",
        f"{quoted(METADATA_ACTION)} AS {VIEW_ACTION}",
    )
