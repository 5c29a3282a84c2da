"""UPDATE and DELETE: matched rows get deletion-vector entries; updated rows are rewritten.

Updated rows keep their identity (materialized in ``_cl_row_id``), so changes pair them up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.catalog.model import LiveFile
from changelake.catalog.writes import WriteKind
from changelake.dml import strategy
from changelake.dml.common import (
    Target,
    commit_write,
    record_deletes,
    remove_all_rows,
    small_input,
)
from changelake.dml.matches import address, find_matches, matched_rows, new, persisted
from changelake.dml.result import StatementResult
from changelake.dml.strategy import TWO_PHASES, Strategy, choose, referenced
from changelake.errors import InvalidStatementError, SqlSyntaxError
from changelake.plan.bind import Binder
from changelake.plan.pushdown import conjuncts_for
from changelake.runtime.env import Context
from changelake.schema import quoted
from changelake.spark import native
from changelake.spark.relation import plan_lines
from changelake.storage.pruning import prune
from changelake.storage.snapshot import FILE, IDENTITY, POS, RID
from changelake.storage.writer import partitions_for, run_checked, write_data


@dataclass(frozen=True)
class Planned:
    """A row-level write's target, how it reads it, and its phase 1 query (or its one pass)."""

    binder: Binder
    target: Target
    strategy: Strategy
    found: DataFrame


def _plan(
    ctx: Context,
    *,
    operation: str,
    table: exp.Table,
    sources: list[exp.Expression],
    condition: exp.Expression | None,
    values: Callable[[Binder, Target], list[exp.Expression]],
) -> Planned:
    """Plan an UPDATE or DELETE of ``table`` (pruned by ``condition``) joined to ``sources``:
    choose how to read it, then build the query selecting the matched rows' addresses, the
    statement's ``values`` (given the binder and the target) and, in one pass, their old rows."""
    target = Target.of(ctx, table.name)
    alias = table.alias or table.name
    names = {alias.lower(), table.name.lower()}
    state = target.state
    if condition is not None:
        state = state.with_files(prune(state.files, state.schema, conjuncts_for(condition, names)))
    target = Target(target.info, state)
    binder = Binder(ctx)
    computed = values(binder, target)
    strategy = choose(
        ctx.env,
        state.files,
        condition=condition,
        phase_one_columns=referenced([condition, *computed], names, state.schema),
        joined=bool(sources),
        needs_rows=operation == "UPDATE" or target.info.before_images(),
        probe=lambda file: _probe(ctx, target, table, file, condition),
    )
    placeholder = binder.target(state, table.name, identity=strategy.one_pass)
    projection = address(alias) + computed
    if strategy.one_pass:
        projection += [exp.column(c.name, table=alias, quoted=True) for c in state.schema.columns]
        projection += [exp.column(c, table=alias) for c in IDENTITY]
    select = _from_clause(placeholder, alias, sources).select(*projection, append=False)
    if operation == "DELETE" and sources:  # a target row may match several source rows
        select = select.distinct()
    if condition is not None:
        select = select.where(binder.bind(condition.copy()))
    found = binder.run(binder.bind(select))
    return Planned(binder, target, strategy, found)


def _probe(
    ctx: Context,
    target: Target,
    table: exp.Table,
    file: LiveFile,
    condition: exp.Expression,
) -> tuple[int, int]:
    """(matches, rows examined) of ``condition`` in ``file`` of ``target``, read from its start
    until ``strategy.PROBE_MATCHES`` rows match (Spark stops the scan there) or the file ends."""
    binder = Binder(ctx)
    placeholder = binder.target(target.state.with_files([file]), table.name)
    alias = table.alias or table.name
    select = _from_clause(placeholder, alias, []).select(exp.column(POS, table=alias), append=False)
    select = select.where(binder.bind(condition.copy())).limit(strategy.PROBE_MATCHES)
    df = binder.run(binder.bind(select))
    found = run_checked(df.collect, table=target.info.name)
    if len(found) < strategy.PROBE_MATCHES:
        return len(found), file.live_rows
    return len(found), max(r[0] for r in found) + 1


def _from_clause(placeholder: str, alias: str, sources: list[exp.Expression]) -> exp.Select:
    """SELECT ... FROM target, sources (UPDATE ... FROM and DELETE ... USING join in WHERE)."""
    target = exp.Table(
        this=exp.to_identifier(placeholder), alias=exp.TableAlias(this=exp.to_identifier(alias))
    )
    select = exp.select().from_(target)
    for source in sources:
        select = select.join(source.copy(), join_type="cross")
    return select


def plan_delete(
    ctx: Context,
    *,
    table: exp.Table,
    using: list[exp.Expression],
    condition: exp.Expression | None,
) -> Planned:
    return _plan(
        ctx,
        operation="DELETE",
        table=table,
        sources=using,
        condition=condition,
        values=lambda binder, target: [],
    )


def delete(
    ctx: Context,
    *,
    table: exp.Table,
    using: list[exp.Expression],
    condition: exp.Expression | None,
) -> StatementResult:
    """DELETE FROM table [USING sources] [WHERE condition]."""
    if condition is None and not using:
        return remove_all_rows(ctx, Target.of(ctx, table.name), operation="DELETE")
    planned = plan_delete(ctx, table=table, using=using, condition=condition)
    target = planned.target
    if planned.strategy.how != TWO_PHASES:
        # one job: the DV is written from the statement's query, and counted from the file
        removed, deletes, count = record_deletes(
            ctx.warehouse,
            target,
            _matched(planned.found),
            counts=None,
            statement_id=ctx.statement_id,
            small=small_input(target),
        )
        write = target.write(WriteKind.CHANGE, removed=removed, deletes=deletes, deleted=count)
        return commit_write(ctx, "DELETE", write, stream_reads=planned.binder.stream_reads.values())
    with find_matches(planned.found, target=target, operation="DELETE", joined=False) as matches:
        deleted = matches.rows
        if matches.matched:
            deleted = matched_rows(ctx.spark, ctx.warehouse, target, matches)
        removed, deletes, count = record_deletes(
            ctx.warehouse, target, deleted, counts=matches.per_file, statement_id=ctx.statement_id
        )
    write = target.write(WriteKind.CHANGE, removed=removed, deletes=deletes, deleted=count)
    return commit_write(ctx, "DELETE", write, stream_reads=planned.binder.stream_reads.values())


