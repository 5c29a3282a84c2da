"""UPDATE and DELETE: matched rows get deletion-vector entries; updated rows are rewritten.

Updated rows keep their identity (materialized in ``_cl_row_id``), so changes pair them up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark import StorageLevel
from sqlglot import exp

from changelake.dml.common import Target, commit_one, record_deletes, remove_all_rows
from changelake.errors import InvalidStatementError, SqlSyntaxError
from changelake.sql.resolve import Resolver, conjuncts_for
from changelake.sql.results import StatementResult
from changelake.storage.pruning import prune
from changelake.storage.snapshot import FILE, POS, RID
from changelake.storage.writer import partitions_for, write_data

if TYPE_CHECKING:
    from changelake.session import Session


def _bind_target(
    session: Session, resolver: Resolver, table: exp.Table, where: exp.Expression | None
) -> tuple[Target, str, str]:
    """Bind the target (pruned by the WHERE clause) and return (target, placeholder, alias)."""
    target = Target.of(session, table.name)
    alias = table.alias or table.name
    state = target.state
    if where is not None:
        state = state.with_files(
            prune(
                state.files, state.schema, conjuncts_for(where, {alias.lower(), table.name.lower()})
            )
        )
    placeholder = resolver.bind_dataframe(target.with_identity(session, state), table.name)
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


def delete(session: Session, stmt: exp.Delete, statement_id: str) -> StatementResult:
    where = stmt.args.get("where")
    condition = where.this if where is not None else None
    table = stmt.this
    if condition is None and not stmt.args.get("using"):
        target = Target.of(session, table.name)
        return remove_all_rows(session, target, operation="DELETE", statement_id=statement_id)
    resolver = Resolver(session)
    target, placeholder, alias = _bind_target(session, resolver, table, condition)
    select = _from_clause(placeholder, alias, stmt.args.get("using") or [])
    select = select.select(
        exp.column(FILE, table=alias), exp.column(POS, table=alias), append=False
    ).distinct()
    if condition is not None:
        select = select.where(resolver.bind(condition.copy()))
    select = resolver.bind(select)
    positions = resolver.run(select)
    removed, deletes, count = record_deletes(
        session, target, positions, statement_id=statement_id, what="DELETE"
    )
    return commit_one(
        session,
        target,
        operation="DELETE",
        statement_id=statement_id,
        removed_paths=removed,
        deletes=deletes,
        rows_deleted=count,
    )


def update(session: Session, stmt: exp.Update, statement_id: str) -> StatementResult:
    where = stmt.args.get("where")
    condition = where.this if where is not None else None
    table = stmt.this
    resolver = Resolver(session)
    target, placeholder, alias = _bind_target(session, resolver, table, condition)
    schema, name = target.state.schema, target.info.name
    if not stmt.expressions:
        raise SqlSyntaxError(f"Syntax error: UPDATE {name} needs SET column = value.")
    assignments: dict[int, exp.Expression] = {}
    for assignment in stmt.expressions:
        if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
            raise InvalidStatementError(
                f"UPDATE {name}: expected SET column = value, got {assignment.sql()}."
            )
        column = schema.column(assignment.this.name, table=name)
        if column.column_id in assignments:
            raise InvalidStatementError(f"UPDATE {name} sets column {column.name} more than once.")
        assignments[column.column_id] = resolver.bind(assignment.expression.copy())
    projection = [
        exp.alias_(
            assignments.get(c.column_id) or exp.column(c.name, table=alias, quoted=True),
            c.name,
            quoted=True,
        )
        for c in schema.columns
    ]
    projection += [exp.column(h, table=alias) for h in (FILE, POS, RID)]
    source = stmt.args.get("from_")
    select = _from_clause(placeholder, alias, [source.this] if source is not None else [])
    select = select.select(*projection, append=False)
    if condition is not None:
        select = select.where(resolver.bind(condition.copy()))
    select = resolver.bind(select)
    # The matched rows feed two writes (DV positions, new values): persisting them scans the
    # table once, not twice, and both writes see the same rows.
    matched = resolver.run(select).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        removed, deletes, count = record_deletes(
            session, target, matched.select(FILE, POS), statement_id=statement_id, what="UPDATE"
        )
        files = []
        if count:
            files = write_data(
                session.warehouse,
                matched,
                schema=schema,
                table=name,
                directory=session.warehouse.data_dir(statement_id),
                row_id=RID,
                partitions=partitions_for(count),
            )
    finally:
        matched.unpersist()
    return commit_one(
        session,
        target,
        operation="UPDATE",
        statement_id=statement_id,
        added=tuple(files),
        removed_paths=removed,
        deletes=deletes,
        rows_updated=count,
    )
