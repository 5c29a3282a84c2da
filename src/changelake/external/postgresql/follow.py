"""Following a PostgreSQL external table: the source transactions committed after the table's
source position, applied as one changelake commit, keyed by the source key.

One follow step: peek the slot (whole transactions, up to a batch of changes), skip what the
table's position already holds, fold the rest into each key's final state (a row, or gone; a
TRUNCATE empties what came before), stage those states as one Parquet file, and apply them to the
stored rows by row key (``dml.keyed``): a key whose row changed is an update pair, a row that left
the scope a delete. The commit carries the new position and requires the old one
(``FollowedFrom``), so two followers cannot both apply a batch; the slot is advanced only after
the commit. A crash between the two leaves the slot behind, and the next step skips what is
already committed: nothing is lost or applied twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from changelake.arrow_types import arrow_type
from changelake.catalog.alters import AlterExternalTable
from changelake.catalog.model import ConnectionInfo, ExternalTableInfo, ExternalTableState
from changelake.catalog.requests import (
    CommitRequest,
    FollowedFrom,
    Requirement,
)
from changelake.catalog.store import Catalog
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.changes.columns import METADATA_ACTION, METADATA_ISUPDATE, METADATA_ROW_ID
from changelake.clock import Clock
from changelake.dml.common import Target
from changelake.dml.keyed import STORED, apply_delta, diff
from changelake.errors import SourceChangedError, SourceError
from changelake.external.postgresql import postgres, replication
from changelake.external.postgresql.pgoutput import (
    UNCHANGED,
    Change,
    Decoder,
    Relation,
    Transaction,
    Truncate,
    format_lsn,
    parse_lsn,
)
from changelake.external.postgresql.pgtypes import converter
from changelake.external.rows import row_key_sql
from changelake.schema import ROW_KEY, quoted
from changelake.storage.env import Env
from changelake.storage.jobs import counted_jobs
from changelake.storage.local import sql_literal
from changelake.storage.relation import Relation as Plan  # pgoutput's Relation is a table
from changelake.storage.snapshot import FILE, state_relation
from changelake.storage.warehouse import Warehouse
from changelake.txn.context import new_statement_id
from changelake.txn.snapshot import TableState

OPERATION = "FOLLOW"
BATCH_CHANGES = 50_000  # per step; a step always takes whole transactions
_GONE, _KEEP, _FROM, _STAGED = "_cl_gone", "_cl_keep", "_cl_from_", "-staged"


@dataclass(frozen=True)
class Followed:
    """What one follow step did."""

    transactions: int = 0
    changes: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    source_lsn: str | None = None  # a PostgreSQL table's source position after the step
    files_registered: int | None = None  # a FILES table's count of registered files after it
    version: int | None = None
    more: bool = False  # the step stopped at its batch size with more waiting
    spark_jobs: int = 0


class FoldedRow(NamedTuple):
    """A source key's final row."""

    values: dict[str, object]  # by column
    keep: frozenset[str]  # the columns to keep as stored (values the source did not send)
    stored_key: tuple  # the key of the stored row that has them


@dataclass
class Folded:
    """Per source key, the final row or None (gone); ``truncated``: the source table was emptied
    before these."""

    rows: dict[tuple, FoldedRow | None] = field(default_factory=dict)
    truncated: bool = False
    changes: int = 0


