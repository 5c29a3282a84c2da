"""SCOPE = DEPENDENTS: an external table holds the rows its dependents can read, the OR of the
predicates their queries put on it (``plan.predicates``), and changing that scope
(bootstrapping a wider one, dropping rows a narrower one leaves out) at one consistent point.

A rescope from scope F to G, while the follow goes on:
1. a second slot (``<slot>_b``) exports a snapshot at its consistent point P; the rows of
   W = G AND NOT F in it are read by Spark JDBC partitions (W is in their query) whose tasks
   write them once, as the table's own data files, not committed; the follow goes on
   meanwhile, under F;
2. the table's follow is brought to a position Q at or past P (by anyone);
3. a fence: the table's state becomes RESCOPING at Q, and no other follow commits until
   step 4 does (``FollowedFrom`` refuses them; the scheduler skips the table);
4. one commit: the second slot's transactions (all of them, from P to its end E: a key they
   touch gets its state at E, whatever the region), over the snapshot's rows for the keys they
   do not touch (its files that hold none of those keys are committed as written), kept where
   they satisfy G; the stored rows of F AND NOT G deleted; the scope set to G, the position to
   E, the state back. Re-applying a transaction the follow applied already
   is harmless: every key's state is a whole row. The main slot is then advanced to E.
Then the table equals the source under G at E, and every later follow applies G. The second slot
is dropped at the end (and before a new rescope, if a crash left it); a crash inside the fence
leaves the table RESCOPING until ALTER EXTERNAL TABLE … RESUME.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterable

from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.catalog.alters import AlterExternalTable
from changelake.catalog.model import DataFile, ExternalTableInfo, ExternalTableState
from changelake.catalog.requests import (
    CommitRequest,
    FollowedFrom,
)
from changelake.catalog.store import Catalog
from changelake.catalog.writes import write_request
from changelake.clock import Clock
from changelake.dialect import parse_one
from changelake.errors import (
    ChangelakeError,
    ConflictError,
    ExternalTableError,
    SourceChangedError,
)
from changelake.external.postgresql import postgres, replication
from changelake.external.postgresql.applied import apply_folded
from changelake.external.postgresql.follow import Followed, fold, follow, table_state
from changelake.external.postgresql.pgoutput import Decoder, format_lsn, parse_lsn
from changelake.external.postgresql.pgtable import snapshot
from changelake.external.rows import stored_rows
from changelake.plan.implication import Types
from changelake.plan.predicates import (
    Predicate,
    implies,
    parse_scope,
    reference_predicate,
    scope_sql,
    union,
)
from changelake.runtime.env import Env
from changelake.schema import quoted
from changelake.spark.jobs import counted_jobs
from changelake.storage.writer import write_data
from changelake.txn.context import new_statement_id
from changelake.txn.snapshot import TableState

Scope = tuple[Predicate, ...] | None  # an OR of predicates; None: every row
_ATTEMPTS = 5
_CATCH_UP_SECONDS = 300.0


def references(sql_text: str, table: str, columns: Iterable[str]) -> list[Predicate]:
    """The predicates of the references to ``table`` in query ``sql_text``."""
    tree = parse_one(sql_text)
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names = list(columns)
    return [
        reference_predicate(t, names)
        for t in tree.find_all(exp.Table)
        if t.name.lower() == table and table not in ctes and not t.args.get("db")
    ]


def _columns(ext: ExternalTableInfo) -> list[str]:
    return [n for n, _ in ext.definition.spec["columns"]]


def dependents_scope(catalog: Catalog, ext: ExternalTableInfo) -> Scope:
    """The OR of what the dependents of ``ext`` read of it: views, dynamic tables, streams on
    views that name it (a stream on the table itself reads every row)."""
    if any(not s.on_view for s in catalog.list_streams(table_id=ext.table_id)):
        return None
    texts = [sql for _, sql, _ in catalog.list_views()]
    texts += [d.definition.sql for d in catalog.list_dynamic_tables()]
    texts += [s.view_definition for s in catalog.list_streams() if s.view_definition]
    found: list[Predicate] = []
    for text in texts:
        found += references(text, ext.name, _columns(ext))
    return union(found, types=ext.definition.column_types) if found else ()


def widen_for(env: Env, query: str) -> None:
    """Before a dependent with query ``query`` is created: widen the scope of every
    DEPENDENTS external table it names so that it holds what the query reads."""
    for ext in env.catalog.list_external_tables():
        if ext.definition.scope_mode != "DEPENDENTS":
            continue
        found = references(query, ext.name, _columns(ext))
        scope, types = parse_scope(ext.scope), ext.definition.column_types
        if all(implies(p, scope, types=types) for p in found):
            continue
        wider = union([*(scope or ()), *found], types=types) if scope is not None else None
        rescope(env, ext, wider)


def settle(env: Env) -> None:
    """After dependents changed: give every DEPENDENTS external table exactly the scope its
    dependents need (narrowing drops the rows no dependent reads any more). A table left with
    no dependent keeps its scope and rows: emptying it would cost Spark jobs, only for the next
    dependent to load them again (or for DROP EXTERNAL TABLE to throw them away); the next
    dependent's rescope starts from the kept scope."""
    for ext in env.catalog.list_external_tables():
        if ext.definition.scope_mode != "DEPENDENTS":
            continue
        wanted = dependents_scope(env.catalog, ext)
        if wanted == ():  # no dependent: keep what is held (still followed, reads checked)
            continue
        if scope_sql(wanted) != ext.scope:
            rescope(env, ext, wanted)


