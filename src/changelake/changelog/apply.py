"""APPLY CHANGES as Spark jobs, and the commit that changes the target and its state together.

The pipeline, whatever the number of keys: normalize the source rows into events, which fail
the first job that reads them at a bad row (``events.checked``: no query of its own); compare
with the state table; per key keep the winning event (SCD TYPE 1) or compute the
history again (SCD TYPE 2) with window functions; then write both tables in MERGE's two phases
and commit them, with the frontiers of the streams read, in one catalog transaction (or stage
them in the open BEGIN ... COMMIT). Nothing reaches the driver but counts and the first bad row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, TypedDict

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.catalog.requests import Update
from changelake.catalog.writes import TableWrite
from changelake.changelog import scd1, scd2
from changelake.changelog.events import DELETE, HASH, SEQ, checked, chosen_columns, normalize
from changelake.changelog.rewrite import (
    INSERT,
    REMOVE,
    REPLACE,
    WRITE_ACTION,
    found_columns,
    rewrite,
)
from changelake.changelog.spec import ApplySpec, OpFormat, path_of
from changelake.changelog.state import (
    HISTORY_COLUMNS,
    STATE_AT,
    STATE_DELETED,
    STATE_HASH,
    STATE_SEQ,
    StateTable,
    read_live,
    retention_seconds,
    state_table,
)
from changelake.dialect import parse_one
from changelake.dml.common import Target, commit_write
from changelake.dml.matches import persisted
from changelake.dml.result import StatementResult
from changelake.errors import InvalidStatementError
from changelake.plan.bind import Binder
from changelake.runtime.env import Context
from changelake.schema import quoted
from changelake.spark.errors import spark_errors
from changelake.storage.snapshot import ADDRESS, FILE, state_relation
from changelake.storage.writer import write_data
from changelake.streams.frontier import StreamRead

OPERATION = "APPLY CHANGES"
# the state table's part of the commit: its write (the first creates it) and the updates that
# move a legacy state table
StateWrite = tuple[TableWrite, tuple[Update, ...]]


class ApplyOptions(TypedDict, total=False):
    """The keyword arguments of ``session.apply_changes`` (see ``apply_python``)."""

    keys: Sequence[str]
    sequence_by: str
    op_column: str | None
    op_format: str | None
    delete_when: str | None
    ignore_null_updates: bool
    columns: Sequence[str] | None
    except_columns: Sequence[str] | None
    scd_type: int


def apply_statement(
    ctx: Context,
    spec: ApplySpec,
    source: exp.Expression | DataFrame,
) -> StatementResult:
    """APPLY CHANGES INTO spec.target FROM ``source`` (a table, view or stream reference, a
    subquery, or a DataFrame)."""
    binder = Binder(ctx)
    if isinstance(source, DataFrame):
        df = source
    else:
        df = binder.query(exp.select("*").from_(source.copy()))
    return apply_changes(ctx, spec, df, stream_reads=binder.stream_reads.values())


def apply_python(
    ctx: Context,
    target: str,
    source: Any,
    *,
    keys: Sequence[str],
    sequence_by: str,
    op_column: str | None = None,
    op_format: str | None = None,
    delete_when: str | None = None,
    ignore_null_updates: bool = False,
    columns: Sequence[str] | None = None,
    except_columns: Sequence[str] | None = None,
    scd_type: int = 1,
) -> StatementResult:
    """``session.apply_changes``: the same as the SQL statement; ``source`` is a DataFrame, a
    table, view or stream name, or a query in parentheses."""
    spec = ApplySpec(
        target=target,
        keys=tuple(keys),
        sequence_by=path_of(sequence_by),
        op_column=path_of(op_column) if op_column is not None else None,
        op_format=OpFormat.parse(op_format) if op_format is not None else None,
        delete_when=parse_one(delete_when) if delete_when is not None else None,
        ignore_null_updates=ignore_null_updates,
        columns=tuple(columns) if columns is not None else None,
        except_columns=tuple(except_columns) if except_columns is not None else None,
        scd_type=scd_type,
    )
    if isinstance(source, str):
        text = source.strip()
        if text.upper().startswith(("SELECT", "WITH")):
            text = f"({text})"
        source = parse_one(f"SELECT * FROM {text}").args["from_"].this
    elif not isinstance(source, DataFrame):
        raise InvalidStatementError(
            f"apply_changes into {target}: source is a Spark DataFrame, a table, view or stream"
            f" name, or a query; got a {type(source).__name__}."
        )
    with spark_errors(f"{OPERATION} INTO {target}"):
        return apply_statement(ctx, spec, source)


def apply_changes(
    ctx: Context,
    spec: ApplySpec,
    source: DataFrame,
    *,
    stream_reads: Iterable[StreamRead] = (),
) -> StatementResult:
    """Apply the changelog ``source`` to ``spec.target`` and its state table in one commit."""
    target = Target.of(ctx, spec.target)
    schema = target.state.schema
    validity = {scd2.START.lower(), scd2.END.lower()} if spec.scd_type == 2 else set()
    chosen = chosen_columns(spec, schema, validity)
    events = checked(normalize(source, spec, schema, chosen), spec=spec)
    keys = list(events.keys)
    if spec.scd_type == 2:
        start, end = scd2.validity_columns(
            schema, table=target.info.name, seq_type=events.seq_type, seq_name=spec.sequence_name
        )
    state = state_table(
        ctx,
        target.info,
        keys=[schema.column(k, table=spec.target) for k in keys],
        seq_type=events.seq_type,
    )
    now = ctx.now()
    unchosen = [c for c in schema.names if c not in chosen and c.lower() not in validity]
    state_df, expired = read_live(
        ctx.spark, ctx.warehouse, state, expired_before=now - retention_seconds(target.info)
    )
    rows = state_relation(ctx.spark, ctx.warehouse, target.state, address=True).frame(ctx.spark)

    def write_state(greatest: DataFrame) -> StateWrite:
        return _write_state(ctx, state, greatest, state_df, expired, keys, now)

    if spec.scd_type == 1:
        # The source is read once, by the job that finds the target rows: the winners are not
        # persisted; the state rows come from the found rows, which are.
        live = state_df.where(~expired) if state.target is not None else None
        applicable = scd1.against_state(events, live)
        kept = unchosen + (list(events.values) if spec.ignore_null_updates else [])
        won = scd1.winners(events, applicable, fold=spec.ignore_null_updates, fresh=bool(kept))
        found = scd1.target_found(events, won, rows.select(*keys, *ADDRESS), target)
        written, state_written = rewrite(
            ctx,
            target,
            found,
            keep_old=kept,
            also=lambda f: write_state(scd1.greatest(f, events.keys, target)),
        )
    else:
        with persisted(events.df) as df:
            events = replace(events, df=df)
            applicable = df.where(F.col(DELETE).isNotNull())
            touched = applicable.select(*keys).distinct()
            image = [c for c in schema.names if c not in keys and c.lower() not in validity]
            with persisted(rows.join(touched, keys, "left_semi")) as old:
                history, greatest = scd2.history(
                    events,
                    applicable,
                    old,
                    scd2.remembered(state_df, expired, touched, keys),
                    image=image,
                    start=start,
                    end=end,
                    fold=spec.ignore_null_updates,
                )
                found = scd2.target_found(
                    history, old, target, keys=keys, image=image, start=start, end=end
                )
                written, _ = rewrite(ctx, target, found)
                state_written = write_state(greatest)
    assert state_written is not None
    state_write, state_updates = state_written
    return commit_write(
        ctx,
        OPERATION,
        written,
        stream_reads=stream_reads,
        beside=(state_write,),
        updates=state_updates,
    )


def _write_state(
    ctx: Context,
    state: StateTable,
    greatest: DataFrame,
    state_df: DataFrame,
    expired: SparkColumn,
    keys: list[str],
    now: float,
) -> StateWrite:
    """The state table's part of the commit: the touched keys' greatest events replace their
    rows, expired tombstones go; a new state table is created with them."""
    values = {
        **{k: F.col(quoted(k)) for k in keys},
        STATE_SEQ: F.col(SEQ),
        STATE_DELETED: F.col(DELETE),
        STATE_HASH: F.col(HASH),
        STATE_AT: F.lit(now).cast("double"),
        **{c: F.col(c) for c in HISTORY_COLUMNS},
    }
    if state.target is None:
        rows = greatest.select(*[v.alias(k) for k, v in values.items()])
        files = write_data(
            ctx.warehouse,
            rows,
            schema=state.schema,
            table=state.name,
            directory=ctx.warehouse.data_dir(ctx.statement_id, "-state"),
        )
        return state.created(files), state.moves
    s = state_df.select(
        *[F.col(quoted(k)).alias(f"_s_{i}") for i, k in enumerate(keys)],
        *[
            F.col(c).alias(f"_s{c}")
            for c in (STATE_SEQ, STATE_DELETED, STATE_HASH, *HISTORY_COLUMNS)
        ],
        expired.alias("_s_expired"),
        *ADDRESS,
    )
    on = [greatest[quoted(k)] == s[f"_s_{i}"] for i, k in enumerate(keys)]
    joined = greatest.join(s, on, "left")
    same = (
        (F.col(SEQ) == F.col(f"_s{STATE_SEQ}"))
        & (F.col(DELETE) == F.col(f"_s{STATE_DELETED}"))
        & (F.col(HASH) == F.col(f"_s{STATE_HASH}"))
        & ~F.col("_s_expired")
    )
    for c in HISTORY_COLUMNS:
        same = same & values[c].eqNullSafe(F.col(f"_s{c}"))
    action = F.when(F.col(FILE).isNull(), F.lit(INSERT)).when(~same, F.lit(REPLACE))
    changed = joined.select(
        action.alias(WRITE_ACTION), *ADDRESS, *found_columns(state.target, values)
    )
    gone = state_df.where(expired).join(
        greatest.select(*[F.col(quoted(k)).alias(k) for k in keys]), keys, "left_anti"
    )
    purged = gone.select(
        F.lit(REMOVE).alias(WRITE_ACTION), *ADDRESS, *found_columns(state.target, {})
    )
    found = changed.unionByName(purged).where(F.col(WRITE_ACTION).isNotNull())
    write, _ = rewrite(ctx, state.target, found, part="-state")
    return write, state.moves
