"""A minimum delta applied to a table whose rows carry a row key (a dynamic table's, an
external table's), matched by ROW_ID (the key).

The delta has the table's visible columns, METADATA$ACTION, METADATA$ISUPDATE and
METADATA$ROW_ID, at most one DELETE and one INSERT per ROW_ID (the minimum delta of the query, or
of the stored rows against the query's result). A DELETE removes the stored row with that key (a
deletion-vector entry with its before-image, as DML writes); an INSERT writes a row with that key,
and when it pairs with a DELETE (an update) it keeps the deleted row's identity, so the table's own
changes show an update. A DELETE's before-image is its own values (a minimum delta's DELETE
holds the row as stored) with the stored row's identity.

A delta computed against the stored rows (a maintained aggregate's, a FULL refresh's diff)
carries their addresses and identities; another (a view's changes) is joined to the stored rows'
keys and hidden columns in its own plan. Either way the delta is one plan, planned with the
columns its files take: a small one applied in one pass (one job whose task writes the new rows
and the DV and counts the events), a large one by a write of its new rows that also counts its
events (``DataFrame.observe``) and, if it deletes, a write of the DV: no count job before the
writes, no second read of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType

from changelake.catalog.model import DataFile, NewDeletes
from changelake.catalog.writes import TableWrite, WriteKind
from changelake.changes.columns import METADATA_ACTION, METADATA_ISUPDATE, METADATA_ROW_ID
from changelake.changes.scan import PAIR_EVENTS
from changelake.dml.common import (
    SMALL_INPUT_ROWS,
    Target,
    small_input,
    split_deletes,
)
from changelake.dml.matches import persisted
from changelake.errors import ConflictError
from changelake.schema import KEY_HASHES, ROW_KEY, key_hashes, quoted
from changelake.spark import native
from changelake.spark.observed import Counted
from changelake.spark.relation import Relation
from changelake.storage.deletion import counted as counted_positions
from changelake.storage.footers import describe_files
from changelake.storage.index import index_files, stored_positions
from changelake.storage.snapshot import (
    ADDRESS,
    FILE,
    IDENTITY,
    RID,
    key_hashed,
    spark_type,
    state_relation,
)
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import data_columns, dv_columns, run_checked
from changelake.txn.snapshot import TableState

_KEY = "_cl_dkey"
# Up to this many changed source rows a large table's stored rows are found by a lookup
LOOKUP_ROWS = 1_000_000
# a stored row's address and identity, on the events of a delta computed against stored rows
STORED = (*ADDRESS, *IDENTITY)
# the STORED columns of an event no stored row has (a new key's INSERT)
_NONE_STORED = tuple(
    f"CAST(NULL AS {t}) AS {c}"
    for c, t in zip(STORED, ("STRING", "BIGINT", "BIGINT", "BIGINT", "BIGINT"), strict=True)
)


def apply_delta(
    spark: SparkSession,
    warehouse: Warehouse,
    target: Target,
    delta: Relation,
    *,
    statement_id: str,
    changed: Callable[[], int] | None = None,
    inserts_only: bool = False,
    typed: bool = False,
) -> TableWrite:
    """Write what turns ``target``'s rows into the rows ``delta`` leads to (files, DV files).

    A delta computed against the stored rows themselves (a maintained aggregate, a FULL
    refresh's diff) carries each stored row's address and identity (``STORED``) on its events;
    another is joined to the stored rows by key in its own plan, reading only their key and
    hidden columns. A small delta's new rows and DV are written by one job that counts the
    events; a large one's new rows first, the events counted by kind in that job, then a DV
    file only if there are deletes, its positions counted from the file. A delta is one plan,
    run by one or two jobs. A delta with ``UNRESOLVED`` events raises ``Unresolved`` once they
    are counted, the files it wrote deleted.

    ``changed``: how to learn about how many rows the delta's sources changed (an update
    counted twice), if known; asked only of a delta without addresses. Up to ``LOOKUP_ROWS``
    of them, a stored table larger than one task reads, or one with a key index, finds the
    delta's stored rows by a lookup: the delta (computed once) sends its keys to the index
    (``storage.index``: the pages that may hold them, then a late read of the rows found) or
    to a scan of the stored keys, which sends back the rows they name, so the table is not
    shuffled (two broadcasts).

    ``inserts_only``: the delta is known to hold only INSERTs of keys the table does not hold
    (a view that only gains rows, over versions that only added rows): no stored row is read.
    ``typed``: the delta's columns have the table's types (an incremental refresh's: the query
    and the table were defined together), so the columns written are planned with it."""
    rel, lookup = delta, False
    with ExitStack() as stack:
        if inserts_only:
            rel = delta.select("*", *_NONE_STORED)
        elif not all(c in delta.columns for c in STORED):
            # an index finds few rows in any table; without one, a small table is read whole
            large = any(f.file.index for f in target.state.files) or not small_input(target)
            lookup = changed is not None and large and changed() <= LOOKUP_ROWS
            if lookup:  # read twice (its keys, its events): computed once
                rel = Relation.of_frame(stack.enter_context(persisted(delta.frame(spark))))
            rel = _addressed(spark, warehouse, target, rel, lookup=lookup)
        # a lookup's joins are broadcasts and it shuffles nothing: four jobs (the delta and
        # its keys, the stored rows found, the write, the DV), not a job per adaptive stage
        return _applied(
            spark,
            warehouse,
            target,
            rel,
            statement_id=statement_id,
            adaptive=not lookup,
            typed=typed,
        )


def _applied(
    spark: SparkSession,
    warehouse: Warehouse,
    target: Target,
    rel: Relation,
    *,
    statement_id: str,
    adaptive: bool = True,
    typed: bool = False,
) -> TableWrite:
    """``apply_delta`` of ``rel``, a delta whose events carry their stored rows' addresses
    (``adaptive``: see ``Relation.frame``; ``typed``: see ``apply_delta``), planned once with
    the columns its files take (``_event_columns``). A small plan is applied in one pass (one
    job: ``native.write_events``); another by a write of its new rows that counts its events,
    then a write of its deletes."""
    schema = target.state.schema
    if typed:  # the columns written planned with the delta: one plan, analysed once
        types = {c.name: spark_type(c.type) for c in schema.columns if c.name in rel.columns}
        key = schema.column(ROW_KEY, table=target.info.name)
        types[METADATA_ROW_ID] = spark_type(key.type)
        events = rel.select(*_event_columns(target, types)).frame(spark, adaptive=adaptive)
    else:
        frame = rel.frame(spark, adaptive=adaptive)
        types = {f.name: f.dataType for f in frame.schema.fields}
        events = native.select(frame, _event_columns(target, types))
    data_dir, dv_dir = warehouse.data_dir(statement_id), warehouse.dv_dir(statement_id)
    written = run_checked(
        lambda: native.write_events(events, warehouse.uri(data_dir), warehouse.uri(dv_dir)),
        table=target.info.name,
    )
    if written is not None:
        counts, deleted = written.counts, written.deleted
    else:
        counts, deleted = _in_two_writes(warehouse, target, events, data_dir, dv_dir)
    if counts["unresolved"]:
        for directory in (data_dir, dv_dir):
            for path, _ in warehouse.list_parquet(directory):
                warehouse.fs.delete_file(warehouse.fs_path(path))
        raise Unresolved(counts["unresolved"])
    added = index_files(spark, warehouse, describe_files(warehouse, data_dir), directory=data_dir)
    removed: tuple[str, ...] = ()
    deletes: tuple[NewDeletes, ...] = ()
    if counts["deleting"]:
        dv_files = describe_files(warehouse, dv_dir)
        by_name = {
            file: NewDeletes(file_path="", dv_path=dv_files[0].path, row_count=n)
            for file, n in deleted.items()
        }
        removed, deletes, found = split_deletes(target.state, by_name)
        if found != counts["deleting"]:
            raise _not_held(target, f"{counts['deleting']} to delete, {found} found")
    return _change(target, tuple(added), removed, deletes, counts)


def _in_two_writes(
    warehouse: Warehouse, target: Target, events: DataFrame, data_dir: str, dv_dir: str
) -> tuple[dict[str, int], dict[str, int]]:
    """The ``events`` (``_event_columns``) of a large plan written to ``data_dir`` (the new
    rows, the events counted by kind in that job) and, if there are deletes, to ``dv_dir`` (one
    DV file, its positions counted from it); (counts, positions per data file name)."""
    counted = Counted(events, _KINDS)
    with persisted(counted.frame) as changes:
        _write_new_rows(warehouse, target, changes, data_dir)
        counts = counted.counts()
        if not counts["deleting"] or counts["unresolved"]:
            return counts, {}
        gone = native.select(changes.where("_v IS NOT NULL"), ["_v.*"])
        # the events are materialized by now: few deletes are written by one task
        one = gone.coalesce(1) if counts["deleting"] <= SMALL_INPUT_ROWS else gone.repartition(1)
        run_checked(
            lambda: native.write_parquet(one, warehouse.uri(dv_dir)), table=target.info.name
        )
    dv_files = describe_files(warehouse, dv_dir)
    if not dv_files:
        return counts, {}
    return counts, counted_positions(events.sparkSession, warehouse, dv_files[0].path)[0]


def _write_new_rows(
    warehouse: Warehouse, target: Target, changes: DataFrame, directory: str
) -> None:
    """The new rows of the ``changes`` (``_event_columns``) written to ``directory``: one file
    from a small plan."""
    rows = native.select(changes.where("_d IS NOT NULL"), ["_d.*"])
    run_checked(
        lambda: native.write_parquet(rows, warehouse.uri(directory), one_file_if_small=True),
        table=target.info.name,
    )


def _change(
    target: Target,
    added: tuple[DataFile, ...],
    removed: tuple[str, ...],
    deletes: tuple[NewDeletes, ...],
    counts: dict[str, int],
) -> TableWrite:
    """The write of a delta to ``target``, its rows counted by kind from its events."""
    return TableWrite(
        target.info.table_id,
        target.info.name,
        target.state.version,
        WriteKind.CHANGE,
        added=added,
        removed=removed,
        deletes=deletes,
        inserted=counts["inserting"] - counts["updating"],
        updated=counts["updating"],
        deleted=counts["deleting"] - counts["updated_away"],
    )


def _event_columns(target: Target, types: Mapping[str, DataType]) -> list[str]:
    """The columns ``native.write_events`` takes, as SQL over a delta whose columns have
    ``types`` (by name; a column of the table the delta lacks is written NULL)."""
    schema, name = target.state.schema, target.info.name
    values = [
        (quoted(c.name), types[c.name])
        if c.name in types
        else (f"CAST(NULL AS {c.type})", spark_type(c.type))
        for c in schema.stored
    ]
    values.append((quoted(METADATA_ROW_ID), types[METADATA_ROW_ID]))
    data = data_columns(values, schema, table=name, row_id=RID)
    images = schema if target.info.before_images() else None
    dv = dv_columns(images, {ROW_KEY: quoted(METADATA_ROW_ID)})
    return [
        f"CASE {_ACTION} WHEN 'INSERT' THEN 0 WHEN 'DELETE' THEN 1"
        f" WHEN '{UNRESOLVED}' THEN 2 ELSE 3 END AS _k",
        f"{_ISUPDATE} AS _u",
        f"CASE WHEN {_ACTION} = 'INSERT' THEN struct({', '.join(data)}) END AS _d",
        f"CASE WHEN {_ACTION} = 'DELETE' AND {FILE} IS NOT NULL"
        f" THEN struct({', '.join(dv)}) END AS _v",
    ]


_ACTION, _ISUPDATE = quoted(METADATA_ACTION), quoted(METADATA_ISUPDATE)
# An event a delta could not compute in its plan (a group whose extreme was deleted): the
# delta stands for nothing then, and its maker computes it otherwise (``Unresolved``).
UNRESOLVED = "UNRESOLVED"
# the events of a delta (``_event_columns``), counted by kind while its new rows are written
_KINDS = {
    "unresolved": "_k = 2",
    "deleting": "_k = 1",
    "updated_away": "_k = 1 AND _u",
    "inserting": "_k = 0",
    "updating": "_k = 0 AND _u",
}


class Unresolved(Exception):
    """A delta held events its plan could not compute (``UNRESOLVED``): nothing was kept of its
    write. Not an error: the delta's maker computes them another way (``args[0]``: how many)."""


