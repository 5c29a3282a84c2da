"""UPDATE and DELETE: matched rows get deletion-vector entries; updated rows are rewritten.

Updated rows keep their identity (materialized in ``_cl_row_id``), so changes pair them up.
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import SparkSession
from sqlglot import exp

from changelake.dml.common import (
    Target,
    commit_one,
    deleted_columns,
    image_projection,
    record_deletes,
    remove_all_rows,
)
from changelake.dml.result import StatementResult
from changelake.errors import InvalidStatementError, SqlSyntaxError
from changelake.plan.bind import Binder
from changelake.plan.pushdown import conjuncts_for
from changelake.storage.pruning import prune
from changelake.storage.snapshot import FILE, POS, RID
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
    select = select.select(
        exp.column(FILE, table=alias),
        exp.column(POS, table=alias),
        *image_projection(target, alias),
        append=False,
    ).distinct()
    if condition is not None:
        select = select.where(binder.bind(condition.copy()))
    select = binder.bind(select)
    positions = binder.run(select)
    removed, deletes, count = record_deletes(
        warehouse, target, positions, statement_id=ctx.statement_id, what="DELETE"
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
    projection = [
        exp.alias_(
            values.get(c.column_id) or exp.column(c.name, table=alias, quoted=True),
            c.name,
            quoted=True,
        )
        for c in schema.columns
    ]
    projection += [exp.column(h, table=alias) for h in (FILE, POS, RID)]
    projection += [p for p in image_projection(target, alias) if p.alias_or_name != RID]
    select = _from_clause(placeholder, alias, [source] if source is not None else [])
    select = select.select(*projection, append=False)
    if condition is not None:
        select = select.where(binder.bind(condition.copy()))
    select = binder.bind(select)
    # The matched rows feed two writes (DV positions, new values): persisting them scans the
    # table once, not twice, and both writes see the same rows.
    matched = binder.run(select).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        removed, deletes, count = record_deletes(
            warehouse,
            target,
            matched.select(*deleted_columns(target)),
            statement_id=ctx.statement_id,
            what="UPDATE",
        )
        files = []
        if count:
            files = write_data(
                warehouse,
                matched,
                schema=schema,
                table=name,
                directory=warehouse.data_dir(ctx.statement_id),
                row_id=RID,
                partitions=partitions_for(count),
            )
    finally:
        matched.unpersist()
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
