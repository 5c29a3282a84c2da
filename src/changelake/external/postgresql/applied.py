"""A follow step's write: the folded source rows staged as one Parquet file and applied to
the stored rows by row key (``dml.keyed``), as the minimum delta.

The stored rows compared are those of the folded keys, read only from the files whose key
statistics leave room for one of them (``storage.pruning.holding``). On a table too large for
one task, one parallel job finds them (the keys as literals in its scan) and stages them, so the
delta and its write are a small plan: three Spark jobs in all (the lookup, the new rows, the
deletion vectors); a small table's step is one plan of two jobs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from changelake.arrow_types import arrow_type
from changelake.catalog.model import DataFile, ExternalTableInfo, LiveFile
from changelake.catalog.writes import TableWrite, WriteKind
from changelake.changes.columns import METADATA_ACTION, METADATA_ISUPDATE, METADATA_ROW_ID
from changelake.dml.common import Target
from changelake.dml.keyed import STORED, apply_delta, diff
from changelake.external.rows import row_key_sql
from changelake.schema import ROW_KEY, quoted
from changelake.spark import native
from changelake.spark.local import sql_literal
from changelake.spark.relation import DEFAULT_SMALL_INPUT, small_input_bytes
from changelake.spark.relation import Relation as Plan
from changelake.storage.pruning import holding
from changelake.storage.snapshot import FILE, state_relation
from changelake.storage.warehouse import Warehouse
from changelake.txn.snapshot import TableState

# Up to this many source keys, a large table's lookup names them as literals in its scan
LOOKUP_LITERALS = 10_000
# types of key values written exactly as SQL literals (and decimal(p,s))
_LITERAL_TYPES = frozenset({"int", "bigint", "smallint", "tinyint", "string", "date"})
_GONE, _KEEP, _FROM, _STAGED = "_cl_gone", "_cl_keep", "_cl_from_", "-staged"


class FoldedRow(NamedTuple):
    """A source key's final row."""

    values: dict[str, object]  # by column
    keep: frozenset[str]  # the columns to keep as stored (values the source did not send)
    stored_key: tuple  # the key of the stored row that has them


@dataclass
class Folded:
    """Per source key, the final row or None (gone); ``truncated``: the source table was emptied
    before these."""

    rows: dict[tuple, FoldedRow | None] = field(default_factory=dict)
    truncated: bool = False
    changes: int = 0


def columns_of(ext: ExternalTableInfo) -> list[tuple[str, str]]:
    return [(n, t) for n, t in ext.definition.spec["columns"]]


def apply_folded(
    spark: SparkSession,
    warehouse: Warehouse,
    ext: ExternalTableInfo,
    state: TableState,
    folded: Folded,
    statement_id: str,
    *,
    keep: str | None,
    base: Sequence[DataFile] | None = None,
    stored: str | None = None,
) -> TableWrite:
    """Write what turns the stored rows into the folded rows that satisfy ``keep`` (None:
    all), matched by row key. The stored rows compared are those of the folded keys (all, after
    a TRUNCATE) and those that satisfy ``stored``.

    ``base``: the table's own data files, not committed, that a bootstrap's snapshot wrote
    (rows satisfying ``keep``): what a key not folded holds. Every base file is added as
    written; a base row whose key was folded is superseded, deleted by a deletion vector of the
    same commit (a row that never was the table's: ``changes.plan`` reads no change of it), and
    a base file every row of which is superseded is not added (after a TRUNCATE none is: the
    base is gone). The write returned adds the files kept; those it does not add are the
    caller's to delete."""
    if base is not None and not folded.rows and not folded.truncated and stored is None:
        # no change since the snapshot and no stored row leaves: its files are the write
        return TableWrite(
            ext.table_id,
            ext.name,
            state.version,
            WriteKind.CHANGE,
            added=tuple(f for f in base if f.row_count),  # an empty file is not kept
            inserted=sum(f.row_count for f in base),
        )
    staged = _stage(warehouse, ext, folded, statement_id)
    try:
        held: list[LiveFile] = []
        kept: list[DataFile] = []
        if base is not None and not folded.truncated:
            keys = ext.definition.spec["keys"]
            live = [LiveFile(f) for f in base if f.row_count]
            held = holding(live, state.schema, keys, folded.rows) if folded.rows else []
            kept = [f.file for f in live]
        superseded = None
        if held:
            superseded = state_relation(spark, warehouse, state.with_files(held), identity=True)
        every = None
        if base is not None:  # values a change did not repeat may come from any base row
            every = state_relation(spark, warehouse, state.with_files([LiveFile(f) for f in base]))
        delta = _delta(
            spark, warehouse, ext, state, folded, staged, keep, superseded, every, stored
        )
        # the base files the superseded rows' deletes name are the target's too
        target = Target(ext.info, state.with_files([*state.files, *held]))
        write = apply_delta(spark, warehouse, target, delta, statement_id=statement_id)
        return _with_base(write, kept)
    finally:
        warehouse.fs.delete_dir(warehouse.fs_path(staged.rsplit("/", 1)[0]))


