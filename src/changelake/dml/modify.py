"""UPDATE and DELETE: matched rows get deletion-vector entries; updated rows are rewritten.

Updated rows keep their identity (materialized in ``_cl_row_id``), so changes pair them up.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.dml.common import Target, commit_one, record_deletes, remove_all_rows
from changelake.dml.matches import address, find_matches, full_rows, new, persisted
from changelake.dml.result import StatementResult
from changelake.errors import InvalidStatementError, SqlSyntaxError
from changelake.plan.bind import Binder
from changelake.plan.pushdown import conjuncts_for
from changelake.storage.pruning import prune
from changelake.storage.snapshot import RID
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import partitions_for, write_data
from changelake.txn.context import StatementContext


def _bind_target(
    binder: Binder, table: exp.Table, where: exp.Expression | None
) -> tuple[Target, str, str]:
    """Bind the target (pruned by the WHERE clause) and return (target, placeholder, alias)."""
    target = Target.of(binder.ctx, table.name)
    alias = table.alias or table.name
    state = target.state
    if where is not None:
        state = state.with_files(
            prune(
                state.files, state.schema, conjuncts_for(where, {alias.lower(), table.name.lower()})
            )
        )
    placeholder = binder.target(state, table.name)
    return Target(target.info, state), placeholder, alias


def _from_clause(placeholder: str, alias: str, sources: list[exp.Expression]) -> exp.Select:
    """SELECT ... FROM target, sources (UPDATE ... FROM and DELETE ... USING join in WHERE)."""
    target = exp.Table(
        this=exp.to_identifier(placeholder), alias=exp.TableAlias(this=exp.to_identifier(alias))
    )
    select = exp.select().from_(target)
    for source in sources:
        select = select.join(source.copy(), join_type="cross")
    return select


def delete(
    ctx: StatementContext,
    spark: SparkSession,
    warehouse: Warehouse,
    *,
    table: exp.Table,
    using: list[exp.Expression],
    condition: exp.Expression | None,
) -> StatementResult:
    """DELETE FROM table [USING sources] [WHERE condition]."""
    if condition is None and not using:
        return remove_all_rows(ctx, Target.of(ctx, table.name), operation="DELETE")
    binder = Binder(ctx, spark, warehouse)
    target, placeholder, alias = _bind_target(binder, table, condition)
    select = _from_clause(placeholder, alias, using)
    select = select.select(*address(alias), append=False)
    if using:  # a target row may match several source rows; it is deleted once
        select = select.distinct()
    if condition is not None:
        select = select.where(binder.bind(condition.copy()))
    select = binder.bind(select)
    found = binder.run(select)
    with find_matches(found, target=target, operation="DELETE", joined=False) as matches:
        deleted = matches.rows
        if matches.matched and target.info.before_images():
            deleted = full_rows(spark, warehouse, target, matches)
        removed, deletes, count = record_deletes(
            warehouse, target, deleted, counts=matches.per_file, statement_id=ctx.statement_id
        )
    return commit_one(
        ctx,
        target,
        operation="DELETE",
        removed_paths=removed,
        deletes=deletes,
        rows_deleted=count,
        stream_reads=binder.stream_reads.values(),
    )


def update(
    ctx: StatementContext,
    spark: SparkSession,
    warehouse: Warehouse,
    *,
    table: exp.Table,
    assignments: list[exp.Expression],
    source: exp.Expression | None,
    condition: exp.Expression | None,
) -> StatementResult:
    """UPDATE table SET column = value, ... [FROM source] [WHERE condition]."""
    binder = Binder(ctx, spark, warehouse)
    target, placeholder, alias = _bind_target(binder, table, condition)
    schema, name = target.state.schema, target.info.name
    if not assignments:
        raise SqlSyntaxError(f"Syntax error: UPDATE {name} needs SET column = value.")
    values: dict[int, exp.Expression] = {}
    for assignment in assignments:
        if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
            raise InvalidStatementError(
                f"UPDATE {name}: expected SET column = value, got {assignment.sql()}."
            )
        column = schema.column(assignment.this.name, table=name)
        if column.column_id in values:
            raise InvalidStatementError(f"UPDATE {name} sets column {column.name} more than once.")
        values[column.column_id] = binder.bind(assignment.expression.copy())
    assigned = [c for c in schema.columns if c.column_id in values]
    projection: list[exp.Expression] = address(alias)
    projection += [exp.alias_(values[c.column_id], new(c.physical)) for c in assigned]
    select = _from_clause(placeholder, alias, [source] if source is not None else [])
    select = select.select(*projection, append=False)
    if condition is not None:
        select = select.where(binder.bind(condition.copy()))
    select = binder.bind(select)
    removed, deletes, count, files = (), (), 0, []
    found = binder.run(select)
    with find_matches(
        found, target=target, operation="UPDATE", joined=source is not None
    ) as matches:
        # The matched rows feed two writes (DV with before-images, new rows): persisted, the
        # matched files are read once and both writes see the same rows.
        with persisted(full_rows(spark, warehouse, target, matches)) as rows:
            if matches.matched:
                removed, deletes, count = record_deletes(
                    warehouse, target, rows, counts=matches.per_file, statement_id=ctx.statement_id
                )
                changed = [
                    F.col(new(c.physical) if c.column_id in values else f"`{c.name}`").alias(c.name)
                    for c in schema.columns
                ]
                files = write_data(
                    warehouse,
                    rows.select(*changed, RID),
                    schema=schema,
                    table=name,
                    directory=warehouse.data_dir(ctx.statement_id),
                    row_id=RID,
                    partitions=partitions_for(count),
                )
    return commit_one(
        ctx,
        target,
        operation="UPDATE",
        added=tuple(files),
        removed_paths=removed,
        deletes=deletes,
        rows_updated=count,
        stream_reads=binder.stream_reads.values(),
    )