def _addressed(
    spark: SparkSession, warehouse: Warehouse, target: Target, delta: Relation, *, lookup: bool
) -> Relation:
    """``delta`` with the address and identity of the stored row of its key on each DELETE and
    each update's INSERT (NULL where no stored row has the key: a DELETE then finds nothing);
    with ``lookup``, by broadcasting the delta's keys to the stored keys and the rows found back
    (see ``apply_delta``), matched by the keys' ``KEY_HASHES`` where every file holds them."""
    state = target.state
    hashed = lookup and key_hashed(state.files)
    lacking = [c.name for c in state.schema.stored if c.name not in delta.columns]
    # what a key is matched by: its hashes, stored beside it, or itself
    matched: Callable[[str], list[str]] = key_hashes if hashed else lambda key: [key]
    stored_keys = [quoted(n) for n, _, _ in KEY_HASHES] if hashed else [quoted(ROW_KEY)]
    kept = [*_named(stored_keys), *STORED, *map(quoted, lacking)]
    paired = f"(_l.{_ACTION} = 'DELETE' OR _l.{_ISUPDATE})"
    wanted = delta.where(paired.replace("_l.", "")).select(
        *_named(matched(quoted(METADATA_ROW_ID)))
    )
    same = " AND ".join(f"_l.{_KEY}{i} = _r.{_KEY}{i}" for i in range(len(stored_keys)))
    found = _by_index(spark, warehouse, state, wanted) if hashed else None
    if found is not None:  # the indexed files' rows found, the others' keys read whole
        positions, rest = found
        keys = state_relation(
            spark, warehouse, state, identity=True, key_hashes=True, only=positions
        ).select(*kept)
        others = state_relation(spark, warehouse, rest, identity=True, key_hashes=True)
        keys = keys.union(
            others.select(*kept).join(wanted, same, "left_semi", hint="BROADCAST(_r)")
        )
    else:
        stored = state_relation(spark, warehouse, state, identity=True, key_hashes=hashed)
        keys = stored.select(*kept)
        if lookup:
            keys = keys.join(wanted, same, "left_semi", hint="BROADCAST(_r)")
    columns = [f"_l.{quoted(c)}" for c in delta.columns]
    columns += [f"CASE WHEN {paired} THEN _r.{c} END AS {c}" for c in STORED]
    # a state column the delta lacks: a DELETE's before-image takes the stored value
    columns += [
        f"CASE WHEN _l.{_ACTION} = 'DELETE' THEN _r.{quoted(c)} END AS {quoted(c)}" for c in lacking
    ]
    own = matched(f"_l.{quoted(METADATA_ROW_ID)}")
    on = " AND ".join(f"{v} = _r.{_KEY}{i}" for i, v in enumerate(own))
    return delta.join(keys, on, "left", columns=columns, hint="BROADCAST(_r)" if lookup else "")