def follow(
    env: Env,
    ext: ExternalTableInfo,
    *,
    batch: int = BATCH_CHANGES,
    requirements: Sequence[Requirement] = (),
    until: int | None = None,
) -> Followed:
    """One follow step of ``ext``: apply what its slot holds past its position, up to ``batch``
    changes (whole transactions), and commit it; then let the slot forget it. With ``until``
    (an LSN), a step that finds nothing new but a source flushed past ``until`` moves the
    position there (no transaction ending by it is left to apply)."""
    d = ext.definition
    info = _connection(env.catalog, ext)
    assert d.slot is not None and d.publication is not None and ext.position is not None
    with postgres.connect(info) as conn:
        try:
            horizon = replication.flushed(conn)  # what the peek sees at least
            messages = replication.peek(conn, d.slot, d.publication, changes=batch)
        except psycopg.Error as e:
            gone = isinstance(e, psycopg.errors.UndefinedObject)
            raise (SourceChangedError if gone else SourceError)(
                f"External table {ext.name}: cannot read replication slot {d.slot} on connection"
                f" {info.name} ({str(e).strip()})."
                + (
                    f" The slot was dropped on the source: recreate the table (CREATE OR REPLACE"
                    f" EXTERNAL TABLE {ext.name} …)."
                    if gone
                    else " The next follow tries again."
                )
            ) from e
        start = parse_lsn(ext.position)
        full = len(messages) >= batch  # the peek stopped at the batch: more is waiting
        transactions = [t for t in Decoder().feed(messages) if t.end_lsn > start]
        if not transactions:
            _check_source(conn, ext)
        if transactions:
            end = format_lsn(transactions[-1].end_lsn)
        elif until is not None and start < until <= horizon:
            end = format_lsn(until)
        else:
            if messages:  # a crash after the last commit left the slot behind it
                replication.advance(conn, d.slot, ext.position)
            return Followed(source_lsn=ext.position, more=full)
        folded = fold(ext, transactions)
        statement_id = new_statement_id()
        state = table_state(env.catalog, ext)
        table_id, name = ext.table_id, ext.name
        applied, jobs = TableWrite(table_id, name, state.version, WriteKind.CHANGE), 0
        if folded.rows or folded.truncated:
            with counted_jobs(env.spark, f"follow of external table {ext.name}") as count:
                applied = apply_folded(
                    env.spark, env.warehouse, ext, state, folded, statement_id, keep=ext.scope
                )
                jobs = count()
        moved = AlterExternalTable(table_id, position=end, followed_at=env.clock.now())
        request = write_request(
            statement_id,
            OPERATION,
            [applied],
            updates=(moved,),
            requirements=(*requirements, FollowedFrom(table_id, name, ext.position, ext.scope)),
        )
        result = env.catalog.commit([request], clock=env.clock)
        if transactions:
            replication.advance(conn, d.slot, end)
    return Followed(
        transactions=len(transactions),
        changes=folded.changes,
        inserted=applied.inserted,
        updated=applied.updated,
        deleted=applied.deleted,
        source_lsn=end,
        version=result.version_of(table_id),
        more=full,
        spark_jobs=jobs,
    )


def _check_source(conn: psycopg.Connection, ext: ExternalTableInfo) -> None:
    """A quiet slot may mean a dropped source table: say so rather than wait for ever."""
    oid = ext.definition.spec.get("source_oid")
    found = conn.execute("SELECT 1 FROM pg_class WHERE oid = %s", (oid,)).fetchone()
    if oid is not None and found is None:
        raise SourceChangedError(
            f"External table {ext.name}: source table {ext.definition.source} was dropped; its"
            f" rows are as of position {ext.position}. DROP EXTERNAL TABLE {ext.name}, or"
            " recreate it (CREATE OR REPLACE EXTERNAL TABLE …) once the source is back."
        )


def _connection(catalog: Catalog, ext: ExternalTableInfo) -> ConnectionInfo:
    name = ext.definition.connection or ""
    info = catalog.find_connection(name)
    if info is None:
        raise SourceError(f"External table {ext.name}: its connection {name} does not exist.")
    return info


def table_state(catalog: Catalog, ext: ExternalTableInfo) -> TableState:
    version = ext.info.current_version
    return TableState(
        ext.table_id,
        ext.name,
        version,
        catalog.schema_at(ext.table_id, version),
        tuple(catalog.snapshot_files(ext.table_id, version)),
    )


def _columns(ext: ExternalTableInfo) -> list[tuple[str, str]]:
    return [(n, t) for n, t in ext.definition.spec["columns"]]


def fold(ext: ExternalTableInfo, transactions: list[Transaction]) -> Folded:
    """Each source key's final state after ``transactions``."""
    columns = _columns(ext)
    keys = tuple(ext.definition.spec["keys"])
    convert = {n: converter(t) for n, t in columns}
    folded = Folded()
    checked: dict[int, dict[str, int]] = {}

    def positions(relation: Relation) -> dict[str, int]:
        if relation.oid not in checked:
            checked[relation.oid] = _positions(ext, relation, [n for n, _ in columns])
        return checked[relation.oid]

    def key_of(values: tuple, at: dict[str, int]) -> tuple:
        return tuple(convert[k](values[at[k]]) for k in keys)

    for transaction in transactions:
        for change in transaction.changes:
            if isinstance(change, Truncate):
                folded.rows.clear()
                folded.truncated = True
                continue
            folded.changes += 1
            at = positions(change.relation)
            if change.kind == "DELETE":
                assert change.old is not None
                folded.rows[key_of(change.old, at)] = None
                continue
            assert change.new is not None
            key = previous = key_of(change.new, at)
            if change.old is not None and (old_key := key_of(change.old, at)) != key:
                previous = old_key  # the row moved: what it held is under its old key
            _put(folded, key, previous, change, at, convert)
            if previous != key:
                folded.rows[previous] = None
    return folded


