"""Following a PostgreSQL external table: the source transactions committed after the table's
source position, applied as one changelake commit, keyed by the source key.

One follow step: peek the slot (whole transactions, up to a batch of changes), skip what the
table's position already holds, fold the rest into each key's final state (a row, or gone; a
TRUNCATE empties what came before), stage those states as one Parquet file, and apply them to the
stored rows by row key (``applied``, ``dml.keyed``): a key whose row changed is an update pair, a
row that left the scope a delete. The commit carries the new position and requires the old one
(``FollowedFrom``), so two followers cannot both apply a batch; the slot is advanced only after
the commit. A crash between the two leaves the slot behind, and the next step skips what is
already committed: nothing is lost or applied twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from changelake.catalog.alters import AlterExternalTable
from changelake.catalog.model import ConnectionInfo, ExternalTableInfo, ExternalTableState
from changelake.catalog.requests import (
    CommitRequest,
    FollowedFrom,
    Requirement,
)
from changelake.catalog.store import Catalog
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.clock import Clock
from changelake.errors import SourceChangedError, SourceError
from changelake.external.postgresql import postgres, replication
from changelake.external.postgresql.applied import Folded, FoldedRow, apply_folded, columns_of
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
from changelake.runtime.env import Env
from changelake.spark.jobs import counted_jobs
from changelake.txn.context import new_statement_id
from changelake.txn.snapshot import TableState

OPERATION = "FOLLOW"
BATCH_CHANGES = 50_000  # per step; a step always takes whole transactions


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


def fold(ext: ExternalTableInfo, transactions: list[Transaction]) -> Folded:
    """Each source key's final state after ``transactions``."""
    columns = columns_of(ext)
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


def mark_failed(catalog: Catalog, clock: Clock, ext: ExternalTableInfo, error: str) -> None:
    """Stop following ``ext`` until it is resumed, with ``error`` for SHOW and DESCRIBE."""
    update = AlterExternalTable(ext.table_id, state=ExternalTableState.FAILED, error=error)
    catalog.commit([CommitRequest(new_statement_id(), "FOLLOW FAILED", (update,))], clock=clock)