def _widens(old: str | None, new: Scope, types: Types) -> bool:
    """Whether every row of scope ``old`` is in ``new`` (each old disjunct implies new)."""
    before = parse_scope(old)
    return before is not None and all(implies(d, new, types=types) for d in before)


def _region(include: str | None, exclude: str | None) -> str | None:
    """Rows satisfying ``include`` (None: all) and not ``exclude`` (None: none), as SQL both
    Spark and PostgreSQL read; None when that is no row."""
    if exclude is None:
        return None
    inside = "TRUE" if include is None else f"COALESCE(({include}), FALSE)"
    return f"{inside} AND NOT COALESCE(({exclude}), FALSE)"


def rescope(
    env: Env,
    ext: ExternalTableInfo,
    scope: Scope,
) -> Followed:
    """Give ``ext`` scope ``scope`` at one consistent point (see the module's docstring)."""
    old, new = ext.scope, scope_sql(scope)
    added = _region(new, old)  # W: rows the new scope adds
    widens = _widens(old, scope, ext.definition.column_types)
    removed = None if widens else _region(old, new)  # R: rows it leaves out
    d = ext.definition
    assert d.slot is not None and d.connection is not None
    info = env.catalog.find_connection(d.connection)
    if info is None:
        raise ExternalTableError(f"External table {ext.name}: connection {d.connection} is gone.")
    second = f"{d.slot}_b"
    statement_id = new_statement_id()
    directory = env.warehouse.data_dir(statement_id, "-base")
    with postgres.connect(info) as conn:
        replication.drop_objects(conn, second, None)
        handed = False  # then the base files are the final step's to keep or delete
        try:
            start, base = None, None
            source = postgres.describe(info, conn, d.source)
            published = replication.row_filter(conn, source, new)
            if added is not None:  # publish the wider scope's changes before P
                doing = f"loading the rows of {added} (the scope becomes {new or 'every row'})"
                _progress(env.catalog, env.clock, ext.table_id, f"{doing}, since {_now(env.clock)}")
                replication.set_row_filter(conn, d.publication or "", source, published)
                state = table_state(env.catalog, ext)
                with replication.exported_slot(info, second) as exported:
                    where = postgres.to_postgres(added)
                    rows = snapshot(env.spark, info, source, exported, state.schema, where)
                    with counted_jobs(env.spark, f"bootstrap of external table {ext.name}"):
                        base = _write_base(env, ext, state, rows, new, directory)
                start = exported.position
            handed = True
            done = _commit(env, ext, start, base, new, removed, statement_id=statement_id)
            if added is None:  # the narrower scope's changes only, once it is committed
                replication.set_row_filter(conn, d.publication or "", source, published)
            return done
        except BaseException:
            if added is not None:
                _progress(env.catalog, env.clock, ext.table_id, None)
                if not handed:
                    _discard(env, directory)
            raise
        finally:
            replication.drop_objects(conn, second, None)