def _with_base(write: TableWrite, base: Sequence[DataFile]) -> TableWrite:
    """``write`` adding the ``base`` files too, but those whose every row it deletes; the
    rows it deletes of them were never the table's, so neither they nor the files' other
    rows count as inserted or deleted twice."""
    paths = {f.path for f in base}
    emptied = {p for p in write.removed if p in paths}
    superseded = sum(f.row_count for f in base if f.path in emptied)
    superseded += sum(d.row_count for d in write.deletes if d.file_path in paths)
    kept = [f for f in base if f.path not in emptied]
    return replace(
        write,
        added=(*write.added, *kept),
        removed=tuple(p for p in write.removed if p not in emptied),
        inserted=write.inserted + sum(f.row_count for f in base) - superseded,
        deleted=write.deleted - superseded,
    )


def _stage(warehouse: Warehouse, ext: ExternalTableInfo, folded: Folded, statement_id: str) -> str:
    """Write the folded rows as one Parquet file (their values, gone, the columns to keep)."""
    columns = columns_of(ext)
    keys = ext.definition.spec["keys"]
    # a key that is gone keeps its key values (its row key finds the stored row)
    entries = [
        FoldedRow(dict(zip(keys, key, strict=True)), frozenset(), key) if e is None else e
        for key, e in folded.rows.items()
    ]
    gone = [e is None for e in folded.rows.values()]
    types = dict(columns)
    arrays = [pa.array([e.values.get(n) for e in entries], arrow_type(t)) for n, t in columns]
    arrays.append(pa.array(gone, pa.bool_()))
    arrays.append(pa.array([",".join(sorted(e.keep)) or None for e in entries], pa.string()))
    arrays += [
        pa.array([e.stored_key[i] for e in entries], arrow_type(types[k]))
        for i, k in enumerate(keys)
    ]
    names = [*(n for n, _ in columns), _GONE, _KEEP, *(_FROM + k for k in keys)]
    if not entries:  # a TRUNCATE alone: the schema, no rows
        arrays = [pa.array([], a.type) for a in arrays]
    # not in the statement's data directory: every file there becomes the table's
    directory = warehouse.data_dir(statement_id, _STAGED)
    path = f"{directory}/{uuid.uuid4().hex}.parquet"
    warehouse.fs.create_dir(warehouse.fs_path(directory), recursive=True)
    with warehouse.fs.open_output_stream(warehouse.fs_path(path)) as out:
        pq.write_table(pa.Table.from_arrays(arrays, names=names), out)
    return path


def _delta(
    spark: SparkSession,
    warehouse: Warehouse,
    ext: ExternalTableInfo,
    state: TableState,
    folded: Folded,
    staged: str,
    keep: str | None,
    superseded: Plan | None,
    every_base: Plan | None,
    stored_where: str | None,
) -> Plan:
    """The minimum delta (see ``apply_folded``), with the stored rows' addresses: one plan."""
    columns = columns_of(ext)
    names = [n for n, _ in columns]
    types = dict(columns)
    keys = ext.definition.spec["keys"]
    # with its schema given, Spark runs no job to infer it from the file
    staged_schema = ", ".join(
        [
            *(f"{quoted(n)} {t}" for n, t in columns),
            f"{_GONE} boolean",
            f"{_KEEP} string",
            *(f"{quoted(_FROM + k)} {types[k]}" for k in keys),
        ]
    )
    staged_names = [*names, _GONE, _KEEP, *(_FROM + k for k in keys)]
    read = spark.read.schema(staged_schema).parquet(warehouse.uri(staged))
    key = row_key_sql(keys, types)
    new = Plan.of_frame(read, staged_names).select("*", f"{key} AS {quoted(ROW_KEY)}")
    touched = new.select(f"{quoted(ROW_KEY)} AS _cl_k")
    by_key = f"_l.{quoted(ROW_KEY)} = _r._cl_k"
    kept_from = [e.stored_key for e in folded.rows.values() if e is not None and e.keep]
    looked_up = None
    if folded.truncated:  # every stored row is compared: a TRUNCATE emptied the source
        stored = state_relation(spark, warehouse, state, identity=True)
    elif stored_where is None:
        # only the files whose key statistics leave room for a folded key are read
        wanted = [*folded.rows, *kept_from]
        held = _holding(state, keys, wanted)
        if _planned_small(spark, held):
            stored = state_relation(spark, warehouse, held, identity=True)
        else:  # read once, in parallel, and staged: the rest of the step is a small plan
            stored = looked_up = _looked_up(
                spark, warehouse, ext, held, wanted, touched, f"{staged.rsplit('/', 1)[0]}/lookup"
            )
        stored = stored.join(touched, by_key, "left_semi")
    else:
        stored = state_relation(spark, warehouse, state, identity=True)
        hit = stored.join(touched, by_key, "left", columns=[*_all("_l", stored), "_r._cl_k"])
        stored = hit.where(f"_cl_k IS NOT NULL OR coalesce({stored_where}, false)").drop("_cl_k")
    values = [quoted(n) for n in names]
    gone = None
    if superseded is not None:
        # a base row of a folded key is superseded: deleted in the commit that adds its file
        # (a key no transaction touched keeps its base row, as written: no stored row has that
        # key, it was outside the old scope at the snapshot and has not changed since)
        gone = superseded.join(touched, by_key, "left_semi").select(
            *values,
            f"'DELETE' AS {quoted(METADATA_ACTION)}",
            f"false AS {quoted(METADATA_ISUPDATE)}",
            f"{quoted(ROW_KEY)} AS {quoted(METADATA_ROW_ID)}",
            *STORED,
        )
    keeps = any(e is not None and e.keep for e in folded.rows.values())
    if keeps:  # values a change did not repeat: the stored row's (or the base row's)
        every = looked_up or state_relation(
            spark, warehouse, _holding(state, keys, kept_from), identity=True
        )
        sources = every.select(quoted(ROW_KEY), *values)
        if every_base is not None:
            sources = sources.union(every_base.select(f"{key} AS {quoted(ROW_KEY)}", *values))
        old = sources.select(
            f"{quoted(ROW_KEY)} AS _cl_ok", *[f"{quoted(n)} AS {_old(n)}" for n in names]
        )
        kept = f"split(coalesce(_l.{_KEEP}, ''), ',')"
        new = new.join(
            old,
            f"{row_key_sql(keys, types, _FROM, table='_l')} = _r._cl_ok",
            "left",
            columns=[
                *[
                    f"CASE WHEN array_contains({kept}, {sql_literal(n)}) THEN _r.{_old(n)}"
                    f" ELSE _l.{quoted(n)} END AS {quoted(n)}"
                    for n in names
                ],
                f"_l.{_GONE}",
                f"_l.{quoted(ROW_KEY)}",
            ],
        )
    rows = new.where(f"NOT {_GONE}")
    if keep is not None:
        rows = rows.where(f"coalesce({keep}, false)")
    rows = rows.select(*values, f"{quoted(ROW_KEY)} AS {quoted(METADATA_ROW_ID)}")
    delta = diff(stored, rows, names, carried=STORED)
    return delta if gone is None else delta.union(gone)


