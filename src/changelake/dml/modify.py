"""UPDATE and DELETE: matched rows get deletion-vector entries; updated rows are rewritten.

Updated rows keep their identity (materialized in ``_cl_row_id``), so changes pair them up.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.catalog.model import LiveFile
from changelake.dml import strategy
from changelake.dml.common import (
    Planned,
    Target,
    commit_write,
    remove_all_rows,
    small_input,
)
from changelake.dml.matches import address, find_matches, matched_rows, new, persisted
from changelake.dml.replace import Layout, NewRows, replace_matches, replace_rows
from changelake.dml.result import StatementResult
from changelake.dml.statements import Delete, Update
from changelake.dml.strategy import TWO_PHASES, choose, referenced
from changelake.errors import InvalidStatementError, SqlSyntaxError
from changelake.plan.bind import Binder
from changelake.plan.pushdown import conjuncts_for
from changelake.runtime.env import Context
from changelake.schema import quoted
from changelake.spark import native
from changelake.storage.pruning import prune
from changelake.storage.snapshot import FILE, IDENTITY, POS, RID
from changelake.storage.writer import run_checked


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
        reads_late=lambda: native.reader_available(ctx.spark),
    )
    # one pass reads every column of the matched rows: the condition first, in the reader
    placeholder = binder.target(
        state, table.name, identity=strategy.one_pass, late=strategy.one_pass
    )
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


def plan_delete(ctx: Context, statement: Delete) -> Planned:
    return _plan(
        ctx,
        operation="DELETE",
        table=statement.table,
        sources=statement.using,
        condition=statement.condition,
        values=lambda binder, target: [],
    )


def delete(ctx: Context, statement: Delete) -> StatementResult:
    """DELETE FROM table [USING sources] [WHERE condition]."""
    if statement.condition is None and not statement.using:
        return remove_all_rows(ctx, Target.of(ctx, statement.table.name), operation="DELETE")
    planned = plan_delete(ctx, statement)
    target = planned.target
    if planned.strategy.how != TWO_PHASES:
        # one job: the DV is written from the statement's query, and counted from the file
        found = _matched(planned.found)
        write = replace_rows(ctx, target, found, counts=None, small=small_input(target))
        return commit_write(ctx, "DELETE", write, stream_reads=planned.binder.stream_reads.values())
    with find_matches(planned.found, target=target, operation="DELETE", joined=False) as matches:
        deleted = matches.rows
        if matches.matched:
            deleted = matched_rows(ctx.spark, ctx.warehouse, target, matches)
        write = replace_rows(ctx, target, deleted, counts=matches.per_file)
    return commit_write(ctx, "DELETE", write, stream_reads=planned.binder.stream_reads.values())


def plan_update(ctx: Context, statement: Update) -> tuple[Planned, dict[int, str]]:
    """The planned UPDATE and, per assigned column id, the column its new value is in."""
    assigned: dict[int, str] = {}
    assignments, source = statement.assignments, statement.source

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
        table=statement.table,
        sources=[source] if source is not None else [],
        condition=statement.condition,
        values=values,
    )
    return planned, assigned


def update(ctx: Context, statement: Update) -> StatementResult:
    """UPDATE table SET column = value, ... [FROM source] [WHERE condition]."""
    planned, assigned = plan_update(ctx, statement)
    target = planned.target
    joined = statement.source is not None
    if planned.strategy.one_pass:
        # The query selected the old rows too: persisted, they are written as the DV (with
        # before-images, counted from the file) and as the new rows: two jobs.
        with persisted(_matched(planned.found)) as rows:
            write = replace_rows(
                ctx,
                target,
                rows,
                counts=None,
                new_rows=partial(_updated, target, assigned, rows),
                small=small_input(target),
                unique="UPDATE" if joined else None,
            )
    else:
        with find_matches(
            planned.found, target=target, operation="UPDATE", joined=joined
        ) as matches:
            new_rows = partial(_updated, target, assigned)
            write = replace_matches(ctx, target, matches, new_rows=new_rows)
    return commit_write(ctx, "UPDATE", write, stream_reads=planned.binder.stream_reads.values())


def _updated(target: Target, assigned: dict[int, str], rows: DataFrame, count: int) -> NewRows:
    """The new rows of an UPDATE's ``count`` matched ``rows`` (persisted): new values where
    assigned, their ids kept."""
    if not count:
        return NewRows()
    changed = [
        f"{assigned.get(c.column_id, quoted(c.name))} AS {quoted(c.name)}"
        for c in target.state.schema.columns
    ]
    selected = native.select(rows, [*changed, RID])
    return NewRows((selected,), updated=count, layout=Layout.REGROUPED)


def _matched(found: DataFrame) -> DataFrame:
    """The rows of a statement's query that address a target row."""
    return found.where(F.col(FILE).isNotNull())
