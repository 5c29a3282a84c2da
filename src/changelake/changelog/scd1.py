"""SCD TYPE 1: the target holds the current image per key.

Events are ordered per key by (sequence, delete before upsert, value hash): the greatest wins.
An event not greater than the state's last applied one for its key (a live tombstone included)
changes nothing, so old events arriving late and duplicates are ignored; equal sequences with
different values resolve the same way whatever the arrival order (a delete wins; between
upserts, the greater hash of the values). With IGNORE NULL UPDATES an upsert's NULL values keep
the current ones: within one apply the upserts of a key after its last delete are folded in
sequence order (latest non-NULL value per column), then NULLs keep the target's value.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from changelake.changelog.events import DELETE, HASH, SEQ, Events
from changelake.changelog.rewrite import (
    INSERT,
    NOTHING,
    REMOVE,
    REPLACE,
    UPDATE,
    WRITE_ACTION,
    found_columns,
)
from changelake.changelog.state import HISTORY_COLUMNS, STATE_DELETED, STATE_HASH, STATE_SEQ
from changelake.dml.common import Target
from changelake.dml.matches import new
from changelake.schema import quoted
from changelake.storage.snapshot import ADDRESS, FILE

FRESH = "_cl_fresh"  # the key's upserts follow a delete of this apply: no old values to keep


def newer(seq: Column, delete: Column, digest: Column, prefix: str) -> Column:
    """Whether an event is greater than the state row (columns ``prefix`` + state names) in
    the (sequence, delete, hash) order, or there is no state row."""
    s_seq, s_del, s_hash = (F.col(prefix + c) for c in (STATE_SEQ, STATE_DELETED, STATE_HASH))
    d, sd = delete.cast("int"), s_del.cast("int")
    return (
        s_seq.isNull()
        | (seq > s_seq)
        | ((seq == s_seq) & ((d > sd) | ((d == sd) & (digest > s_hash))))
    )


def against_state(events: Events, state: DataFrame | None) -> DataFrame:
    """The events greater than their key's state (``state``: keys and the state columns of the
    live rows; None when there is no state table yet)."""
    if state is None:
        return events.df.where(F.col(DELETE).isNotNull())
    s = state.select(
        *[F.col(quoted(k)).alias(f"_s_{i}") for i, k in enumerate(events.keys)],
        *[F.col(c).alias(f"_s{c}") for c in (STATE_SEQ, STATE_DELETED, STATE_HASH)],
    )
    df = events.df.where(F.col(DELETE).isNotNull())
    on = [df[quoted(k)] == s[f"_s_{i}"] for i, k in enumerate(events.keys)]
    joined = df.join(s, on, "left")
    keep = newer(F.col(SEQ), F.col(DELETE), F.col(HASH), "_s")
    return joined.where(keep).select(*[df[quoted(c)] for c in df.columns])


def winners(events: Events, applicable: DataFrame, *, fold: bool, fresh: bool) -> DataFrame:
    """Per key the greatest event (keys, values, SEQ, DELETE, HASH, FRESH); with ``fold``, its
    values folded over the key's upserts after its last delete. FRESH (the key was deleted by
    this apply) is only computed when ``fresh`` or ``fold`` asks for it, else False: it costs
    a second pass over each key's events."""
    by_key = Window.partitionBy(*[quoted(k) for k in events.keys])
    order = [F.col(SEQ).desc(), F.col(DELETE).desc(), F.col(HASH).desc()]
    if not (fresh or fold):
        ranked = applicable.withColumn("_cl_n", F.row_number().over(by_key.orderBy(*order)))
        return ranked.where(F.col("_cl_n") == 1).select(
            *[F.col(quoted(c)) for c in (*events.keys, *events.values)],
            SEQ,
            DELETE,
            HASH,
            F.lit(False).alias(FRESH),
        )
    df = applicable.withColumn(
        "_cl_last_del", F.max(F.when(F.col(DELETE), F.col(SEQ))).over(by_key)
    )
    fresh_key = F.col("_cl_last_del").isNotNull()
    if fold and events.values:
        after = ~F.col(DELETE) & (~fresh_key | (F.col(SEQ) > F.col("_cl_last_del")))
        ascending = by_key.orderBy(F.col(SEQ), F.col(DELETE), F.col(HASH)).rowsBetween(
            Window.unboundedPreceding, Window.unboundedFollowing
        )
        folded = {
            v: F.last(F.when(after, F.col(quoted(v))), ignorenulls=True).over(ascending)
            for v in events.values
        }
        df = df.select(
            *[F.col(quoted(k)) for k in events.keys],
            *[folded[v].alias(v) for v in events.values],
            SEQ,
            DELETE,
            HASH,
            "_cl_last_del",
        )
    ranked = df.withColumn("_cl_n", F.row_number().over(by_key.orderBy(*order)))
    return ranked.where(F.col("_cl_n") == 1).select(
        *[F.col(quoted(c)) for c in (*events.keys, *events.values)],
        SEQ,
        DELETE,
        HASH,
        fresh_key.alias(FRESH),
    )


def target_found(events: Events, won: DataFrame, target: DataFrame, into: Target) -> DataFrame:
    """Phase 1 of the target write: the winners joined to the target rows of their keys
    (``target``: keys and address columns), with their SEQ, DELETE and HASH for the state. A
    delete of a key the target does not hold has the action NOTHING: it only leaves a
    tombstone."""
    t = target.select(
        *[F.col(quoted(k)).alias(f"_t_{i}") for i, k in enumerate(events.keys)], *ADDRESS
    )
    on = [won[quoted(k)] == t[f"_t_{i}"] for i, k in enumerate(events.keys)]
    joined = won.join(t, on, "left")
    matched = F.col(FILE).isNotNull()
    action = (
        F.when(F.col(DELETE), F.when(matched, F.lit(REMOVE)).otherwise(F.lit(NOTHING)))
        .when(matched & F.col(FRESH), F.lit(REPLACE))
        .when(matched, F.lit(UPDATE))
        .otherwise(F.lit(INSERT))
    )
    values = {c: F.col(quoted(c)) for c in (*events.keys, *events.values)}
    return joined.select(
        action.alias(WRITE_ACTION), *ADDRESS, *found_columns(into, values), SEQ, DELETE, HASH
    )


def greatest(found: DataFrame, keys: tuple[str, ...], into: Target) -> DataFrame:
    """The state rows of the keys ``found`` (phase 1) holds: keys, SEQ, DELETE, HASH (and no
    recorded history: SCD TYPE 1 needs only the greatest event), once per key even where the
    target holds a key twice."""
    schema = into.state.schema
    columns = [F.col(new(schema.column(k, table=into.info.name).physical)).alias(k) for k in keys]
    history = [F.lit(None).cast("string").alias(c) for c in HISTORY_COLUMNS]
    return found.select(*columns, SEQ, DELETE, HASH, *history).dropDuplicates(list(keys))