def plan_update(
    ctx: Context,
    *,
    table: exp.Table,
    assignments: list[exp.Expression],
    source: exp.Expression | None,
    condition: exp.Expression | None,
) -> tuple[Planned, dict[int, str]]:
    """The planned UPDATE and, per assigned column id, the column its new value is in."""
    assigned: dict[int, str] = {}

    def values(binder: Binder, target: Target) -> list[exp.Expression]:
        schema, name = target.state.schema, target.info.name
        if not assignments:
            raise SqlSyntaxError(f"Syntax error: UPDATE {name} needs SET column = value.")
        computed = []
        for assignment in assignments:
            if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
                raise InvalidStatementError(
                    f"UPDATE {name}: expected SET column = value, got {assignment.sql()}."
                )
            column = schema.column(assignment.this.name, table=name)
            if column.column_id in assigned:
                raise InvalidStatementError(
                    f"UPDATE {name} sets column {column.name} more than once."
                )
            assigned[column.column_id] = new(column.physical)
            value = binder.bind(assignment.expression.copy())
            computed.append(exp.alias_(value, assigned[column.column_id]))
        return computed

    planned = _plan(
        ctx,
        operation="UPDATE",
        table=table,
        sources=[source] if source is not None else [],
        condition=condition,
        values=values,
    )
    return planned, assigned


def update(
    ctx: Context,
    *,
    table: exp.Table,
    assignments: list[exp.Expression],
    source: exp.Expression | None,
    condition: exp.Expression | None,
) -> StatementResult:
    """UPDATE table SET column = value, ... [FROM source] [WHERE condition]."""
    planned, assigned = plan_update(
        ctx,
        table=table,
        assignments=assignments,
        source=source,
        condition=condition,
    )
    target = planned.target
    if planned.strategy.one_pass:
        return _update_in_one_pass(ctx, planned, assigned, joined=source is not None)
    removed, deletes, count, files = (), (), 0, []
    with find_matches(
        planned.found, target=target, operation="UPDATE", joined=source is not None
    ) as matches:
        # The matched rows feed two writes (DV with before-images, new rows): persisted, the
        # matched files are read once and both writes see the same rows.
        full = matched_rows(ctx.spark, ctx.warehouse, target, matches)
        with persisted(full) as rows:
            if matches.matched:
                removed, deletes, count = record_deletes(
                    ctx.warehouse,
                    target,
                    rows,
                    counts=matches.per_file,
                    statement_id=ctx.statement_id,
                )
                files = _write_updated(ctx, target, rows, assigned, count)
    write = target.write(
        WriteKind.CHANGE, added=tuple(files), removed=removed, deletes=deletes, updated=count
    )
    return commit_write(ctx, "UPDATE", write, stream_reads=planned.binder.stream_reads.values())


def _update_in_one_pass(
    ctx: Context, planned: Planned, assigned: dict[int, str], *, joined: bool
) -> StatementResult:
    """An UPDATE whose query selects the old rows too: its matched rows, persisted, are written
    as the DV (with before-images, counted from the file) and as the new rows: two jobs."""
    target = planned.target
    files: list = []
    with persisted(_matched(planned.found)) as rows:
        removed, deletes, count = record_deletes(
            ctx.warehouse,
            target,
            rows,
            counts=None,
            statement_id=ctx.statement_id,
            small=small_input(target),
            unique="UPDATE" if joined else None,
        )
        if count:
            files = _write_updated(ctx, target, rows, assigned, count)
    write = target.write(
        WriteKind.CHANGE, added=tuple(files), removed=removed, deletes=deletes, updated=count
    )
    return commit_write(ctx, "UPDATE", write, stream_reads=planned.binder.stream_reads.values())


def _write_updated(
    ctx: Context,
    target: Target,
    rows: DataFrame,
    assigned: dict[int, str],
    count: int,
) -> list:
    """The new rows of an UPDATE's matched ``rows`` (persisted): new values where assigned, their
    ids kept."""
    schema = target.state.schema
    changed = [
        f"{assigned.get(c.column_id, quoted(c.name))} AS {quoted(c.name)}" for c in schema.columns
    ]
    return write_data(
        ctx.warehouse,
        native.select(rows, [*changed, RID]),
        schema=schema,
        table=target.info.name,
        directory=ctx.warehouse.data_dir(ctx.statement_id),
        row_id=RID,
        partitions=partitions_for(count),
        cached=True,
    )


def _matched(found: DataFrame) -> DataFrame:
    """The rows of a statement's query that address a target row."""
    return found.where(F.col(FILE).isNotNull())


def explain_write(planned: Planned, operation: str) -> list[str]:
    """EXPLAIN of a planned UPDATE or DELETE: how it reads its target, then Spark's plan of the
    read (phase 1's query, or the one pass)."""
    line = planned.strategy.describe(operation, planned.target.info.name)
    return [line, *plan_lines(planned.found)]