def _write_base(
    env: Env,
    ext: ExternalTableInfo,
    state: TableState,
    rows: DataFrame,
    keep: str | None,
    directory: str,
) -> list[DataFile]:
    """The snapshot's rows in ``keep`` (the new scope, checked again as Spark reads it), written
    by the JDBC partitions' tasks as the table's own data files (row keys, key hashes), not
    committed: the final step adds them."""
    typed = stored_rows(rows, state.schema, ext.definition.spec["keys"])
    if keep is not None:
        typed = typed.where(f"coalesce({keep}, false)")
    return write_data(
        env.warehouse,
        typed.select(*[quoted(c.name) for c in state.schema.columns]),
        schema=state.schema,
        table=ext.name,
        directory=directory,
    )


def _delete(env: Env, files: Iterable[DataFile]) -> None:
    """Delete data files that were not committed."""
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            env.warehouse.fs.delete_file(env.warehouse.fs_path(f.path))


def _discard(env: Env, directory: str) -> None:
    """Delete a bootstrap's base files that were not committed."""
    with contextlib.suppress(FileNotFoundError):
        env.warehouse.fs.delete_dir(env.warehouse.fs_path(directory))


def _commit(
    env: Env,
    ext: ExternalTableInfo,
    start: int | None,
    base: list[DataFile] | None,
    new: str | None,
    removed: str | None,
    *,
    statement_id: str,
) -> Followed:
    """Steps 2 to 4 of a rescope: the follow brought past P, then the fence (state
    RESCOPING: other follows wait), then one commit that applies the second slot's transactions
    and adds the snapshot's files as written (``base``; the rows of keys the transactions
    touched deleted by a deletion vector of the same commit), moves the position to the second
    slot's end and sets the scope."""
    old, table_id, name = ext.scope, ext.table_id, ext.name
    try:
        ext = _past(env, ext, start)
        prior = ext.state
        ext = _fence(env.catalog, env.clock, ext)
    except BaseException:
        _delete(env, base or ())
        raise
    committing = False
    try:
        position, transactions = parse_lsn(ext.position or "0/0"), []
        info = env.catalog.find_connection(ext.definition.connection or "")
        assert info is not None and ext.definition.slot is not None
        if start is not None:
            with postgres.connect(info) as conn:
                messages = replication.peek(
                    conn, f"{ext.definition.slot}_b", ext.definition.publication or "", changes=None
                )
            transactions = list(Decoder().feed(messages))
        end = max([position, *(t.end_lsn for t in transactions)])
        folded = fold(ext, transactions)
        state = table_state(env.catalog, ext)
        with counted_jobs(env.spark, f"rescope of external table {name}") as count:
            # the stored rows compared: the touched keys' and those the new scope leaves out
            # (none holds a key of W: the table held F's rows only)
            applied = apply_folded(
                env.spark,
                env.warehouse,
                ext,
                state,
                folded,
                statement_id,
                keep=new,
                base=base,
                stored=removed,
            )
            jobs = count()
        rescoped = AlterExternalTable(
            table_id, scope=new, state=prior, position=format_lsn(end), bootstrap=None
        )
        request = write_request(
            statement_id,
            "RESCOPE",
            [applied],
            updates=(rescoped,),
            requirements=(FollowedFrom(table_id, name, ext.position, old, rescoping=True),),
        )
        committing = True
        result = env.catalog.commit([request], clock=env.clock)
    except BaseException:
        _unfence(env.catalog, env.clock, table_id, prior)
        if not committing:  # (a commit that failed may still have been made)
            _delete(env, base or ())
        raise
    added = {f.path for f in applied.added}
    _delete(env, [f for f in base or () if f.path not in added])  # every row superseded
    if end > position:  # the table holds the main slot's changes up to there too
        with postgres.connect(info) as conn:
            replication.advance(conn, ext.definition.slot, format_lsn(end))
    return Followed(
        transactions=len(transactions),
        inserted=applied.inserted,
        deleted=applied.deleted,
        source_lsn=format_lsn(end),
        version=result.version_of(table_id),
        spark_jobs=jobs,
    )


