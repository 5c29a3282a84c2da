"""SCD TYPE 2: the target keeps the history of each key as rows valid from ``__START_AT``
(inclusive) to ``__END_AT`` (exclusive; NULL: the current row), in sequence values.

The history of every key an apply touches is computed again from its existing rows (an upsert at
each ``__START_AT``; a delete at an ``__END_AT`` no row starts at), the events the state table
remembers (its tombstone, every delete, every upsert merged into an open row, which takes that
row's values), and the new events, so a late event lands at its place in the history: per key
and sequence one event (a delete beats an upsert, then the greater value hash), in sequence
order; an upsert opens a row and closes the open one, unless its values equal the open row's
(then nothing happens); a delete closes the open row. Only rows that differ from the existing
ones are written: a closed row is an update keeping its identity, a new row an insert, a row no
longer in the history a delete. Columns not written by the apply (not in COLUMNS), and with
IGNORE NULL UPDATES every NULL value, carry the value of the key's previous row since its last
delete (a merged upsert keeps its row's values even if a late delete now comes before it: the
state does not remember which of its values were carried).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from changelake.changelog.events import DELETE, HASH, SEQ, Events, value_hash
from changelake.changelog.rewrite import INSERT, REMOVE, REPLACE, WRITE_ACTION, found_columns
from changelake.changelog.state import (
    HISTORY_COLUMNS,
    STATE_DELETED,
    STATE_DELETES,
    STATE_MERGED,
    STATE_SEQ,
)
from changelake.dml.common import Target
from changelake.errors import InvalidStatementError
from changelake.schema import TableSchema, quoted
from changelake.storage.snapshot import ADDRESS, FILE

START, END = "__START_AT", "__END_AT"


def validity_columns(
    schema: TableSchema, *, table: str, seq_type: str, seq_name: str
) -> tuple[str, str]:
    """The target's names of ``__START_AT`` / ``__END_AT``, checked to have the sequence's type."""
    found = []
    for wanted in (START, END):
        column = schema.find(wanted)
        if column is None or column.type != seq_type:
            has = f"; it has {wanted} {column.type.upper()}" if column is not None else ""
            raise InvalidStatementError(
                f"APPLY CHANGES INTO {table} STORED AS SCD TYPE 2 needs columns {START} and {END}"
                f" of the SEQUENCE BY column's type ({seq_name} is {seq_type.upper()}){has}."
                f" Add them: ALTER TABLE {table} ADD COLUMNS ({START} {seq_type.upper()},"
                f" {END} {seq_type.upper()})."
            )
        found.append(column.name)
    return found[0], found[1]


def history(
    events: Events,
    applicable: DataFrame,
    old: DataFrame,
    remembered: DataFrame,
    *,
    image: list[str],
    start: str,
    end: str,
    fold: bool,
) -> tuple[DataFrame, DataFrame]:
    """(the touched keys' history rows: keys, ``image``, start, end; per touched key its
    greatest event: keys, SEQ, DELETE, HASH and the history columns of the state).

    ``old``: the target rows of touched keys; ``remembered``: keys, ``__seq`` and DELETE of the
    events the state remembers (tombstones, deletes, merged upserts; see ``remembered``);
    ``image``: the target's columns besides keys and validity."""
    keys = list(events.keys)
    nulls = {c: F.lit(None).cast(old.schema[c].dataType) for c in image}

    def shaped(df: DataFrame, values: dict[str, Column], seq: Column, delete: bool) -> DataFrame:
        return df.select(
            *[F.col(quoted(k)) for k in keys],
            *[values.get(c, nulls[c]).alias(c) for c in image],
            seq.alias(SEQ),
            F.lit(delete).alias(DELETE),
        )

    given = {c: F.col(quoted(c)) for c in events.values}
    old_values = {c: F.col(quoted(c)) for c in image}
    by_key = Window.partitionBy(*[quoted(k) for k in keys])
    next_start = F.lead(F.col(quoted(start))).over(by_key.orderBy(F.col(quoted(start))))
    nxt = F.col("_cl_next")
    closed = old.withColumn("_cl_next", next_start).where(
        F.col(quoted(end)).isNotNull() & (nxt.isNull() | (nxt != F.col(quoted(end))))
    )
    merged = _merged_upserts(old, remembered.where(~F.col(DELETE)), keys, image, start, end)
    everything = functools_union(
        [
            shaped(applicable.where(~F.col(DELETE)), given, F.col(SEQ), False),
            shaped(applicable.where(F.col(DELETE)), {}, F.col(SEQ), True),
            shaped(old, old_values, F.col(quoted(start)), False),
            shaped(merged, old_values, F.col(SEQ), False),
            shaped(closed, {}, F.col(quoted(end)), True),
            shaped(remembered.where(F.col(DELETE)), {}, F.col(STATE_SEQ), True),
        ]
    )
    hashed = [F.col(quoted(c)) for c in events.values]
    everything = everything.withColumn(
        HASH, F.when(F.col(DELETE), F.lit(0).cast("bigint")).otherwise(value_hash(hashed))
    )
    per_seq = Window.partitionBy(*[quoted(k) for k in keys], SEQ).orderBy(
        F.col(DELETE).desc(), F.col(HASH).desc()
    )
    one = everything.withColumn("_cl_n", F.row_number().over(per_seq)).where(F.col("_cl_n") == 1)
    ordered = by_key.orderBy(SEQ)
    carried = [c for c in image if fold or c not in events.values]
    if carried:
        segment = F.sum(F.col(DELETE).cast("int")).over(
            ordered.rowsBetween(Window.unboundedPreceding, 0)
        )
        one = one.withColumn("_cl_segment", segment)
        in_segment = Window.partitionBy(*[quoted(k) for k in keys], "_cl_segment").orderBy(SEQ)
        running = in_segment.rowsBetween(Window.unboundedPreceding, 0)
        one = one.select(
            *[
                F.last(F.col(quoted(c)), ignorenulls=True).over(running).alias(c)
                if c in carried
                else F.col(quoted(c))
                for c in (*keys, *image)
            ],
            SEQ,
            DELETE,
            HASH,
        )
    previous_delete = F.lag(F.col(DELETE)).over(ordered)
    same = F.lit(True)
    for c in image:
        same = same & F.lag(F.col(quoted(c))).over(ordered).eqNullSafe(F.col(quoted(c)))
    after_upsert = F.coalesce(~previous_delete, F.lit(False))
    keep = F.when(F.col(DELETE), after_upsert).otherwise(~(after_upsert & same))
    one = one.withColumn("_cl_keep", keep)
    greatest = _greatest(one, keys)
    kept = one.where(F.col("_cl_keep"))
    rows = kept.withColumn("_cl_end", F.lead(F.col(SEQ)).over(ordered)).where(~F.col(DELETE))
    rows = rows.select(
        *[F.col(quoted(c)) for c in (*keys, *image)],
        F.col(SEQ).alias(start),
        F.col("_cl_end").alias(end),
    )
    return rows, greatest


