"""A minimum delta applied to a table whose rows carry a row key (a dynamic table's, an
external table's), matched by ROW_ID (the key).

The delta has the table's visible columns, METADATA$ACTION, METADATA$ISUPDATE and
METADATA$ROW_ID, at most one DELETE and one INSERT per ROW_ID (the minimum delta of the query, or
of the stored rows against the query's result). A DELETE removes the stored row with that key (a
deletion-vector entry with its before-image, as DML writes); an INSERT writes a row with that key,
and when it pairs with a DELETE (an update) it keeps the deleted row's identity, so the table's own
changes show an update. A delta computed against the stored rows (a maintained aggregate's, a
FULL refresh's diff) carries their addresses and identities, so it is applied in one pass; for
another (a view's changes) the stored rows are found by one join of the deleted keys with the
table's key column, and full rows are read only from the files that hold one.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from changelake.catalog.model import DataFile, NewDeletes
from changelake.catalog.writes import TableWrite, WriteKind
from changelake.changes.columns import METADATA_ACTION, METADATA_ISUPDATE, METADATA_ROW_ID
from changelake.changes.scan import PAIR_EVENTS
from changelake.dml.common import Target, record_deletes, write_rows
from changelake.dml.matches import BROADCAST_MATCHES, find_matches, matched_rows, persisted
from changelake.errors import ConflictError
from changelake.schema import ROW_KEY, quoted
from changelake.storage.snapshot import ADDRESS, FILE, IDENTITY, RID, state_relation
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import run_checked

_KEY = "_cl_dkey"
# a stored row's address and identity, on the events of a delta computed against stored rows
STORED = (*ADDRESS, *IDENTITY)


def apply_delta(
    spark: SparkSession,
    warehouse: Warehouse,
    target: Target,
    delta: DataFrame,
    *,
    statement_id: str,
) -> TableWrite:
    """Write what turns ``target``'s rows into the rows ``delta`` leads to (files, DV files).

    A delta computed against the stored rows themselves (a maintained aggregate, a FULL
    refresh's diff) carries each stored row's address and identity (``STORED``) on its events:
    it is applied in one pass, with no second read of the table to find the deleted keys' rows
    and their before-images."""
    if all(c in delta.columns for c in STORED):
        return _apply_addressed(warehouse, target, delta, statement_id=statement_id)
    name = target.info.name
    with persisted(delta) as changes:
        counts = run_checked(
            lambda: changes.groupBy(METADATA_ACTION, METADATA_ISUPDATE).count().collect(),
            table=name,
        )
        by_kind = {(r[METADATA_ACTION], r[METADATA_ISUPDATE]): r["count"] for r in counts}
        deleting = by_kind.get(("DELETE", True), 0) + by_kind.get(("DELETE", False), 0)
        inserting = by_kind.get(("INSERT", True), 0) + by_kind.get(("INSERT", False), 0)
        if not deleting and not inserting:
            return _written(target)
        removed: tuple[str, ...] = ()
        deletes: tuple[NewDeletes, ...] = ()
        old = None
        if deleting:
            keys = changes.where(F.col(METADATA_ACTION) == "DELETE").select(
                F.col(METADATA_ROW_ID).alias(_KEY)
            )
            stored = state_relation(spark, warehouse, target.state, address=True).frame(spark)
            if deleting <= BROADCAST_MATCHES:
                keys = F.broadcast(keys)
            found = stored.join(keys, F.col(quoted(ROW_KEY)) == F.col(_KEY))
            found = found.select(*ADDRESS)
            with find_matches(found, target=target, operation="REFRESH") as matches:
                if matches.matched != deleting:
                    raise _not_held(target, f"{deleting} to delete, {matches.matched} found")
                old = matched_rows(spark, warehouse, target, matches).persist()
                removed, deletes, _ = record_deletes(
                    warehouse,
                    target,
                    old,
                    counts=matches.per_file,
                    statement_id=statement_id,
                )
        try:
            rows = changes.where(F.col(METADATA_ACTION) == "INSERT")
            if old is None:
                rows = rows.withColumn(RID, F.lit(None))
            else:
                kept = old.select(F.col(quoted(ROW_KEY)).alias(_KEY), F.col(RID))
                rows = rows.join(kept, rows[METADATA_ROW_ID] == kept[_KEY], "left")
            added = _write_inserts(warehouse, target, rows, inserting, statement_id=statement_id)
        finally:
            if old is not None:
                old.unpersist()
    return _written(target, by_kind, added, removed, deletes, inserting, deleting)


def _apply_addressed(
    warehouse: Warehouse, target: Target, delta: DataFrame, *, statement_id: str
) -> TableWrite:
    name, schema = target.info.name, target.state.schema
    with persisted(delta) as changes:
        counts = run_checked(
            lambda: changes.groupBy(METADATA_ACTION, METADATA_ISUPDATE, FILE).count().collect(),
            table=name,
        )
        by_kind: dict[tuple[str, bool], int] = {}
        per_file: dict[str, int] = {}
        for r in counts:
            kind = (r[METADATA_ACTION], r[METADATA_ISUPDATE])
            by_kind[kind] = by_kind.get(kind, 0) + r["count"]
            if r[METADATA_ACTION] == "DELETE":
                if r[FILE] is None:
                    raise _not_held(target, f"{r['count']} to delete were not found")
                per_file[r[FILE]] = per_file.get(r[FILE], 0) + r["count"]
        deleting = sum(per_file.values())
        inserting = by_kind.get(("INSERT", True), 0) + by_kind.get(("INSERT", False), 0)
        if not deleting and not inserting:
            return _written(target)
        removed: tuple[str, ...] = ()
        deletes: tuple[NewDeletes, ...] = ()
        if deleting:
            deleted = changes.where(F.col(METADATA_ACTION) == "DELETE").select(
                *[F.col(quoted(c.name)) for c in schema.stored],
                F.col(METADATA_ROW_ID).alias(ROW_KEY),
                *[F.col(c) for c in STORED],
            )
            removed, deletes, _ = record_deletes(
                warehouse, target, deleted, counts=per_file, statement_id=statement_id
            )
        # an update's new row keeps the identity (RID) of the row it replaces
        rows = changes.where(F.col(METADATA_ACTION) == "INSERT")
        added = _write_inserts(warehouse, target, rows, inserting, statement_id=statement_id)
    return _written(target, by_kind, added, removed, deletes, inserting, deleting)


def _not_held(target: Target, found: str) -> ConflictError:
    """The stored rows are not those the table's last refresh (dynamic) or follow (external)
    left: the delta does not apply to them."""
    name = target.info.name
    if target.info.is_external():
        what, fix = "External table", f"CREATE OR REPLACE EXTERNAL TABLE {name} … loads it again"
        last = "follow"
    else:
        what, fix = "Dynamic table", f"ALTER DYNAMIC TABLE {name} REFRESH again reinitializes it"
        last = "refresh"
    return ConflictError(
        f"{what} {name} does not hold the rows its last {last} left ({found}); nothing was"
        f" written. {fix}."
    )


def _write_inserts(
    warehouse: Warehouse, target: Target, rows: DataFrame, count: int, *, statement_id: str
) -> list[DataFile]:
    """Write the delta's INSERT ``rows`` (with the identity column: NULL for a new row) as the
    table's rows, keyed by their ROW_ID. A state column the delta lacks (a table whose state a
    refresh cannot maintain any longer: its query changed) is left NULL."""
    schema = target.state.schema
    values = [
        F.col(quoted(c.name)) if c.name in rows.columns else F.lit(None).cast(c.type)
        for c in schema.stored
    ]
    new = rows.select(*values, F.col(METADATA_ROW_ID).alias(ROW_KEY), F.col(RID))
    return write_rows(
        warehouse,
        [new] if count else [],
        schema=schema,
        table=target.info.name,
        directory=warehouse.data_dir(statement_id),
        rows=count,
    )


def _written(
    target: Target,
    by_kind: dict[tuple[str, bool], int] | None = None,
    added: list[DataFile] | None = None,
    removed: tuple[str, ...] = (),
    deletes: tuple[NewDeletes, ...] = (),
    inserting: int = 0,
    deleting: int = 0,
) -> TableWrite:
    """The write of a delta (``by_kind``: its events counted by action and ISUPDATE)."""
    by_kind = by_kind or {}
    updated = by_kind.get(("INSERT", True), 0)
    return TableWrite(
        target.info.table_id,
        target.info.name,
        target.state.version,
        WriteKind.CHANGE,
        added=tuple(added or ()),
        removed=removed,
        deletes=deletes,
        inserted=inserting - updated,
        updated=updated,
        deleted=deleting - by_kind.get(("DELETE", True), 0),
    )


def diff(
    stored: DataFrame, rows: DataFrame, names: list[str], carried: tuple[str, ...] = ()
) -> DataFrame:
    """The minimum delta from ``stored`` (with the row key) to ``rows`` (with METADATA$ROW_ID),
    matched by ROW_ID: a key in both with other values is an update pair. Both events of a
    stored row keep its ``carried`` columns (its address and identity: see ``apply_delta``);
    a new key has them NULL."""
    values = [F.col(quoted(n)) for n in names]
    old = stored.select(F.col(quoted(ROW_KEY)).alias("_k"), F.struct(*values).alias("_b"), *carried)
    new = rows.select(F.col(METADATA_ROW_ID).alias("_k"), F.struct(*values).alias("_a"))
    changed = old.join(new, "_k", "full_outer").where(~F.col("_b").eqNullSafe(F.col("_a")))
    events = changed.select(F.col("_k"), F.expr(PAIR_EVENTS).alias("_e"), *carried)
    events = events.where(F.col("_e").isNotNull())
    return events.select(
        *[F.col("_e").getField("v").getField(n).alias(n) for n in names],
        F.col("_e").getField("a").alias(METADATA_ACTION),
        F.col("_e").getField("u").alias(METADATA_ISUPDATE),
        F.col("_k").alias(METADATA_ROW_ID),
        *carried,
    )