def _put(
    folded: Folded, key: tuple, previous: tuple, change: Change, at: dict[str, int], convert: dict
) -> None:
    """Record the change's row under ``key``; a TOASTed value it does not repeat comes from the
    row's state under ``previous`` in this batch, else from the stored row (the entry's last
    item names whose)."""
    assert change.new is not None
    before = folded.rows.get(previous)
    source = previous if before is None else before.stored_key
    values: dict[str, object] = {}
    keep: set[str] = set()
    for name, position in at.items():
        raw = change.new[position]
        if raw is UNCHANGED:
            if before is not None and name not in before.keep:
                values[name] = before.values[name]
            else:
                values[name] = None
                keep.add(name)
        else:
            values[name] = None if raw is None else convert[name](raw)
    folded.rows[key] = FoldedRow(values, frozenset(keep), source)


def _positions(ext: ExternalTableInfo, relation: Relation, names: list[str]) -> dict[str, int]:
    """Where each of the table's columns is in ``relation``'s tuples; SourceError if the source
    table no longer has them (or gained columns the table mirrors all of)."""
    found = {c.name.lower(): i for i, c in enumerate(relation.columns)}
    missing = [n for n in names if n not in found]
    added = [n for n in found if n not in names]
    if missing or (added and not ext.definition.spec.get("explicit_columns")):
        change = f"lost column(s) {', '.join(missing)}" if missing else ""
        if added:
            change += (" and " if change else "") + f"gained column(s) {', '.join(added)}"
        raise SourceChangedError(
            f"External table {ext.name}: source table {ext.definition.source} {change}; its"
            " changes are no longer applied. Recreate the table to follow the new columns"
            f" (CREATE OR REPLACE EXTERNAL TABLE {ext.name} …), or give it a column list of"
            " the columns it keeps."
        )
    return {n: found[n] for n in names}


def apply_folded(
    spark: SparkSession,
    warehouse: Warehouse,
    ext: ExternalTableInfo,
    state: TableState,
    folded: Folded,
    statement_id: str,
    *,
    keep: str | None,
    base: DataFrame | None = None,
    stored: str | None = None,
) -> TableWrite:
    """Write what turns the stored rows into the folded rows that satisfy ``keep`` (None:
    all), matched by row key. The stored rows compared are those of the folded keys (all, after
    a TRUNCATE) and those that satisfy ``stored``; ``base`` (rows of the table's columns) is
    what a key not folded holds (a bootstrap's snapshot)."""
    staged = _stage(warehouse, ext, folded, statement_id)
    try:
        delta = _delta(spark, warehouse, ext, state, folded, staged, keep, base, stored)
        target = Target(ext.info, state)
        return apply_delta(spark, warehouse, target, delta, statement_id=statement_id)
    finally:
        warehouse.fs.delete_dir(warehouse.fs_path(staged.rsplit("/", 1)[0]))


def _stage(warehouse: Warehouse, ext: ExternalTableInfo, folded: Folded, statement_id: str) -> str:
    """Write the folded rows as one Parquet file (their values, gone, the columns to keep)."""
    columns = _columns(ext)
    keys = ext.definition.spec["keys"]
    # a key that is gone keeps its key values (its row key finds the stored row)
    entries = [
        FoldedRow(dict(zip(keys, key, strict=True)), frozenset(), key) if e is None else e
        for key, e in folded.rows.items()
    ]
    gone = [e is None for e in folded.rows.values()]
    types = dict(columns)
    arrays = [pa.array([e.values.get(n) for e in entries], arrow_type(t)) for n, t in columns]
    arrays.append(pa.array(gone, pa.bool_()))
    arrays.append(pa.array([",".join(sorted(e.keep)) or None for e in entries], pa.string()))
    arrays += [
        pa.array([e.stored_key[i] for e in entries], arrow_type(types[k]))
        for i, k in enumerate(keys)
    ]
    names = [*(n for n, _ in columns), _GONE, _KEEP, *(_FROM + k for k in keys)]
    if not entries:  # a TRUNCATE alone: the schema, no rows
        arrays = [pa.array([], a.type) for a in arrays]
    # not in the statement's data directory: every file there becomes the table's
    directory = warehouse.data_dir(statement_id, _STAGED)
    path = f"{directory}/{uuid.uuid4().hex}.parquet"
    warehouse.fs.create_dir(warehouse.fs_path(directory), recursive=True)
    with warehouse.fs.open_output_stream(warehouse.fs_path(path)) as out:
        pq.write_table(pa.Table.from_arrays(arrays, names=names), out)
    return path