def _past(
    env: Env,
    ext: ExternalTableInfo,
    start: int | None,
) -> ExternalTableInfo:
    """``ext`` followed (under its old scope) to a position at or past ``start`` (P), by this
    statement or by another follower, whichever commits."""
    deadline = time.monotonic() + _CATCH_UP_SECONDS
    while start is not None and parse_lsn(ext.position or "0/0") < start:
        if time.monotonic() > deadline:
            raise ConflictError(
                f"External table {ext.name} did not reach source position {format_lsn(start)}"
                f" within {_CATCH_UP_SECONDS:g} s while its scope was being changed; nothing was"
                " written. Try again."
            )
        try:
            step = follow(env, ext, until=start)
        except SourceChangedError:
            raise
        except ChangelakeError:  # another follower's step or commit came first
            step = Followed(source_lsn=ext.position)
        if step.source_lsn == ext.position:
            time.sleep(0.05)  # the source has not flushed P yet, or another follower is at it
        ext = _current(env.catalog, ext)
    return ext


def _current(catalog: Catalog, ext: ExternalTableInfo) -> ExternalTableInfo:
    found = catalog.external_table_by_id(ext.table_id)
    if found is None or found.scope != ext.scope:
        raise ConflictError(
            f"External table {ext.name} was dropped or rescoped while its scope was being"
            " changed; nothing was written."
        )
    return found


def _fence(catalog: Catalog, clock: Clock, ext: ExternalTableInfo) -> ExternalTableInfo:
    """Mark ``ext`` RESCOPING at its current position: from then on no other follow commits."""
    for _ in range(_ATTEMPTS):
        update = AlterExternalTable(ext.table_id, state=ExternalTableState.RESCOPING)
        fence = FollowedFrom(ext.table_id, ext.name, ext.position, ext.scope)
        try:
            catalog.commit(
                [CommitRequest(new_statement_id(), "RESCOPE FENCE", (update,), (fence,))],
                clock=clock,
            )
        except ConflictError:
            ext = _current(catalog, ext)  # a follow committed first: fence at its position
            continue
        return _current(catalog, ext)
    raise ConflictError(
        f"External table {ext.name}: its follow kept moving while its scope was being changed"
        f" ({_ATTEMPTS} attempts); nothing was written. Try again."
    )


def _progress(catalog: Catalog, clock: Clock, table_id: int, text: str | None) -> None:
    """Say (DESCRIBE EXTERNAL TABLE's ``bootstrap``) that a widening is under way, or no more."""
    update = AlterExternalTable(table_id, bootstrap=text)
    with contextlib.suppress(ChangelakeError):
        catalog.commit([CommitRequest(new_statement_id(), "BOOTSTRAP", (update,))], clock=clock)


def _now(clock: Clock) -> str:
    return dt.datetime.fromtimestamp(clock.now()).isoformat(sep=" ", timespec="seconds")


def _unfence(catalog: Catalog, clock: Clock, table_id: int, state: str) -> None:
    update = AlterExternalTable(table_id, state=state)
    with contextlib.suppress(ChangelakeError):
        catalog.commit(
            [CommitRequest(new_statement_id(), "RESCOPE FAILED", (update,))], clock=clock
        )