def _merged_upserts(
    old: DataFrame, merged: DataFrame, keys: list[str], image: list[str], start: str, end: str
) -> DataFrame:
    """The remembered merged upserts (keys, ``__seq``) as keys, ``image`` and SEQ: each with the
    values of the old row it was merged into (the row starting last before it, if it has not
    ended); one no old row holds (the target was written by other statements) is dropped."""
    row = F.struct(*[F.col(quoted(c)) for c in image], F.col(quoted(end)).alias("_cl_end"))
    starts = old.select(
        *[F.col(quoted(k)) for k in keys], F.col(quoted(start)).alias(SEQ), row.alias("_cl_row")
    )
    no_row = F.lit(None).cast(starts.schema["_cl_row"].dataType)
    inside = merged.select(
        *[F.col(quoted(k)) for k in keys], F.col(STATE_SEQ).alias(SEQ), no_row.alias("_cl_row")
    )
    by_key = Window.partitionBy(*[quoted(k) for k in keys]).orderBy(SEQ, F.col("_cl_row").isNull())
    holder = F.last(F.col("_cl_row"), ignorenulls=True).over(
        by_key.rowsBetween(Window.unboundedPreceding, 0)
    )
    both = starts.unionByName(inside).withColumn("_cl_holder", holder)
    held = (
        F.col("_cl_row").isNull()
        & F.col("_cl_holder").isNotNull()
        & (F.col("_cl_holder._cl_end").isNull() | (F.col(SEQ) < F.col("_cl_holder._cl_end")))
    )
    return both.where(held).select(
        *[F.col(quoted(k)) for k in keys],
        *[F.col("_cl_holder")[c].alias(c) for c in image],
        SEQ,
    )


