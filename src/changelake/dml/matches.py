"""Row-level writes: finding the matched rows, and phase 2 of the two-phase plan.

Phase 1 runs the statement's query over the target reading only the columns its conditions and
new values need (Spark prunes the rest), and keeps the matched target positions (``_cl_file``,
``_cl_pos``) with what the statement computed for them: small, persisted, counted per file in one
Spark job. Phase 2 reads full rows (old values, identity) only of the files that have a match,
once, joined to the matched positions by one broadcast join. (In one pass, chosen by
``strategy.py``, the query also selects the old rows and there is no phase 2.) A statement thus
runs a constant number of Spark jobs, and in two phases files without a match are never read whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from changelake.dml.common import Target, duplicate_target_row
from changelake.schema import TableSchema
from changelake.storage.deletion import DRIVER_POSITIONS, KEY
from changelake.storage.read_path import Scan
from changelake.storage.snapshot import (
    ADDRESS,
    FILE,
    IDENTITY,
    POS,
    RID,
    file_name,
    physical_schema,
    same_address,
    scan_files,
)
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import run_checked

# Past this many matched positions phase 2 joins by shuffle instead of broadcasting them.
BROADCAST_MATCHES = 1_000_000


def new(physical: str) -> str:
    """The column phase 1 names the new value of physical column ``physical``."""
    return f"_cl_new_{physical}"


def inserted_rows(found: DataFrame, schema: TableSchema) -> DataFrame:
    """Phase 1 rows ``found`` as new rows of a table of ``schema``: their new values under the
    column names, and no identity (the commit gives them fresh row ids)."""
    values = [F.col(new(c.physical)).alias(c.name) for c in schema.columns]
    return found.select(*values, F.lit(None).alias(RID))


@dataclass(frozen=True)
class Matches:
    """Phase 1's result: ``rows`` (persisted) and its counts.

    ``per_file`` counts matched target rows per data file name; ``per_kind`` counts rows per value
    of the statement's kind column (MERGE actions), when it has one.
    """

    rows: DataFrame
    per_file: dict[str, int]
    per_kind: dict[str, int]

    @property
    def matched(self) -> int:
        return sum(self.per_file.values())


@contextmanager
def persisted(df: DataFrame) -> Iterator[DataFrame]:
    """``df`` persisted (lazily, at its first action) for the ``with`` block."""
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield df
    finally:
        df.unpersist()


@contextmanager
def find_matches(
    found: DataFrame,
    *,
    target: Target,
    operation: str,
    kind: SparkColumn | None = None,
    kinds: Sequence[str] = (),
    joined: bool = True,
) -> Iterator[Matches]:
    """Phase 1: persist ``found`` (the statement's query: ``_cl_file``/``_cl_pos`` of matched
    target rows, NULL for rows that match none, plus computed columns) and count it per file and
    per ``kind`` in one query; unpersisted on exit.

    If the statement ``joined`` source rows to the target, raises DuplicateTargetRowError when a
    target position appears twice (a target row matched more than one source row); a scan of the
    target alone yields each position once, and skips that check.
    """
    with persisted(found) as rows:
        by_kind = [F.count(F.when(kind == k, 1)).alias(f"_k{i}") for i, k in enumerate(kinds)]
        distinct = [F.countDistinct(POS).alias("_d")] if joined else []
        counts = run_checked(
            lambda: rows.groupBy(FILE).agg(F.count("*").alias("_n"), *distinct, *by_kind).collect(),
            table=target.info.name,
        )
        per_file = {r[FILE]: r["_n"] for r in counts if r[FILE] is not None}
        if joined and any(r["_n"] != r["_d"] for r in counts if r[FILE] is not None):
            raise duplicate_target_row(operation, target.info.name)
        per_kind = {k: sum(r[f"_k{i}"] for r in counts) for i, k in enumerate(kinds)}
        yield Matches(rows, per_file, per_kind)


def positions_of(matches: Matches) -> dict[str, pa.Array]:
    """The matched positions per data file name (one small Spark job over the persisted
    matches, read as Arrow)."""
    found = matches.rows.where(F.col(FILE).isNotNull()).select(FILE, POS).toArrow()
    grouped = found.group_by(FILE).aggregate([(POS, "list")])
    names = grouped.column(FILE).to_pylist()
    lists = grouped.column(f"{POS}_list")
    return {name: lists[i].values for i, name in enumerate(names)}


def address(alias: str) -> list[exp.Column]:
    """The target's address columns, which phase 1 selects for each matched row."""
    return [exp.column(c, table=alias) for c in ADDRESS]


def matched_rows(
    spark: SparkSession, warehouse: Warehouse, target: Target, matches: Matches
) -> DataFrame:
    """Phase 2: the target's rows at the matched positions, with every column (logical names:
    the old values), ``_cl_rid`` / ``_cl_ver``, and the columns of ``matches.rows``.

    Reads only the files that have a match, in one scan, and keeps the matched rows by one join
    on their address: deletion vectors need not be applied (phase 1 matched live rows only).
    Up to ``DRIVER_POSITIONS`` matches, their positions (small metadata) go to the reader, which
    then reads only the pages that hold them and decodes only their rows (late
    materialization)."""
    files = [f.file for f in target.state.files if file_name(f.file.path) in matches.per_file]
    schema = target.state.schema
    physical = physical_schema(schema)
    only = positions_of(matches) if matches.matched <= DRIVER_POSITIONS else None
    scan = Scan(tuple(files), physical, positions=True, identity=True, only=only)
    scanned = scan_files(spark, warehouse, scan).frame(spark)
    computed = [c for c in matches.rows.columns if c not in ADDRESS]
    found = matches.rows.where(F.col(FILE).isNotNull())
    found = found.select(*[F.col(c).alias(f"_m{c}") for c in ADDRESS], *computed)
    if matches.matched <= BROADCAST_MATCHES:
        found = F.broadcast(found)
    cond = same_address(scanned[KEY], scanned[FILE], found[f"_m{KEY}"], found[f"_m{FILE}"])
    rows = scanned.join(found, cond)
    return rows.select(
        *[F.col(c.physical).alias(c.name) for c in schema.columns],
        *[F.col(c) for c in (*ADDRESS, *IDENTITY)],
        *computed,
    )
