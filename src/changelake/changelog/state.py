"""The internal table that remembers, per key, what APPLY CHANGES applied last.

It is an internal table of the target (``#<target id>#apply_state``, see catalog/internal.py):
SHOW INTERNAL TABLES lists it, queries may read it, no user statement may change it. The first
APPLY CHANGES into ``target`` creates it, every later one changes it in the same commit as the
target, and dropping the target drops it. Per key it holds:

- ``__seq``: the greatest sequence applied (for SCD TYPE 2, seen);
- ``__deleted``: whether that event was a delete (a *tombstone*);
- ``__hash``: a hash of that event's values, which breaks ties between events of equal
  sequence (a delete beats an upsert, then the greater hash wins);
- ``__applied_at``: when (session clock, epoch seconds) it was applied;
- ``__deletes`` (SCD TYPE 2): every delete's sequence seen for the key, as a JSON array: a
  delete that closed no row (the key had none open) leaves no trace in the target, yet a late
  upsert before it must end there;
- ``__merged`` (SCD TYPE 2): the sequence of every upsert that opened no row because its values
  equal the open row's, as a JSON array: a late delete before it splits the row, and the rest
  of the row must start again at it.

Tombstones are kept for the target's ``APPLY_TOMBSTONE_RETENTION_DAYS`` (default 7) after the
delete was applied; an event older than a live tombstone is ignored. Once a tombstone expires the
next APPLY drops it, and its key is new again: any later event for it applies.

The table records the target's KEYS as a property: applying with other KEYS is an error.
Warehouses written before internal tables keep the state in ``<target>__apply_state``; the next
APPLY into the target moves that table into the internal namespace, in the apply's commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from changelake.catalog.internal import APPLY_STATE, InternalTable
from changelake.catalog.model import DataFile, TableInfo
from changelake.catalog.requests import (
    CreateTable,
    DropTable,
    IfExists,
    RenameTable,
    SetProperties,
    Update,
)
from changelake.catalog.writes import TableWrite
from changelake.dml.common import Target
from changelake.errors import InvalidStatementError
from changelake.schema import Column, TableSchema
from changelake.storage.snapshot import state_relation
from changelake.storage.warehouse import Warehouse
from changelake.txn.context import StatementContext
from changelake.txn.snapshot import TableState

STATE_SEQ, STATE_DELETED, STATE_HASH, STATE_AT = "__seq", "__deleted", "__hash", "__applied_at"
STATE_DELETES, STATE_MERGED = "__deletes", "__merged"
HISTORY_COLUMNS = (STATE_DELETES, STATE_MERGED)
RETENTION_PROPERTY = "apply_tombstone_retention_days"
DEFAULT_RETENTION_DAYS = 7.0
LEGACY_SUFFIX = "__apply_state"  # <target>__apply_state: the state before internal tables


@dataclass(frozen=True)
class StateTable:
    """The state table as this apply reads it; ``target`` None: this apply creates it (replacing
    a stale one when ``replace``). ``moves``: updates of the apply's commit that move a legacy
    state table into the internal namespace (or drop a stale one)."""

    name: str
    schema: TableSchema
    properties: tuple[tuple[str, str], ...]
    target: Target | None
    replace: bool = False
    moves: tuple[Update, ...] = ()

    @property
    def state(self) -> TableState:
        if self.target is not None:
            return self.target.state
        return TableState(table_id=-1, name=self.name, version=-1, schema=self.schema, files=())

    def created(self, files: Sequence[DataFile]) -> TableWrite:
        """The write that creates this state table holding ``files`` (``target`` None)."""
        if_exists = IfExists.REPLACE if self.replace else IfExists.ERROR
        table = CreateTable(self.name, self.schema, self.properties, if_exists=if_exists)
        return TableWrite.creating(table, files)


def state_table(
    ctx: StatementContext,
    target: TableInfo,
    *,
    keys: list[Column],
    seq_type: str,
) -> StateTable:
    """The state table of ``target`` keyed by ``keys`` (found, or to be created)."""
    internal = InternalTable(target.table_id, APPLY_STATE)
    name = internal.name
    columns = [Column(i, k.name, k.type) for i, k in enumerate(keys, start=1)]
    n = len(columns)
    columns += [
        Column(n + 1, STATE_SEQ, seq_type),
        Column(n + 2, STATE_DELETED, "boolean"),
        Column(n + 3, STATE_HASH, "bigint"),
        Column(n + 4, STATE_AT, "double"),
        *[Column(n + i, c, "string") for i, c in enumerate(HISTORY_COLUMNS, start=5)],
    ]
    key_list = ",".join(k.name.lower() for k in keys)
    properties = (
        ("apply_keys", key_list),
        ("apply_target_id", str(target.table_id)),
        ("before_images", "false"),
        ("comment", f"APPLY CHANGES state of {target.name}"),
        ("data_retention_time_in_days", "1"),
        *internal.properties,
    )
    schema = TableSchema(tuple(columns))
    info = ctx.catalog.find_table(name)
    legacy = _legacy(ctx, target) if info is None else None
    found = info or legacy
    if found is None or not _current(ctx, found, target):
        if ctx.transaction is not None:
            raise InvalidStatementError(
                f"The first APPLY CHANGES INTO {target.name} creates its state table {name};"
                " run it outside BEGIN ... COMMIT."
            )
        drop = (DropTable(legacy.table_id),) if legacy is not None else ()
        return StateTable(name, schema, properties, None, replace=info is not None, moves=drop)
    if found.properties.get("apply_keys") != key_list:
        raise InvalidStatementError(
            f"APPLY CHANGES INTO {target.name}: earlier applies used KEYS"
            f" ({found.properties.get('apply_keys')}), this one ({key_list}). Use the same keys,"
            f" or start the state over with {APPLY_STATE.start_over.format(owner=target.name)}."
        )
    moves: tuple[Update, ...] = ()
    if legacy is not None:
        moves = (
            RenameTable(legacy.table_id, name),
            SetProperties(legacy.table_id, internal.properties),
        )
    state = Target(found, ctx.state(found))
    return StateTable(name, state.state.schema, properties, state, moves=moves)


def _current(ctx: StatementContext, found: TableInfo, target: TableInfo) -> bool:
    """Whether ``found`` holds ``target``'s state as this changelake keeps it; a stale one (of a
    dropped target) or one written before the history columns were kept starts over."""
    if found.properties.get("apply_target_id") != str(target.table_id):
        return False
    schema = ctx.catalog.schema_at(found.table_id, found.current_version)
    return all(schema.find(c) is not None for c in HISTORY_COLUMNS)


def _legacy(ctx: StatementContext, target: TableInfo) -> TableInfo | None:
    """The state table an earlier changelake kept for ``target`` as an ordinary table."""
    found = ctx.catalog.find_table(f"{target.name}{LEGACY_SUFFIX}")
    if found is None or found.properties.get("apply_target_id") != str(target.table_id):
        return None  # none, or a user's table of that name
    return found


def retention_seconds(target: TableInfo) -> float:
    days = target.properties.get(RETENTION_PROPERTY)
    return 86400.0 * (float(days) if days is not None else DEFAULT_RETENTION_DAYS)


def read_live(
    spark: SparkSession, warehouse: Warehouse, table: StateTable, *, expired_before: float
) -> tuple[DataFrame, SparkColumn]:
    """The state rows with their address columns, and a condition true for expired
    tombstones (applied before ``expired_before``), which count as no state."""
    df = state_relation(spark, warehouse, table.state, address=True).frame(spark)
    expired = F.col(STATE_DELETED) & (F.col(STATE_AT) < F.lit(expired_before))
    return df, expired