def _delta(
    spark: SparkSession,
    warehouse: Warehouse,
    ext: ExternalTableInfo,
    state: TableState,
    folded: Folded,
    staged: str,
    keep: str | None,
    base: DataFrame | None,
    stored_where: str | None,
) -> Plan:
    """The minimum delta (see ``apply_folded``), with the stored rows' addresses: one plan."""
    columns = _columns(ext)
    names = [n for n, _ in columns]
    types = dict(columns)
    keys = ext.definition.spec["keys"]
    # with its schema given, Spark runs no job to infer it from the file
    staged_schema = ", ".join(
        [
            *(f"{quoted(n)} {t}" for n, t in columns),
            f"{_GONE} boolean",
            f"{_KEEP} string",
            *(f"{quoted(_FROM + k)} {types[k]}" for k in keys),
        ]
    )
    staged_names = [*names, _GONE, _KEEP, *(_FROM + k for k in keys)]
    read = spark.read.schema(staged_schema).parquet(warehouse.uri(staged))
    key = row_key_sql(keys, types)
    new = Plan.of_frame(read, staged_names).select("*", f"{key} AS {quoted(ROW_KEY)}")
    stored = every = state_relation(spark, warehouse, state, identity=True)
    touched = new.select(f"{quoted(ROW_KEY)} AS _cl_k")
    by_key = f"_l.{quoted(ROW_KEY)} = _r._cl_k"
    if not folded.truncated and stored_where is None:
        stored = stored.join(touched, by_key, "left_semi")
    elif not folded.truncated:
        hit = stored.join(touched, by_key, "left", columns=[*_all("_l", stored), "_r._cl_k"])
        stored = hit.where(f"_cl_k IS NOT NULL OR coalesce({stored_where}, false)").drop("_cl_k")
    inserts = None
    values = [quoted(n) for n in names]
    if base is not None and not folded.truncated:
        # A key no transaction touched keeps its base row, and no stored row has that key: it
        # was outside the old scope at the snapshot and has not changed since. So it is a
        # plain insert, with no join against the stored rows.
        unfolded = Plan.of_frame(base, names).select(*values, f"{key} AS {quoted(ROW_KEY)}")
        unfolded = unfolded.join(touched, by_key, "left_anti")
        if keep is not None:
            unfolded = unfolded.where(f"coalesce({keep}, false)")
        inserts = unfolded.select(
            *values,
            f"'INSERT' AS {quoted(METADATA_ACTION)}",
            f"false AS {quoted(METADATA_ISUPDATE)}",
            f"{quoted(ROW_KEY)} AS {quoted(METADATA_ROW_ID)}",
            *[f"CAST(NULL AS {'string' if c == FILE else 'bigint'}) AS {c}" for c in STORED],
        )
    keeps = any(e is not None and e.keep for e in folded.rows.values())
    if keeps:  # values a change did not repeat: the stored row's (or the base row's)
        sources = every.select(quoted(ROW_KEY), *values)
        if base is not None:
            sources = sources.union(
                Plan.of_frame(base, names).select(f"{key} AS {quoted(ROW_KEY)}", *values)
            )
        old = sources.select(
            f"{quoted(ROW_KEY)} AS _cl_ok", *[f"{quoted(n)} AS {_old(n)}" for n in names]
        )
        kept = f"split(coalesce(_l.{_KEEP}, ''), ',')"
        new = new.join(
            old,
            f"{row_key_sql(keys, types, _FROM, table='_l')} = _r._cl_ok",
            "left",
            columns=[
                *[
                    f"CASE WHEN array_contains({kept}, {sql_literal(n)}) THEN _r.{_old(n)}"
                    f" ELSE _l.{quoted(n)} END AS {quoted(n)}"
                    for n in names
                ],
                f"_l.{_GONE}",
                f"_l.{quoted(ROW_KEY)}",
            ],
        )
    rows = new.where(f"NOT {_GONE}")
    if keep is not None:
        rows = rows.where(f"coalesce({keep}, false)")
    rows = rows.select(*values, f"{quoted(ROW_KEY)} AS {quoted(METADATA_ROW_ID)}")
    delta = diff(stored, rows, names, carried=STORED)
    return delta if inserts is None else delta.union(inserts)


def _all(alias: str, rel: Plan) -> list[str]:
    return [f"{alias}.{quoted(c)}" for c in rel.columns]


def _old(name: str) -> str:
    """The column a stored (or base) row's value of ``name`` is kept in."""
    return quoted(f"_cl_o_{name}")


def mark_failed(catalog: Catalog, clock: Clock, ext: ExternalTableInfo, error: str) -> None:
    """Stop following ``ext`` until it is resumed, with ``error`` for SHOW and DESCRIBE."""
    update = AlterExternalTable(ext.table_id, state=ExternalTableState.FAILED, error=error)
    catalog.commit([CommitRequest(new_statement_id(), "FOLLOW FAILED", (update,))], clock=clock)
