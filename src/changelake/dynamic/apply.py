"""A minimum delta applied to a dynamic table's stored rows, matched by ROW_ID (its row key).

The delta has the table's visible columns, METADATA$ACTION, METADATA$ISUPDATE and
METADATA$ROW_ID, at most one DELETE and one INSERT per ROW_ID (the minimum delta of the query, or
of the stored rows against the query's result). A DELETE removes the stored row with that key (a
deletion-vector entry with its before-image, as DML writes); an INSERT writes a row with that key,
and when it pairs with a DELETE (an update) it keeps the deleted row's identity, so the table's own
changes show an update. The stored rows are found by one join of the deleted keys with the
table's key column; full rows are read only from the files that hold one.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from changelake.catalog.model import DataFile, NewDeletes
from changelake.changes.scan import ACTION, ISUPDATE, ROW_ID, pair_events
from changelake.dml.common import Target, record_deletes, write_rows
from changelake.dml.matches import BROADCAST_MATCHES, find_matches, full_rows, persisted
from changelake.errors import ConflictError
from changelake.schema import ROW_KEY, quoted
from changelake.storage.snapshot import ADDRESS, RID, read_state
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import run_checked

_KEY = "_cl_dkey"


@dataclass(frozen=True)
class Applied:
    """What applying a delta wrote (not yet committed) and what it did to rows."""

    added: tuple[DataFile, ...] = ()
    removed: tuple[str, ...] = ()
    deletes: tuple[NewDeletes, ...] = ()
    inserted: int = 0
    updated: int = 0
    deleted: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.deletes)


def apply_delta(
    spark: SparkSession,
    warehouse: Warehouse,
    target: Target,
    delta: DataFrame,
    *,
    statement_id: str,
) -> Applied:
    """Write what turns ``target``'s rows into the rows ``delta`` leads to (files, DV files)."""
    name, schema = target.info.name, target.state.schema
    with persisted(delta) as changes:
        counts = run_checked(
            lambda: changes.groupBy(ACTION, ISUPDATE).count().collect(), table=name
        )
        by_kind = {(r[ACTION], r[ISUPDATE]): r["count"] for r in counts}
        deleting = by_kind.get(("DELETE", True), 0) + by_kind.get(("DELETE", False), 0)
        inserting = by_kind.get(("INSERT", True), 0) + by_kind.get(("INSERT", False), 0)
        if not deleting and not inserting:
            return Applied()
        removed: tuple[str, ...] = ()
        deletes: tuple[NewDeletes, ...] = ()
        old = None
        if deleting:
            keys = changes.where(F.col(ACTION) == "DELETE").select(F.col(ROW_ID).alias(_KEY))
            stored = read_state(spark, warehouse, target.state, address=True)
            if deleting <= BROADCAST_MATCHES:
                keys = F.broadcast(keys)
            found = stored.join(keys, F.col(quoted(ROW_KEY)) == F.col(_KEY))
            found = found.select(*ADDRESS)
            with find_matches(found, target=target, operation="REFRESH") as matches:
                if matches.matched != deleting:
                    raise ConflictError(
                        f"Dynamic table {name} does not hold the rows its last refresh left"
                        f" ({deleting} to delete, {matches.matched} found); nothing was written."
                        f" ALTER DYNAMIC TABLE {name} REFRESH again reinitializes it."
                    )
                old = full_rows(spark, warehouse, target, matches).persist()
                removed, deletes, _ = record_deletes(
                    warehouse,
                    target,
                    old,
                    counts=matches.per_file,
                    statement_id=statement_id,
                )
        try:
            rows = changes.where(F.col(ACTION) == "INSERT")
            # a state column the delta lacks (a table whose state a refresh cannot maintain
            # any longer: its query changed) is left NULL
            values = [
                F.col(quoted(c.name)) if c.name in rows.columns else F.lit(None).cast(c.type)
                for c in schema.stored
            ]
            if old is None:
                new = rows.select(*values, F.col(ROW_ID).alias(ROW_KEY), F.lit(None).alias(RID))
            else:
                kept = old.select(F.col(quoted(ROW_KEY)).alias(_KEY), F.col(RID))
                joined = rows.join(kept, rows[ROW_ID] == kept[_KEY], "left")
                new = joined.select(*values, F.col(ROW_ID).alias(ROW_KEY), F.col(RID))
            added = write_rows(
                warehouse,
                [new] if inserting else [],
                schema=schema,
                table=name,
                directory=warehouse.data_dir(statement_id),
                rows=inserting,
            )
        finally:
            if old is not None:
                old.unpersist()
    updated = by_kind.get(("INSERT", True), 0)
    return Applied(
        added=tuple(added),
        removed=removed,
        deletes=deletes,
        inserted=inserting - updated,
        updated=updated,
        deleted=deleting - by_kind.get(("DELETE", True), 0),
    )


def diff(stored: DataFrame, rows: DataFrame, names: list[str]) -> DataFrame:
    """The minimum delta from ``stored`` (with the row key) to ``rows`` (with METADATA$ROW_ID),
    matched by ROW_ID: a key in both with other values is an update pair."""
    values = [F.col(quoted(n)) for n in names]
    old = stored.select(F.col(quoted(ROW_KEY)).alias("_k"), F.struct(*values).alias("_b"))
    new = rows.select(F.col(ROW_ID).alias("_k"), F.struct(*values).alias("_a"))
    changed = old.join(new, "_k", "full_outer").where(~F.col("_b").eqNullSafe(F.col("_a")))
    events = changed.select(F.col("_k"), pair_events(F.col("_b"), F.col("_a")))
    events = events.where(F.col("_e").isNotNull())
    return events.select(
        *[F.col("_e").getField("v").getField(n).alias(n) for n in names],
        F.col("_e").getField("a").alias(ACTION),
        F.col("_e").getField("u").alias(ISUPDATE),
        F.col("_k").alias(ROW_ID),
    )
