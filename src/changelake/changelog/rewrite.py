"""Writing what an apply decided, with the two phases of ``dml/matches.py`` (as MERGE does).

Phase 1 is the caller's DataFrame ``found``: one row per target row to change (its address)
or to insert (address NULL), with ``_cl_action`` (U update, R replace, D delete, I insert) and
the new values under ``new(physical)``. Phase 2 reads the matched rows once: they get DV entries
(with before-images), updated rows are written again keeping their identity, inserted rows are
written new. The result is one table's write, for a commit the caller makes (an apply changes two
tables in one commit).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TypeVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from changelake.catalog.writes import TableWrite
from changelake.dml.common import Target
from changelake.dml.matches import Matches, find_matches, inserted_rows, new
from changelake.dml.replace import NewRows, replace_matches
from changelake.runtime.env import Context
from changelake.storage.snapshot import RID

T = TypeVar("T")
WRITE_ACTION = "_cl_action"
# U: update, keeping the old value of ``keep_old`` columns whose new value is NULL; R: update
# with the new values only; D: delete; I: insert; N: nothing (a row only ``also`` reads).
UPDATE, REPLACE, REMOVE, INSERT, NOTHING = "U", "R", "D", "I", "N"


def rewrite(
    ctx: Context,
    target: Target,
    found: DataFrame,
    *,
    keep_old: Collection[str] = (),
    part: str = "",
    also: Callable[[DataFrame], T] | None = None,
) -> tuple[TableWrite, T | None]:
    """Apply ``found`` (phase 1, see the module docstring) to ``target``; files go to the
    statement's directories suffixed with ``part``. ``also`` is called with the found rows
    while they are still persisted, after the target's files are written; its result is
    returned beside the table write."""
    schema = target.state.schema
    kind = F.col(WRITE_ACTION)
    kept = {c.lower() for c in keep_old}

    def new_rows(matches: Matches, rows: DataFrame) -> NewRows:
        """The new rows of the ``matches``, given phase 2's ``rows``."""
        counts = matches.per_kind
        parts = []
        if counts[UPDATE] + counts[REPLACE]:
            values = []
            for c in schema.columns:
                value = F.col(new(c.physical))
                if c.name.lower() in kept:
                    old = F.col(f"`{c.name}`")
                    value = F.when(kind == UPDATE, F.coalesce(value, old)).otherwise(value)
                values.append(value.alias(c.name))
            parts.append(rows.where(kind.isin(UPDATE, REPLACE)).select(*values, RID))
        if counts[INSERT]:
            parts.append(inserted_rows(matches.rows.where(kind == INSERT), schema))
        return NewRows(
            tuple(parts), updated=counts[UPDATE] + counts[REPLACE], inserted=counts[INSERT]
        )

    with find_matches(
        found, target=target, operation="APPLY CHANGES", kind=kind, kinds=(UPDATE, REPLACE, REMOVE, INSERT)
    ) as matches:  # fmt: skip
        write = replace_matches(
            ctx,
            target,
            matches,
            new_rows=lambda rows, _: new_rows(matches, rows),
            part=part,
        )
        extra = also(matches.rows) if also is not None else None
    return write, extra


def found_columns(target: Target, values: dict[str, object]) -> list:
    """``new(physical)`` columns for every target column: ``values`` (column name -> Spark
    column) where given, else NULL of the column's type."""
    by_lower = {k.lower(): v for k, v in values.items()}
    out = []
    for c in target.state.schema.columns:
        value = by_lower.get(c.name.lower())
        value = F.lit(None).cast(c.type) if value is None else value
        out.append(value.alias(new(c.physical)))
    return out
