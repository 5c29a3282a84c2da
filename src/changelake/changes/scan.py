"""Executing a change plan as a Spark DataFrame: the table's columns plus METADATA$ columns."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from changelake.catalog import Catalog
from changelake.changes.columns import (
    METADATA_ACTION,
    METADATA_COMMIT_TIMESTAMP,
    METADATA_COMMIT_VERSION,
    METADATA_ISUPDATE,
    METADATA_ROW_ID,
)
from changelake.changes.plan import (
    Born,
    ChangePlan,
    DeletedRows,
    FileRows,
    Information,
    Pairing,
)
from changelake.runtime.env import Env
from changelake.schema import ROW_VERSION, STORED_ROW_ID, TableSchema, quoted
from changelake.spark.local import local_relation
from changelake.spark.native import ROW_HEX
from changelake.spark.relation import Relation
from changelake.storage.deletion import (
    DV_FILE,
    KEY,
    TAG,
    has_images,
    image_schema,
    join_side,
    read_registered,
)
from changelake.storage.read_path import Scan
from changelake.storage.row_ids import row_id_sql, scrambled_sql
from changelake.storage.snapshot import (
    FILE,
    RID,
    VER,
    empty_relation,
    logical_schema,
    physical_schema,
    scan_files,
)
from changelake.storage.warehouse import Warehouse


def row_id(table_id: int, rid: str) -> str:
    """The METADATA$ROW_ID of a row identity, as SQL text over the identity column ``rid``
    (``storage.row_ids``: scans read it as the reader's ``ROW_HEX`` instead)."""
    return row_id_sql(table_id, rid)


def table_row_id(schema: TableSchema) -> str:
    """The METADATA$ROW_ID of rows read with ``ROW_HEX`` (``state_relation(row_ids=True)``), or
    the row key of a dynamic table, whose rows keep their defining query's ROW_IDs, as SQL text."""
    key = schema.row_key
    return ROW_HEX if key is None else quoted(key.name)


def _columns(schema: TableSchema, tag: str, *, rid: str = RID) -> list[str]:
    """SQL expressions: the user's columns by their names, ``_cl_rid``, ``_cl_tag`` and the
    ROW_ID as the scan read it (``ROW_HEX``)."""
    return [f"{quoted(c.physical)} AS {quoted(c.name)}" for c in schema.columns] + [
        f"{rid} AS {RID}",
        f"{tag} AS {TAG}",
        ROW_HEX,
    ]


def _rows(
    spark: SparkSession, wh: Warehouse, schema: TableSchema, part: FileRows, table_id: int
) -> Relation:
    """One scan of the part's files, less the positions of the DVs it subtracts; one more per
    other bound on their rows' versions (a compaction's files: ``Born``)."""
    by_born: dict[Born, list[int]] = {}
    for i, born in enumerate(part.file_born()):
        by_born.setdefault(born, []).append(i)
    frames = []
    for born, indexes in by_born.items():
        files = [part.files[i] for i in indexes]
        paths = {f.path: f for f in files}
        scan = Scan(
            tuple(files),
            physical_schema(schema),
            identity=True,
            tags=tuple(part.tags[i] for i in indexes),
            row_ids_of=table_id,
            deleted=tuple((dv, paths[d], None) for dv, d in part.minus_dvs if d in paths),
        )
        rel = scan_files(spark, wh, scan)
        if part.inserted_only:
            rel = rel.where(f"{STORED_ROW_ID} IS NULL")
        if born.after is not None:
            rel = rel.where(f"{VER} > {born.after}")
        if born.by is not None:
            rel = rel.where(f"{VER} <= {born.by}")
        frames.append(rel.select(*_columns(schema, "_i_tag")))
    out = frames[0]
    for frame in frames[1:]:
        out = out.union(frame)
    return out


def _deleted(
    spark: SparkSession, wh: Warehouse, schema: TableSchema, part: DeletedRows, table_id: int
) -> Relation:
    """The deleted rows: from the before-images of the DV files that carry them (no data file
    read), else from one scan of the data files joined with the positions."""
    by_path = {f.path: f for f in part.files}
    parts = [(dv, by_path[data], v) for v, dv, data in part.dvs]
    imaged = [p for p in parts if has_images(wh, p[0])]
    plain = [p for p in parts if not has_images(wh, p[0])]
    physical = physical_schema(schema)
    frames = []
    if imaged:
        images = read_registered(
            spark, wh, image_schema(physical), imaged, row_ids_of=table_id, sized=False
        )
        if part.born_by is not None:  # a before-image keeps its row's version
            images = images.where(f"{ROW_VERSION} <= {part.born_by}")
        frames.append(images.select(*_columns(schema, TAG, rid=STORED_ROW_ID)))
    if plain:
        files = tuple({data.path: data for _, data, _ in plain}.values())
        scan = Scan(files, physical, positions=True, identity=True, row_ids_of=table_id)
        rows = scan_files(spark, wh, scan)
        dv = Relation.of_frame(join_side(spark, wh, plain, tagged=True))
        cond = f"_l.{KEY} = _r.{KEY} AND _l.{FILE} >= _r.{DV_FILE} AND _l.{FILE} <= _r.{DV_FILE}"
        columns = [f"_l.{quoted(c)}" for c in rows.columns] + [f"_r.{TAG}"]
        joined = rows.join(dv, cond, columns=columns)
        if part.born_by is not None:
            joined = joined.where(f"{VER} <= {part.born_by}")
        frames.append(joined.select(*_columns(schema, TAG)))
    return frames[0] if len(frames) == 1 else frames[0].union(frames[1])


def _side(
    spark: SparkSession,
    wh: Warehouse,
    schema: TableSchema,
    parts: list[FileRows | DeletedRows],
    table_id: int,
) -> Relation | None:
    frames = []
    for part in parts:
        if part.empty:
            continue
        if isinstance(part, FileRows):
            frames.append(_rows(spark, wh, schema, part, table_id))
        else:
            frames.append(_deleted(spark, wh, schema, part, table_id))
    if not frames:
        return None
    out = frames[0]
    for frame in frames[1:]:
        out = out.union(frame)
    return out


ROWS_PER_PARTITION = 500_000
_X, _P = "_cl_x", "_cl_part"  # the scrambled identity (the ROW_ID as a long), its partition


@dataclass(frozen=True)
class RowOrder:
    """Partitions change rows so that they come out in ROW_ID order with no global sort:
    partition ``i`` holds only smaller ROW_IDs than partition ``i + 1``, and each partition is
    sorted (by the merge join that pairs the two sides, or by a local sort).

    Every row identity of the files read is below ``2**width`` (a file's rows have ids below
    its base row id plus its row count: the base is taken from the table's counter after every
    id its rows carry). Above that width all scrambled ids share the mask's bits, so the top
    ``bits`` bits below it order the partitions.
    """

    width: int
    bits: int

    @staticmethod
    def for_plan(plan: ChangePlan, most: int) -> RowOrder:
        """One partition per ``ROWS_PER_PARTITION`` rows read, at most ``most``, times two (the
        scramble can leave half of the id space empty). Without a bound (a file with no base
        row id yet: not seen in practice) the order still holds, in one partition."""
        files = plan.before_files.files + plan.before_deleted.files + plan.after_files.files
        ends = [f.base_row_id + f.row_count for f in files if f.base_row_id is not None]
        width = max(ends, default=1).bit_length() if len(ends) == len(files) else 63
        rows = plan.before_rows + plan.after_files.rows
        partitions = min(most, -(-rows // ROWS_PER_PARTITION))
        bits = 0 if partitions <= 1 else (partitions - 1).bit_length() + 1
        return RowOrder(width, min(width, bits))

    @property
    def partitions(self) -> int:
        return 1 << self.bits

    def spread(self, spark: SparkSession, rel: Relation, table_id: int) -> Relation:
        """``rel`` (with ``RID``) plus ``_X`` and ``_P``, partitioned by ``_P``: partition ``i``
        holds the rows whose ``_P`` is ``i``, which SQL cannot say (its hints hash or sample),
        so this step is a DataFrame's (only ordered changelogs take it)."""
        x = scrambled_sql(table_id, RID)
        part = f"CAST(shiftright({x} & {(1 << self.width) - 1}, {self.width - self.bits}) AS INT)"
        out = rel.select("*", f"{x} AS {_X}", f"{part} AS {_P}")
        spread = out.frame(spark).repartitionById(self.partitions, F.col(_P))
        return Relation.of_frame(spread, out.columns)


def _labelled(
    spark: SparkSession,
    rel: Relation,
    schema: TableSchema,
    action: str,
    table_id: int,
    order: RowOrder | None,
) -> Relation:
    if order is not None:
        spread = order.spread(spark, rel, table_id)
        rel = Relation.query(f"SELECT * FROM {{r}} AS _s SORT BY {_X}", spread.columns, r=spread)
    return rel.select(
        *[quoted(c.name) for c in schema.columns],
        f"'{action}' AS {quoted(METADATA_ACTION)}",
        f"false AS {quoted(METADATA_ISUPDATE)}",
        f"{ROW_HEX} AS {quoted(METADATA_ROW_ID)}",
        TAG,
    )


def _minimize(
    spark: SparkSession,
    before: Relation,
    after: Relation,
    schema: TableSchema,
    table_id: int,
    order: RowOrder | None,
    pairing: Pairing,
) -> Relation:
    """Pairs the two sides by identity in one full outer join, and turns each pair that differs
    into its events: the DELETE of the old row first, then the INSERT of the new one.

    ``order``: the sides are partitioned by it and merge-joined, so the output is sorted by
    (tag, ROW_ID) in each partition. Else ``pairing`` says how: in one task (both sides
    coalesced into the task that reads them, the before side hashed: no exchange, no sort), or
    by Spark's shuffle.

    A table whose rows carry a row key (a dynamic or external table) pairs them by that key, the
    rows' ROW_ID: a key deleted and written again (a group gone and back, a source key deleted
    and inserted again) gets a new physical identity, and is still one row. Each side holds a
    key at most once: the rows at the start that left, the rows at the end that arrived.

    Flat columns, not a struct per side and an array of events: a small plan's expressions are
    interpreted, and building, comparing and exploding structs was most of its time.
    """
    key = schema.row_key
    identity = scrambled_sql(table_id, RID) if key is None else quoted(key.name)
    names = [quoted(c.name) for c in schema.columns]
    # a dynamic table's state columns alone changing is no change of its rows
    state = {c.name for c in schema.state}
    compared = [quoted(c.name) for c in schema.columns if c.name not in state]
    one_task = order is None and pairing is Pairing.ONE_TASK

    def side(rel: Relation, present: str) -> Relation:
        if order is not None:
            rel = order.spread(spark, rel, table_id)
            keys = [_X, _P]
        else:
            keys = [f"{identity} AS {_X}", f"0 AS {_P}"]
        if one_task:
            rel = Relation.query("SELECT /*+ COALESCE(1) */ * FROM {r} AS _c", rel.columns, r=rel)
        return rel.select(TAG, *keys, f"true AS {present}", ROW_HEX, *names)

    # the sides' markers: a user's column never has the hidden prefix
    bp, ap = "_b0._cl_before", "_a0._cl_after"

    def event(alias: str, present: str, other: str, action: str) -> str:
        values = ", ".join(f"{alias}.{n}" for n in [ROW_HEX, *names])
        return f"{present}, '{action}', {other} IS NOT NULL, {values}"

    same = " AND ".join([bp, ap, *[f"_b0.{c} <=> _a0.{c}" for c in compared]])
    values = [f"_v{i}" for i in range(len(names))]
    events = (
        f"stack(2, {event('_b0', bp, ap, 'DELETE')}, {event('_a0', ap, bp, 'INSERT')})"
        f" AS (_f, _act, _upd, _id, {', '.join(values)})"
    )
    # the hash is built of the deleted rows: the after side may hold many fresh inserts
    hint = "/*+ SHUFFLE_HASH(_b0) */ " if one_task else ""
    joined = Relation.query(
        f"SELECT {hint}{TAG}, {events} FROM {{b}} AS _b0 FULL OUTER JOIN {{a}} AS _a0"
        f" USING ({TAG}, {_X}, {_P}) WHERE NOT coalesce({same}, false)",
        [TAG, "_f", "_act", "_upd", "_id", *values],
        b=side(before, "_cl_before"),
        a=side(after, "_cl_after"),
    )
    return joined.where("_f").select(
        *[f"{v} AS {n}" for v, n in zip(values, names, strict=True)],
        f"_act AS {quoted(METADATA_ACTION)}",
        f"_upd AS {quoted(METADATA_ISUPDATE)}",
        f"_id AS {quoted(METADATA_ROW_ID)}",
        TAG,
    )


# Per row of a pairing of old row images ``_b`` (or NULL) with new ones ``_a`` (or NULL): its
# DELETE event then its INSERT event (``a``: action, ``u``: is an update, ``v``: the image), one
# row each, and a NULL event for a missing side, to filter out.
PAIR_EVENTS = (
    "explode(array("
    "CASE WHEN _b IS NOT NULL THEN named_struct('a', 'DELETE', 'u', _a IS NOT NULL, 'v', _b) END,"
    " CASE WHEN _a IS NOT NULL THEN named_struct('a', 'INSERT', 'u', _b IS NOT NULL, 'v', _a) END"
    "))"
)


def output_schema(schema: TableSchema, information: Information) -> StructType:
    shown = {c.name for c in schema.visible}
    fields = [f for f in logical_schema(schema).fields if f.name in shown] + [
        StructField(METADATA_ACTION, StringType(), False),
        StructField(METADATA_ISUPDATE, BooleanType(), False),
        StructField(METADATA_ROW_ID, StringType(), False),
    ]
    if information is Information.REDO:
        fields += [
            StructField(METADATA_COMMIT_VERSION, LongType(), False),
            StructField(METADATA_COMMIT_TIMESTAMP, TimestampType(), False),
        ]
    return StructType(fields)


def change_relation(
    env: Env,
    plan: ChangePlan,
    schema: TableSchema,
    *,
    ordered: bool = False,
) -> Relation:
    """The changes ``plan`` describes, as one relation (the catalog: commit times for REDO).

    ``ordered``: in changelog order, partition after partition: by commit version (REDO), then
    ROW_ID, the DELETE half of an update first.
    """
    spark = env.spark
    parts = (env.warehouse, schema)
    before = _side(spark, *parts, [plan.before_files, plan.before_deleted], plan.table_id)
    after = _side(spark, *parts, [plan.after_files], plan.table_id)
    # REDO is sorted below anyway; the ROW_IDs of rows with a row key are their keys, which
    # ``RowOrder`` does not order: those are sorted at the end
    spread = ordered and plan.information is not Information.REDO and schema.row_key is None
    order = None
    if spread:
        order = RowOrder.for_plan(plan, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))
    if before is not None and after is not None:
        rel = _minimize(spark, before, after, schema, plan.table_id, order, plan.pairing)
    elif after is not None:
        rel = _labelled(spark, after, schema, "INSERT", plan.table_id, order)
    elif before is not None:
        rel = _labelled(spark, before, schema, "DELETE", plan.table_id, order)
    else:
        typed = [(c.name, c.type) for c in schema.columns]
        typed += [(TAG, "bigint"), (RID, "bigint"), (ROW_HEX, "string")]
        rel = _labelled(spark, empty_relation(typed), schema, "INSERT", plan.table_id, None)
    rel = _keyed(rel, schema)
    if plan.information is Information.REDO:
        return _with_commit_info(env.catalog, plan, rel)
    if ordered and not spread:
        # DELETE before INSERT
        rel = Relation.query(
            f"SELECT * FROM {{r}} AS _o ORDER BY {quoted(METADATA_ROW_ID)}, {quoted(METADATA_ACTION)}",
            rel.columns,
            r=rel,
        )
    return rel.drop(TAG)


def _keyed(rel: Relation, schema: TableSchema) -> Relation:
    """A dynamic table's changes: their ROW_ID is the row key (the defining query's ROW_ID),
    which is not a column of the output, nor are its state columns."""
    key = schema.row_key
    if key is None:
        return rel
    gone = {key.name, *[c.name for c in schema.state]}
    return rel.select(
        *[
            quoted(key.name) + f" AS {quoted(METADATA_ROW_ID)}"
            if c == METADATA_ROW_ID
            else quoted(c)
            for c in rel.columns
            if c not in gone
        ]
    )


def _with_commit_info(catalog: Catalog, plan: ChangePlan, rel: Relation) -> Relation:
    versions = catalog.versions(
        plan.table_id, after_exclusive=plan.start_version, upto_inclusive=plan.end_version
    )
    commits = local_relation(
        [(v.version, dt.datetime.fromtimestamp(v.committed_at)) for v in versions],
        [(TAG, "bigint"), (METADATA_COMMIT_TIMESTAMP, "timestamp")],
    )
    own = [f"_l.{quoted(c)}" for c in rel.columns if c != TAG]
    columns = [
        *own,
        f"_l.{TAG} AS {quoted(METADATA_COMMIT_VERSION)}",
        f"_r.{quoted(METADATA_COMMIT_TIMESTAMP)}",
    ]
    out = rel.join(commits, f"_l.{TAG} = _r.{TAG}", "left", columns=columns, hint="BROADCAST(_r)")
    order = [METADATA_COMMIT_VERSION, METADATA_ROW_ID, METADATA_ACTION]
    return Relation.query(
        f"SELECT * FROM {{r}} AS _o ORDER BY {', '.join(map(quoted, order))}", out.columns, r=out
    )