def functools_union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def _greatest(df: DataFrame, keys: list[str]) -> DataFrame:
    """Per key the greatest event, and for the state (as JSON) the sequence of every delete
    and of every upsert merged into the open row (not kept)."""
    by_key = Window.partitionBy(*[quoted(k) for k in keys])
    order = by_key.orderBy(F.col(SEQ).desc(), F.col(DELETE).desc(), F.col(HASH).desc())
    whole = order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)

    def recorded(which: Column, name: str) -> Column:
        seqs = F.array_sort(F.collect_set(F.when(which, F.col(SEQ))).over(whole))
        return F.when(F.size(seqs) > 0, F.to_json(seqs)).alias(name)

    ranked = df.select(
        "*",
        F.row_number().over(order).alias("_cl_g"),
        recorded(F.col(DELETE), STATE_DELETES),
        recorded(~F.col(DELETE) & ~F.col("_cl_keep"), STATE_MERGED),
    )
    out = ranked.where(F.col("_cl_g") == 1)
    return out.select(*[F.col(quoted(k)) for k in keys], SEQ, DELETE, HASH, *HISTORY_COLUMNS)


def target_found(
    rows: DataFrame,
    old: DataFrame,
    into: Target,
    *,
    keys: list[str],
    image: list[str],
    start: str,
    end: str,
) -> DataFrame:
    """Phase 1 of the target write: the new history rows against the old ones, by key and
    ``start``: new rows are inserted, changed ones updated, missing ones deleted."""
    o = old.select(
        *[F.col(quoted(c)).alias(f"_o_{i}") for i, c in enumerate((*keys, start, end, *image))],
        *ADDRESS,
    )
    names = (*keys, start, end, *image)
    on = [rows[quoted(c)] == o[f"_o_{i}"] for i, c in enumerate((*keys, start))]
    joined = rows.join(o, on, "full_outer")
    same = F.lit(True)
    for i, c in enumerate(names):
        same = same & F.col(quoted(c)).eqNullSafe(F.col(f"_o_{i}"))
    is_new = F.col(quoted(start)).isNotNull()
    matched = F.col(FILE).isNotNull()
    action = (
        F.when(~is_new, F.lit(REMOVE)).when(~matched, F.lit(INSERT)).when(~same, F.lit(REPLACE))
    )
    values = {c: F.col(quoted(c)) for c in names}
    return joined.select(action.alias(WRITE_ACTION), *ADDRESS, *found_columns(into, values)).where(
        F.col(WRITE_ACTION).isNotNull()
    )


def remembered(state: DataFrame, expired: Column, touched: DataFrame, keys: list[str]) -> DataFrame:
    """Keys, ``__seq`` and DELETE of the events the state remembers for the touched keys: live
    tombstones, recorded deletes, and upserts merged into an open row."""
    mine = state.where(~expired).join(touched, keys, "left_semi")
    seqs = ArrayType(mine.schema[STATE_SEQ].dataType)
    key_columns = [F.col(quoted(k)) for k in keys]
    tombstones = mine.where(F.col(STATE_DELETED)).select(
        *key_columns, F.col(STATE_SEQ), F.lit(True).alias(DELETE)
    )
    lists = [
        mine.select(
            *key_columns,
            F.explode(F.from_json(F.col(column), seqs)).alias(STATE_SEQ),
            F.lit(delete).alias(DELETE),
        )
        for column, delete in ((STATE_DELETES, True), (STATE_MERGED, False))
    ]
    return functools_union([tombstones, *lists])
