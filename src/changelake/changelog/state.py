"""The companion table that remembers, per key, what APPLY CHANGES applied last.

``<target>__apply_state`` is an ordinary changelake table (SHOW TABLES lists it; do not write to
it) created by the first APPLY CHANGES into ``target`` and changed in the same commit as the
target by every later one. Per key it holds:

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

The table records the target's id and KEYS as properties: if the target was dropped and created
again the state starts over; applying with other KEYS is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from changelake.catalog.model import TableInfo
from changelake.dml.common import Target
from changelake.errors import InvalidStatementError
from changelake.schema import Column, TableSchema
from changelake.storage.snapshot import read_state
from changelake.storage.warehouse import Warehouse
from changelake.txn.context import StatementContext
from changelake.txn.snapshot import TableState

STATE_SEQ, STATE_DELETED, STATE_HASH, STATE_AT = "__seq", "__deleted", "__hash", "__applied_at"
STATE_DELETES, STATE_MERGED = "__deletes", "__merged"
HISTORY_COLUMNS = (STATE_DELETES, STATE_MERGED)
RETENTION_PROPERTY = "apply_tombstone_retention_days"
DEFAULT_RETENTION_DAYS = 7.0


@dataclass(frozen=True)
class StateTable:
    """The state table as this apply reads it; ``target`` None: this apply creates it (replacing
    a stale one left by a dropped target when ``replace``)."""

    name: str
    schema: TableSchema
    properties: tuple[tuple[str, str], ...]
    target: Target | None
    replace: bool = False

    @property
    def state(self) -> TableState:
        if self.target is not None:
            return self.target.state
        return TableState(table_id=-1, name=self.name, version=-1, schema=self.schema, files=())


def state_table(
    ctx: StatementContext,
    target: TableInfo,
    name: str,
    *,
    keys: list[Column],
    seq_type: str,
) -> StateTable:
    """The state table of ``target`` keyed by ``keys`` (found, or to be created)."""
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
    )
    schema = TableSchema(tuple(columns))
    info = ctx.catalog.find_table(name)
    current = info is not None and info.properties.get("apply_target_id") == str(target.table_id)
    if current:
        found_schema = ctx.catalog.schema_at(info.table_id, info.current_version)  # type: ignore[union-attr]
        # written before the history columns were kept: started over
        current = all(found_schema.find(c) is not None for c in HISTORY_COLUMNS)
    if not current:
        if ctx.transaction is not None:
            raise InvalidStatementError(
                f"The first APPLY CHANGES INTO {target.name} creates its state table {name};"
                " run it outside BEGIN ... COMMIT."
            )
        return StateTable(name, schema, properties, None, replace=info is not None)
    if info.properties.get("apply_keys") != key_list:
        raise InvalidStatementError(
            f"APPLY CHANGES INTO {target.name}: earlier applies used KEYS"
            f" ({info.properties.get('apply_keys')}), this one ({key_list}). Use the same keys,"
            f" or DROP TABLE {name} to start over (tombstones are then forgotten)."
        )
    found = Target.of(ctx, name)
    return StateTable(name, found.state.schema, properties, found)


def retention_seconds(target: TableInfo) -> float:
    days = target.properties.get(RETENTION_PROPERTY)
    return 86400.0 * (float(days) if days is not None else DEFAULT_RETENTION_DAYS)


def read_live(
    spark: SparkSession, warehouse: Warehouse, table: StateTable, *, expired_before: float
) -> tuple[DataFrame, SparkColumn]:
    """The state rows with their address columns, and a condition true for expired
    tombstones (applied before ``expired_before``), which count as no state."""
    df = read_state(spark, warehouse, table.state, address=True)
    expired = F.col(STATE_DELETED) & (F.col(STATE_AT) < F.lit(expired_before))
    return df, expired
