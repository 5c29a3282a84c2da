"""MERGE INTO target USING source ON ... WHEN [NOT] MATCHED [AND c] THEN UPDATE | DELETE | INSERT.

One join of source to target picks, per source row, the first WHEN clause that applies (phase 1
keeps its index); matched target rows that are updated or deleted get DV entries, updated and
inserted rows are written once. Updated rows keep their identity. In one pass (a small target,
``strategy.choose_merge``) the join also selects the matched rows' old values and identity: the
DV job counts the rows by action, then the new rows are written; in two phases it keeps the
matched positions, counted per file, and phase 2 reads the full rows of the files with a match
(``dml/matches.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.catalog.writes import TableWrite
from changelake.dml.common import Planned, Target, commit_write
from changelake.dml.matches import address, find_matches, inserted_rows, new, persisted
from changelake.dml.replace import Layout, NewRows, replace_matches, replace_rows
from changelake.dml.result import StatementResult
from changelake.dml.statements import Merge
from changelake.dml.strategy import choose_merge
from changelake.errors import InvalidStatementError, NotNullViolationError
from changelake.plan.bind import Binder
from changelake.runtime.env import Context
from changelake.schema import TableSchema, quoted
from changelake.spark import native
from changelake.spark.observed import Counted
from changelake.storage.snapshot import IDENTITY, POS, RID

# Phase 1's column of the index of the clause that applies to a row (NULL: none applies).
CLAUSE = "_cl_clause"


class Action(StrEnum):
    """What a WHEN clause does (the value names its rows' count)."""

    UPDATE = "update"
    DELETE = "delete"
    INSERT = "insert"


@dataclass(frozen=True)
class Clause:
    """The ``index``-th WHEN clause: WHEN MATCHED for UPDATE and DELETE, WHEN NOT MATCHED for
    INSERT; ``values``: column id -> new value (UPDATE and INSERT)."""

    index: int
    action: Action
    condition: exp.Expression | None
    values: Mapping[int, exp.Expression]

    @property
    def matched(self) -> bool:
        return self.action is not Action.INSERT


def _clauses(
    whens: list[exp.Expression], schema: TableSchema, table: str, binder: Binder
) -> tuple[Clause, ...]:
    found = []
    for index, when in enumerate(whens):
        matched = bool(when.args.get("matched"))
        if when.args.get("source"):
            raise InvalidStatementError("MERGE ... WHEN NOT MATCHED BY SOURCE is not supported.")
        condition = when.args.get("condition")
        condition = binder.bind(condition.copy()) if condition is not None else None
        then = when.args.get("then")
        values: dict[int, exp.Expression] = {}
        if isinstance(then, exp.Update):
            action = Action.UPDATE
            for assignment in then.expressions:
                column = schema.column(assignment.this.name, table=table)
                values[column.column_id] = binder.bind(assignment.expression.copy())
        elif isinstance(then, exp.Insert):
            action = Action.INSERT
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
            action = Action.DELETE
        else:
            raise InvalidStatementError(f"Unsupported MERGE action: {then.sql() if then else '?'}.")
        clause = Clause(index, action, condition, values)
        if clause.matched != matched:
            raise InvalidStatementError(
                "MERGE: WHEN MATCHED takes UPDATE or DELETE; WHEN NOT MATCHED takes INSERT."
            )
        found.append(clause)
    if not found:
        raise InvalidStatementError("MERGE needs at least one WHEN clause.")
    return tuple(found)


def _taking(clauses: Sequence[Clause], *actions: Action) -> str:
    """SQL: the row's clause takes one of ``actions``. Where no clause does, an index no clause
    has, not FALSE: Spark would prune away the read of the persisted rows, and the counts it
    takes (``Counted``) with it."""
    indices = [c.index for c in clauses if c.action in actions] or [-1]
    return f"{CLAUSE} IN ({', '.join(map(str, indices))})"


def plan_merge(ctx: Context, statement: Merge) -> tuple[Planned, tuple[Clause, ...]]:
    """The planned MERGE (phase 1's query, or the one pass) and its WHEN clauses."""
    table = statement.table
    target = Target.of(ctx, table.name)
    schema, name = target.state.schema, target.info.name
    alias = table.alias or table.name
    binder = Binder(ctx)
    strategy = choose_merge(ctx.env, target.state.files)
    placeholder = binder.target(target.state, table.name, identity=strategy.one_pass)
    source = binder.bind(statement.source.copy())
    on = binder.bind(statement.on.copy())
    clauses = _clauses(statement.whens, schema, name, binder)

    is_matched = exp.Not(this=exp.Is(this=exp.column(POS, table=alias), expression=exp.Null()))
    not_matched = exp.Is(this=exp.column(POS, table=alias), expression=exp.Null())

    def guard(clause: Clause) -> exp.Expression:
        base = is_matched if clause.matched else not_matched
        return (
            exp.and_(base.copy(), exp.paren(clause.condition.copy()))
            if clause.condition
            else base.copy()
        )

    applies = exp.Case(
        ifs=[exp.If(this=guard(c), true=exp.Literal.number(c.index)) for c in clauses]
    )
    # Phase 1 computes only what clauses assign; an UPDATE clause keeps the columns it does not
    # name, which phase 2 reads from the matched rows.
    projection = [
        exp.alias_(applies, CLAUSE),
        *address(alias),
    ]
    if strategy.one_pass:  # the matched rows' old values and identity, read by the same scan
        projection += [exp.column(c.name, table=alias, quoted=True) for c in schema.columns]
        projection += [exp.column(c, table=alias) for c in IDENTITY]
    for column in schema.columns:
        ifs = [
            exp.If(this=guard(c), true=c.values.get(column.column_id, exp.Null()).copy())
            for c in clauses
            if c.action is Action.INSERT or column.column_id in c.values
        ]
        if ifs:
            projection.append(exp.alias_(exp.Case(ifs=ifs), new(column.physical)))
    target_ref = exp.Table(
        this=exp.to_identifier(placeholder), alias=exp.TableAlias(this=exp.to_identifier(alias))
    )
    select = exp.select(*projection).from_(source).join(target_ref, on=on, join_type="left")
    found = binder.run(select).where(f"{CLAUSE} IS NOT NULL")
    return Planned(binder, target, strategy, found), clauses


def merge(ctx: Context, statement: Merge) -> StatementResult:
    """MERGE INTO table USING source ON condition WHEN ... THEN ..."""
    planned, clauses = plan_merge(ctx, statement)
    if planned.strategy.one_pass:
        write = _merge_in_one_pass(ctx, planned, clauses)
    else:
        write = _merge_in_two_phases(ctx, planned, clauses)
    return commit_write(ctx, "MERGE", write, stream_reads=planned.binder.stream_reads.values())


def _merge_in_one_pass(ctx: Context, planned: Planned, clauses: tuple[Clause, ...]) -> TableWrite:
    """A MERGE whose query also selected the matched rows' old values and identity: the DV (with
    before-images) is written from its persisted rows, counting them by action in the same job,
    then the updated and inserted rows: two jobs, no count before."""
    counted = Counted(planned.found, {a: _taking(clauses, a) for a in Action})
    with persisted(counted.frame) as rows:
        return replace_rows(
            ctx,
            planned.target,
            rows.where(_taking(clauses, Action.UPDATE, Action.DELETE)),
            counts=None,
            new_rows=lambda _: _new_rows(
                planned.target, clauses, rows, rows, counted.counts(), Layout.AS_RUN
            ),
            unique="MERGE",
        )


def _merge_in_two_phases(ctx: Context, planned: Planned, clauses: tuple[Clause, ...]) -> TableWrite:
    """A MERGE whose query kept the matched positions: counted per file and action in phase 1,
    the full rows of the files with a match read once in phase 2."""
    target = planned.target
    action = " ".join(f"WHEN {c.index} THEN '{c.action}'" for c in clauses)
    with find_matches(
        planned.found,
        target=target,
        operation="MERGE",
        kind=F.expr(f"CASE {CLAUSE} {action} END"),
        kinds=tuple(Action),
    ) as matches:
        return replace_matches(
            ctx,
            target,
            matches,
            new_rows=lambda rows, _: _new_rows(
                target, clauses, rows, matches.rows, matches.per_kind, Layout.SPREAD
            ),
        )


def _new_rows(
    target: Target,
    clauses: tuple[Clause, ...],
    matched: DataFrame,
    found: DataFrame,
    by_action: Mapping[str, int],
    layout: Layout,
) -> NewRows:
    """The rows the ``clauses`` add: the updated ones from the ``matched`` rows (old values and
    identity), the inserted ones from phase 1's ``found`` rows; ``by_action``: their counts."""
    schema = target.state.schema
    parts = []
    if by_action[Action.UPDATE]:
        updated = matched.where(_taking(clauses, Action.UPDATE))
        parts.append(native.select(updated, [*_updated(clauses, schema), RID]))
    if by_action[Action.INSERT]:
        parts.append(inserted_rows(found.where(_taking(clauses, Action.INSERT)), schema))
    return NewRows(
        tuple(parts),
        updated=by_action[Action.UPDATE],
        inserted=by_action[Action.INSERT],
        layout=layout,
    )


def _updated(clauses: tuple[Clause, ...], schema: TableSchema) -> list[str]:
    """The new values of updated rows (SQL): what the row's clause assigned, else the old value."""
    updates = [c for c in clauses if c.action is Action.UPDATE]
    columns = []
    for column in schema.columns:
        keeps = [c for c in updates if column.column_id not in c.values]
        old, assigned = quoted(column.name), new(column.physical)
        if len(keeps) == len(updates):
            value = old
        elif keeps:
            value = f"CASE WHEN {_taking(keeps, Action.UPDATE)} THEN {old} ELSE {assigned} END"
        else:
            value = assigned
        columns.append(f"{value} AS {old}")
    return columns
