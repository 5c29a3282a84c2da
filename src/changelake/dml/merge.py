"""MERGE INTO target USING source ON ... WHEN [NOT] MATCHED [AND c] THEN UPDATE | DELETE | INSERT.

One join of source to target picks, per source row, the first WHEN clause that applies; matched
target rows that are updated or deleted get DV entries, updated and inserted rows are written
once. Updated rows keep their identity. Into a small target the join also selects the matched
rows' old values and identity (one pass: the DV job counts the rows by action, then the new rows
are written); into a large one it keeps the matched positions, counted per file, and phase 2 reads
the full rows of the files with a match (``dml/matches.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.catalog.writes import TableWrite, WriteKind
from changelake.dml.common import (
    Target,
    commit_write,
    record_deletes,
    small_input,
    write_rows,
)
from changelake.dml.matches import (
    address,
    find_matches,
    inserted_rows,
    matched_rows,
    new,
    persisted,
)
from changelake.dml.result import StatementResult
from changelake.errors import InvalidStatementError, NotNullViolationError
from changelake.plan.bind import Binder
from changelake.runtime.env import Context
from changelake.schema import TableSchema
from changelake.spark.observed import Counted
from changelake.storage.snapshot import IDENTITY, POS, RID

MERGE_ACTION = "_cl_action"
UPDATE, DELETE, INSERT = "U", "D", "I"


@dataclass(frozen=True)
class Clause:
    matched: bool
    condition: exp.Expression | None
    kind: str
    values: dict[int, exp.Expression]  # column id -> value (UPDATE and INSERT)


def _clauses(
    whens: list[exp.Expression], schema: TableSchema, table: str, binder: Binder
) -> list[Clause]:
    found = []
    for when in whens:
        matched = bool(when.args.get("matched"))
        if when.args.get("source"):
            raise InvalidStatementError("MERGE ... WHEN NOT MATCHED BY SOURCE is not supported.")
        condition = when.args.get("condition")
        condition = binder.bind(condition.copy()) if condition is not None else None
        then = when.args.get("then")
        values: dict[int, exp.Expression] = {}
        if isinstance(then, exp.Update):
            kind = UPDATE
            for assignment in then.expressions:
                column = schema.column(assignment.this.name, table=table)
                values[column.column_id] = binder.bind(assignment.expression.copy())
        elif isinstance(then, exp.Insert):
            kind = INSERT
            listed = then.this
            names = (
                [c.name for c in listed.expressions]
                if isinstance(listed, exp.Tuple)
                else (
                    [c.name for c in listed.expressions] if isinstance(listed, exp.Schema) else None
                )
            )
            row = then.expression
            items = row.expressions if isinstance(row, exp.Tuple) else [row]
            columns = (
                [schema.column(n, table=table) for n in names] if names else list(schema.columns)
            )
            if len(items) != len(columns):
                raise InvalidStatementError(
                    f"MERGE INSERT into {table} lists {len(columns)} column(s) but {len(items)} value(s)."
                )
            for column, item in zip(columns, items, strict=True):
                values[column.column_id] = binder.bind(item.copy())
            missing = [
                c.name for c in schema.columns if c.column_id not in values and not c.nullable
            ]
            if missing:
                raise NotNullViolationError(
                    f"MERGE INSERT into {table} gives no value for NOT NULL column(s) {', '.join(missing)}."
                )
        elif isinstance(then, exp.Var) and then.name.upper() == "DELETE":
            kind = DELETE
        else:
            raise InvalidStatementError(f"Unsupported MERGE action: {then.sql() if then else '?'}.")
        if kind == INSERT and matched or kind != INSERT and not matched:
            raise InvalidStatementError(
                "MERGE: WHEN MATCHED takes UPDATE or DELETE; WHEN NOT MATCHED takes INSERT."
            )
        found.append(Clause(matched, condition, kind, values))
    if not found:
        raise InvalidStatementError("MERGE needs at least one WHEN clause.")
    return found


def merge(
    ctx: Context,
    *,
    table: exp.Table,
    source: exp.Expression,
    on: exp.Expression,
    whens: list[exp.Expression],
) -> StatementResult:
    """MERGE INTO table USING source ON condition WHEN ... THEN ..."""
    target = Target.of(ctx, table.name)
    schema, name = target.state.schema, target.info.name
    alias = table.alias or table.name
    binder = Binder(ctx)
    one_pass = small_input(target)
    placeholder = binder.target(target.state, table.name, identity=one_pass)
    source = binder.bind(source.copy())
    on = binder.bind(on.copy())
    clauses = _clauses(whens, schema, name, binder)

    is_matched = exp.Not(this=exp.Is(this=exp.column(POS, table=alias), expression=exp.Null()))
    not_matched = exp.Is(this=exp.column(POS, table=alias), expression=exp.Null())

    def guard(clause: Clause) -> exp.Expression:
        base = is_matched if clause.matched else not_matched
        return (
            exp.and_(base.copy(), exp.paren(clause.condition.copy()))
            if clause.condition
            else base.copy()
        )

    action = exp.Case(
        ifs=[
            exp.If(this=guard(c), true=exp.Literal.string(f"{c.kind}{i}"))
            for i, c in enumerate(clauses)
        ]
    )
    # Phase 1 computes only what clauses assign; an UPDATE clause keeps the columns it does not
    # name, which phase 2 reads from the matched rows.
    projection = [
        exp.alias_(action, MERGE_ACTION),
        *address(alias),
    ]
    if one_pass:  # the matched rows' old values and identity, read by the same scan
        projection += [exp.column(c.name, table=alias, quoted=True) for c in schema.columns]
        projection += [exp.column(c, table=alias) for c in IDENTITY]
    for column in schema.columns:
        ifs = [
            exp.If(this=guard(c), true=c.values.get(column.column_id, exp.Null()).copy())
            for c in clauses
            if c.kind == INSERT or c.kind == UPDATE and column.column_id in c.values
        ]
        if ifs:
            projection.append(exp.alias_(exp.Case(ifs=ifs), new(column.physical)))
    target_ref = exp.Table(
        this=exp.to_identifier(placeholder), alias=exp.TableAlias(this=exp.to_identifier(alias))
    )
    select = exp.select(*projection).from_(source).join(target_ref, on=on, join_type="left")
    joined = binder.run(select).where(f"{MERGE_ACTION} IS NOT NULL")
    if one_pass:
        write = _merge_in_one_pass(ctx, target, joined, clauses)
        return commit_write(ctx, "MERGE", write, stream_reads=binder.stream_reads.values())
    kind = F.substring(F.col(MERGE_ACTION), 1, 1)
    with find_matches(
        joined, target=target, operation="MERGE", kind=kind, kinds=(UPDATE, DELETE, INSERT)
    ) as matches:
        by_kind = matches.per_kind
        removed, deletes, files, written = (), (), [], []
        # Persisted lazily: read once only if matched rows feed both the DV and the new rows.
        with persisted(matched_rows(ctx.spark, ctx.warehouse, target, matches)) as rows:
            if matches.matched:
                removed, deletes, _ = record_deletes(
                    ctx.warehouse,
                    target,
                    rows,
                    counts=matches.per_file,
                    statement_id=ctx.statement_id,
                )
            if by_kind[UPDATE]:
                written.append(rows.where(kind == UPDATE).select(*_updated(clauses, schema), RID))
            if by_kind[INSERT]:
                written.append(inserted_rows(matches.rows.where(kind == INSERT), schema))
            files = write_rows(
                ctx.warehouse,
                written,
                schema=schema,
                table=name,
                directory=ctx.warehouse.data_dir(ctx.statement_id),
                rows=by_kind[UPDATE] + by_kind[INSERT],
            )
    write = target.write(
        WriteKind.CHANGE,
        added=tuple(files),
        removed=removed,
        deletes=deletes,
        inserted=by_kind[INSERT],
        updated=by_kind[UPDATE],
        deleted=by_kind[DELETE],
    )
    return commit_write(ctx, "MERGE", write, stream_reads=binder.stream_reads.values())


def _merge_in_one_pass(
    ctx: Context, target: Target, joined: DataFrame, clauses: list[Clause]
) -> TableWrite:
    """MERGE of a small target whose query also selected the matched rows' old values and
    identity: the DV (with before-images) is written from its persisted rows, counting them by
    action in the same job, then the updated and inserted rows: two jobs, no count before."""
    schema = target.state.schema
    kind = f"substring({MERGE_ACTION}, 1, 1)"
    counted = Counted(joined, {k: f"{kind} = '{k}'" for k in (UPDATE, DELETE, INSERT)})
    with persisted(counted.frame) as rows:
        removed, deletes, matched = record_deletes(
            ctx.warehouse,
            target,
            rows.where(f"{kind} IN ('{UPDATE}', '{DELETE}')"),
            counts=None,
            statement_id=ctx.statement_id,
            unique="MERGE",
        )
        by_kind = counted.counts()
        written = []
        if by_kind[UPDATE]:
            written.append(
                rows.where(f"{kind} = '{UPDATE}'").select(*_updated(clauses, schema), RID)
            )
        if by_kind[INSERT]:
            written.append(inserted_rows(rows.where(f"{kind} = '{INSERT}'"), schema))
        files = write_rows(
            ctx.warehouse,
            written,
            schema=schema,
            table=target.info.name,
            directory=ctx.warehouse.data_dir(ctx.statement_id),
            rows=None,
        )
    return target.write(
        WriteKind.CHANGE,
        added=tuple(files),
        removed=removed,
        deletes=deletes,
        inserted=by_kind[INSERT],
        updated=by_kind[UPDATE],
        deleted=matched - by_kind[UPDATE],
    )


def _updated(clauses: list[Clause], schema: TableSchema) -> list[SparkColumn]:
    """The new values of updated rows: what the row's clause assigned, else the old value."""
    columns = []
    for column in schema.columns:
        keeps = [
            f"{c.kind}{i}"
            for i, c in enumerate(clauses)
            if c.kind == UPDATE and column.column_id not in c.values
        ]
        if len(keeps) == sum(c.kind == UPDATE for c in clauses):
            value = F.col(f"`{column.name}`")
        elif keeps:
            value = F.when(F.col(MERGE_ACTION).isin(*keeps), F.col(f"`{column.name}`")).otherwise(
                F.col(new(column.physical))
            )
        else:
            value = F.col(new(column.physical))
        columns.append(value.alias(column.name))
    return columns