def _planned_small(spark: SparkSession, state: TableState) -> bool:
    """Whether a plan reading ``state``'s files runs as a small plan (``Relation.frame``). The
    setting is read (a py4j round trip) only for files above its default: a smaller setting
    leaves such a step one plan, which is correct, in the jobs of a large plan."""
    size = sum(f.file.size_bytes for f in state.files)
    return size <= DEFAULT_SMALL_INPUT or size <= small_input_bytes(spark)


def _looked_up(
    spark: SparkSession,
    warehouse: Warehouse,
    ext: ExternalTableInfo,
    state: TableState,
    wanted: Sequence[tuple],
    touched: Plan,
    directory: str,
) -> Plan:
    """The stored rows (with their addresses and identities) of the source keys ``wanted``
    (``touched``: their row keys), written to ``directory`` by one job whose tasks scan
    ``state``'s files side by side, and read back (a small input, whatever the table's size).
    The scan keeps the keys' values given as literals (no broadcast, so no job of its own);
    keys of a type without exact literals, or too many of them, are broadcast instead."""
    keys = ext.definition.spec["keys"]
    types = dict(columns_of(ext))
    rows = state_relation(spark, warehouse, state, identity=True)
    literal = all(types[k] in _LITERAL_TYPES or types[k].startswith("decimal") for k in keys)
    if literal and len(wanted) <= LOOKUP_LITERALS:
        names = ", ".join(quoted(k) for k in keys)
        tuples = ", ".join(
            f"({', '.join(sql_literal(v) for v in values)})" for values in set(wanted)
        )
        found = rows.where(f"({names}) IN ({tuples})" if tuples else "FALSE")
    else:
        by_key = f"_l.{quoted(ROW_KEY)} = _r._cl_k"
        found = rows.join(touched, by_key, "left_semi", hint="BROADCAST(_r)")
    native.write_parquet(found.frame(spark), warehouse.uri(directory))
    typed = [(c.name, c.type) for c in state.schema.columns]
    typed += [(FILE, "string"), *((c, "bigint") for c in STORED[1:])]  # POS, KEY, RID, VER
    schema = ", ".join(f"{quoted(n)} {t}" for n, t in typed)
    read = spark.read.schema(schema).parquet(warehouse.uri(directory))
    return Plan.of_frame(read, [n for n, _ in typed])


def _holding(state: TableState, keys: Sequence[str], values: Iterable[tuple]) -> TableState:
    """``state`` with only the files that may hold a row of one of the source keys
    ``values`` (by the key columns' statistics)."""
    return state.with_files(holding(state.files, state.schema, keys, values))


def _all(alias: str, rel: Plan) -> list[str]:
    return [f"{alias}.{quoted(c)}" for c in rel.columns]


def _old(name: str) -> str:
    """The column a stored (or base) row's value of ``name`` is kept in."""
    return quoted(f"_cl_o_{name}")