def _by_index(
    spark: SparkSession, warehouse: Warehouse, state: TableState, wanted: Relation
) -> tuple[dict[str, pa.Array], TableState] | None:
    """Where the rows of ``wanted``'s keys (their hashes as ``_named`` columns) are in the
    files of ``state`` that have an index (data file name -> live positions), and ``state``
    with its other files; None if no file has one or the index cannot answer."""
    indexed = [f for f in state.files if f.file.index is not None]
    if not indexed:
        return None
    hashes = wanted.select(f"{_KEY}0 AS {KEY_HASHES[0][0]}").frame(spark)
    positions = stored_positions(spark, warehouse, indexed, hashes.toArrow(), hashes)
    if positions is None:
        return None
    return positions, state.with_files([f for f in state.files if f.file.index is None])


def _named(keys: list[str]) -> list[str]:
    return [f"{k} AS {_KEY}{i}" for i, k in enumerate(keys)]


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


def diff(
    stored: Relation, rows: Relation, names: list[str], carried: tuple[str, ...] = ()
) -> Relation:
    """The minimum delta from ``stored`` (with the row key) to ``rows`` (with METADATA$ROW_ID),
    matched by ROW_ID: a key in both with other values is an update pair. Both events of a
    stored row keep its ``carried`` columns (its address and identity: see ``apply_delta``);
    a new key has them NULL."""
    values = f"struct({', '.join(quoted(n) for n in names)})"
    old = stored.select(f"{quoted(ROW_KEY)} AS _k", f"{values} AS _b", *carried)
    new = rows.select(f"{quoted(METADATA_ROW_ID)} AS _k", f"{values} AS _a")
    changed = Relation.query(
        f"SELECT _k, {PAIR_EVENTS} AS _e{''.join(f', {c}' for c in carried)}"
        " FROM {old} AS _o FULL OUTER JOIN {new} AS _n USING (_k) WHERE NOT (_b <=> _a)",
        ["_k", "_e", *carried],
        old=old,
        new=new,
    )
    return changed.where("_e IS NOT NULL").select(
        *[f"_e.v.{quoted(n)} AS {quoted(n)}" for n in names],
        f"_e.a AS {_ACTION}",
        f"_e.u AS {_ISUPDATE}",
        f"_k AS {quoted(METADATA_ROW_ID)}",
        *carried,
    )
