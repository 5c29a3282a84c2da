"""The one way a row-level write (UPDATE, DELETE, MERGE, APPLY CHANGES) changes its target's
rows: the matched rows get deletion-vector entries (with before-images), then the rows that
replace them and the rows it inserts are written as new data files.

Every such write counts alike: the rows it deletes are the matched rows it does not replace.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from pyspark.sql import DataFrame

from changelake.catalog.model import DataFile
from changelake.catalog.writes import TableWrite, WriteKind
from changelake.dml.common import Target, record_deletes
from changelake.dml.matches import Matches, matched_rows, persisted
from changelake.runtime.env import Context
from changelake.storage.snapshot import RID
from changelake.storage.writer import partitions_for, write_data


class Layout(Enum):
    """How new rows are spread over files."""

    # into files of a size for the counted rows, through a shuffle
    SPREAD = "spread"
    # the same, but the rows are a projection of persisted rows: regrouped without a shuffle
    REGROUPED = "regrouped"
    # as the plan ran, its rows uncounted before: one file if it ran as small
    AS_RUN = "as run"


@dataclass(frozen=True)
class NewRows:
    """What a row-level write adds: the union of ``parts`` (the table's columns, then RID: the
    identity a replacing row keeps, NULL for an inserted one), of which ``updated`` rows replace
    matched rows and ``inserted`` are new."""

    parts: tuple[DataFrame, ...] = ()
    updated: int = 0
    inserted: int = 0
    layout: Layout = Layout.SPREAD


def replace_rows(
    ctx: Context,
    target: Target,
    matched: DataFrame,
    *,
    counts: Mapping[str, int] | None,
    new_rows: Callable[[int], NewRows] = lambda deleted: NewRows(),
    part: str = "",
    small: bool = False,
    unique: str | None = None,
) -> TableWrite:
    """The write of ``target`` that deletes its ``matched`` rows and adds ``new_rows(n)``, given
    the number n of matched rows (its DataFrames are read after the deletion vector is written).

    ``counts``, ``small`` and ``unique`` are ``record_deletes``'s; files go to the statement's
    directories suffixed with ``part`` (a statement that writes several tables).
    """
    removed, deletes, deleted = record_deletes(
        ctx.warehouse,
        target,
        matched,
        counts=counts,
        statement_id=ctx.statement_id + part,
        small=small,
        unique=unique,
    )
    new = new_rows(deleted)
    files = _write(ctx, target, new, directory=ctx.warehouse.data_dir(ctx.statement_id, part))
    return target.write(
        WriteKind.CHANGE,
        added=tuple(files),
        removed=removed,
        deletes=deletes,
        inserted=new.inserted,
        updated=new.updated,
        deleted=deleted - new.updated,
    )


def replace_matches(
    ctx: Context,
    target: Target,
    matches: Matches,
    *,
    new_rows: Callable[[DataFrame, int], NewRows],
    part: str = "",
) -> TableWrite:
    """``replace_rows`` in two phases: phase 2 reads the full rows of the ``matches`` (old values,
    identity, what phase 1 computed) once, for the DV and for ``new_rows(rows, n)``."""
    # Persisted lazily: read once only if the matched rows feed both the DV and the new rows.
    with persisted(matched_rows(ctx.spark, ctx.warehouse, target, matches)) as rows:
        return replace_rows(
            ctx,
            target,
            rows,
            counts=matches.per_file,
            new_rows=lambda n: new_rows(rows, n),
            part=part,
        )


def _write(ctx: Context, target: Target, new: NewRows, *, directory: str) -> list[DataFile]:
    if not new.parts:
        return []
    counted = new.layout is not Layout.AS_RUN
    return write_data(
        ctx.warehouse,
        functools.reduce(DataFrame.unionByName, new.parts),
        schema=target.state.schema,
        table=target.info.name,
        directory=directory,
        row_id=RID,
        partitions=partitions_for(new.updated + new.inserted) if counted else None,
        cached=new.layout is Layout.REGROUPED,
        one_file_if_small=not counted,
    )
