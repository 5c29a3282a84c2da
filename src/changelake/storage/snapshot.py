"""A table's state at one version as a Spark DataFrame: files minus deletion vectors, with identity.

Hidden columns, present only when asked for:
``_cl_file`` / ``_cl_pos`` (the row's file name and position: what a deletion vector records),
``_cl_key`` (the same address as one long, which joins hash cheaply),
``_cl_rid`` (stable row identity) and ``_cl_ver`` (version that last changed the row),
``_cl_row_hex`` (the row's METADATA$ROW_ID, ``row_ids.ROW_HEX``).

Joins on a row's address or on its file key on longs, not on file names: Spark hashes a long per
row several times faster than a string. The long stands in for the file name by the file's size
(which Spark reads from the file listing for free), so where two files share a size the join
also compares names, but only for the rows whose key matched.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

import pyarrow as pa
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StructField, StructType

from changelake.catalog.model import DataFile, LiveFile
from changelake.schema import KEY_HASHES, ROW_VERSION, STORED_ROW_ID, TableSchema, quoted
from changelake.spark import native
from changelake.spark.local import equal_unhashed, lookup
from changelake.spark.native import ROW_HEX
from changelake.spark.private import parse_type
from changelake.spark.relation import Relation
from changelake.storage.deletion import (
    DV_FILE,
    KEY,
    Part,
    address_key,
    join_side,
    read_positions,
)
from changelake.storage.read_path import ReadPath, Scan, Way, choose
from changelake.storage.row_ids import mask, row_id_sql
from changelake.storage.warehouse import Warehouse
from changelake.txn.snapshot import TableState

FILE = "_cl_file"
POS = "_cl_pos"
SIZE = "_cl_size"
RID = "_cl_rid"
VER = "_cl_ver"
ADDRESS = (FILE, POS, KEY)
IDENTITY = (RID, VER)


def spark_type(type_name: str) -> DataType:
    return parse_type(type_name)


def physical_schema(schema: TableSchema, *, key_hashes: bool = False) -> StructType:
    """The Parquet schema of data files: ``c<id>`` columns plus the materialized identity columns
    (and a keyed table's ``KEY_HASHES`` if ``key_hashes``)."""
    fields = [StructField(c.physical, spark_type(c.type), True) for c in schema.columns]
    fields += [
        StructField(STORED_ROW_ID, LongType(), True),
        StructField(ROW_VERSION, LongType(), True),
    ]
    if key_hashes:
        fields += [StructField(name, spark_type(type_), True) for name, type_, _ in KEY_HASHES]
    return StructType(fields)


def key_hashed(files: Sequence[LiveFile]) -> bool:
    """Whether every one of ``files`` holds its rows' ``KEY_HASHES`` (files written before they
    were do not: their footers' statistics, kept per file, name no such column)."""
    return all(name in f.file.stats for f in files for name, _, _ in KEY_HASHES)


def logical_schema(schema: TableSchema) -> StructType:
    return StructType([StructField(c.name, spark_type(c.type), c.nullable) for c in schema.columns])


def file_name(path: str) -> str:
    return posixpath.basename(path)


def state_relation(
    spark: SparkSession,
    warehouse: Warehouse,
    state: TableState,
    *,
    identity: bool = False,
    address: bool = False,
    row_ids: bool = False,
    key_hashes: bool = False,
    only: Mapping[str, pa.Array] | None = None,
    late: bool = False,
) -> Relation:
    """The live rows of ``state`` with logical column names, plus the hidden address columns if
    ``address``, the address and identity columns if ``identity`` and ``ROW_HEX`` (the rows'
    METADATA$ROW_IDs) if ``row_ids`` too. A dynamic table's row key comes only with ``address``
    or ``identity`` (it is part of a row's identity); its ``KEY_HASHES`` with ``key_hashes``
    (every file must hold them: ``key_hashed``). ``only`` (data file name -> sorted live
    positions): just those rows, read late (``Scan.only``); ``late``: see ``Scan.late``."""
    shown = state.schema.columns if identity or address else state.schema.visible
    logical = [f"{quoted(c.physical)} AS {quoted(c.name)}" for c in shown]
    hidden = [h for h in (*ADDRESS, *IDENTITY) if identity or (address and h in ADDRESS)]
    hidden += [ROW_HEX] if identity and row_ids else []
    hidden += [name for name, _, _ in KEY_HASHES] if key_hashes else []
    files = state.files
    if only is not None:
        files = tuple(f for f in files if file_name(f.file.path) in only)
    if not files:
        typed = [(c.physical, c.type) for c in state.schema.columns]
        typed += [(STORED_ROW_ID, "bigint"), (ROW_VERSION, "bigint"), (FILE, "string")]
        typed += [(h, "bigint") for h in (POS, KEY, *IDENTITY)] + [(ROW_HEX, "string")]
        typed += [(name, type_) for name, type_, _ in KEY_HASHES]
        return empty_relation(typed).select(*logical, *hidden)
    scan = Scan(
        tuple(f.file for f in files),
        physical_schema(state.schema, key_hashes=key_hashes),
        positions=identity or address,
        identity=identity,
        row_ids_of=state.table_id if identity and row_ids else None,
        deleted=() if only else tuple((dv, f.file, None) for f in files for dv in f.dv_paths),
        only=only,
        late=late,
    )
    rel = scan_files(spark, warehouse, scan)
    return rel.select(*logical, *hidden)


def empty_relation(columns: Sequence[tuple[str, str]]) -> Relation:
    """No rows, with ``columns`` = [(name, Spark SQL type)]."""
    items = ", ".join(f"CAST(NULL AS {t}) AS {quoted(n)}" for n, t in columns)
    return Relation.of_sql(f"SELECT {items} WHERE FALSE", [n for n, _ in columns])


def same_address(
    key: SparkColumn, file: SparkColumn, other_key: SparkColumn, other_file: SparkColumn
) -> SparkColumn:
    """A join condition: equal address keys (the hashed join key), and the same file name,
    compared only for rows whose keys matched."""
    return (key == other_key) & equal_unhashed(file, other_file)


def scan_files(spark: SparkSession, warehouse: Warehouse, scan: Scan) -> Relation:
    """The rows ``scan`` describes, read the way ``read_path.choose`` picks for this session:
    by changelake's Parquet format where the session has it and the deleted positions fit on
    the driver (no join, no per-row lookup or expression); else by Spark's, with changelake's
    expressions or joins for the deletion vectors and the per-file constants."""
    reader = native.reader_available(spark)
    # Spark's reader asks for the expressions only to skip deleted rows or add per-file constants.
    expressions = reader or (bool(scan.deleted or scan.identity) and native.available(spark))
    # The deleted positions are read here for the ways that hold them on the driver, not joins.
    found = read_positions(warehouse, scan.deleted) if scan.deleted and expressions else []
    path = choose(scan, reader=reader, expressions=expressions, positions_past_driver=found is None)
    skipped = _by_file(scan.deleted, found) if found else {}
    if path.way is Way.FORMAT:
        return _format_read(warehouse, scan, skipped)
    return _spark_read(spark, warehouse, scan, path, skipped)


def _by_file(parts: Sequence[Part], found: Sequence[pa.Array]) -> dict[str, pa.Array]:
    """The deleted positions ``found`` for ``parts`` (in their order), merged per data file."""
    by_file: dict[str, list[pa.Array]] = {}
    for (_, data, _), pos in zip(parts, found, strict=True):
        by_file.setdefault(file_name(data.path), []).append(pos)
    return {name: pa.concat_arrays(arrays) for name, arrays in by_file.items()}


def _format_read(warehouse: Warehouse, scan: Scan, skipped: Mapping[str, pa.Array]) -> Relation:
    """``scan`` read by changelake's Parquet format: each file's positions skipped (or only
    ``scan.only``'s kept) and its constants added inside the reader."""
    scramble = None if scan.row_ids_of is None else mask(scan.row_ids_of)
    reads: list[native.FileRead] = []
    for f, tag in zip(scan.files, scan.file_tags, strict=True):
        name = file_name(f.path)
        positions = skipped.get(name) if scan.only is None else scan.only[name]
        reads.append((name, (f.base_row_id, f.begin_version, tag, scramble), positions))
    uris = [warehouse.uri(f.path) for f in scan.files]
    schema = StructType(list(scan.physical.fields) + native.virtual_fields())
    sizes = [f.size_bytes for f in scan.files]
    rel = native.read_relation(
        uris, schema, reads, keep=scan.only is not None, sizes=sizes, late=scan.late
    )
    columns = [quoted(f.name) for f in scan.physical.fields]
    if scan.positions:
        columns += [FILE, POS, SIZE, f"{address_key(SIZE, POS)} AS {KEY}"]
    if scan.identity:
        columns += [*_IDENTITY, "_i_tag"]
    if scan.row_ids_of is not None:
        columns += [ROW_HEX]
    return rel.select(*columns)


def _spark_read(
    spark: SparkSession,
    warehouse: Warehouse,
    scan: Scan,
    path: ReadPath,
    skipped: Mapping[str, pa.Array],
) -> Relation:
    """``scan`` read by Spark's Parquet reader, deleted rows skipped and per-file constants
    added by changelake's expressions or by joins, as ``path`` says."""
    addressed = scan.positions or scan.identity or bool(scan.deleted)
    df = _scan(spark, warehouse, scan.physical, scan.files, positions=addressed)
    if scan.deleted and path.deletes is Way.EXPRESSIONS:
        df = df.where(~native.in_positions(spark, F.col(FILE), F.col(POS), skipped))
    elif scan.deleted:
        dv = join_side(spark, warehouse, scan.deleted)
        df = df.join(dv, same_address(df[KEY], df[FILE], dv[KEY], dv[DV_FILE]), "left_anti")
    if not scan.identity:
        return Relation.of_frame(df)
    if path.way is Way.EXPRESSIONS:
        df = _constants_by_expressions(df, scan)
    else:
        df = _constants_by_join(df, scan)
    df = native.select(df, ["*", *_IDENTITY])
    if scan.row_ids_of is not None:
        df = native.select(df, ["*", f"{row_id_sql(scan.row_ids_of, RID)} AS {ROW_HEX}"])
    return Relation.of_frame(df)


def _scan(
    spark: SparkSession,
    warehouse: Warehouse,
    physical: StructType,
    files: Sequence[DataFile],
    *,
    positions: bool,
) -> DataFrame:
    """All rows of the given files (deletion vectors not applied), physical column names, with
    the address columns and ``_cl_size`` if ``positions``."""
    paths = [f.path for f in files]
    df = spark.read.schema(physical).parquet(*[warehouse.uri(p) for p in paths])
    if positions:
        size, pos = "_metadata.file_size", "_metadata.row_index"
        return native.select(
            df,
            [
                "*",
                f"_metadata.file_name AS {FILE}",
                f"{pos} AS {POS}",
                f"{size} AS {SIZE}",
                f"{address_key(size, pos)} AS {KEY}",
            ],
        )
    return df


def _constants_by_expressions(df: DataFrame, scan: Scan) -> DataFrame:
    """``df`` (rows of ``scan``'s files with the address columns) with its files' constants
    ``_i_base``, ``_i_version`` and ``_i_tag``, found by changelake's expression."""
    values = {
        file_name(f.path): (f.base_row_id, f.begin_version, tag)
        for f, tag in zip(scan.files, scan.file_tags, strict=True)
    }
    base, version, tag = native.file_values(df.sparkSession, F.col(FILE), values, 3)
    return df.select("*", base.alias("_i_base"), version.alias("_i_version"), tag.alias("_i_tag"))


def _constants_by_join(df: DataFrame, scan: Scan) -> DataFrame:
    """The same constants, found by the row's file size (a long) and, within a size, its name."""
    return lookup(
        df,
        [(SIZE, "bigint"), (FILE, "string")],
        [("_i_base", "bigint"), ("_i_version", "bigint"), ("_i_tag", "bigint")],
        [
            (f.size_bytes, file_name(f.path), f.base_row_id, f.begin_version, tag)
            for f, tag in zip(scan.files, scan.file_tags, strict=True)
        ],
    )


# A row's identity from its materialized columns, else its file's constants and its position.
_IDENTITY = (
    f"coalesce({STORED_ROW_ID}, _i_base + {POS}) AS {RID}",
    f"coalesce({ROW_VERSION}, _i_version) AS {VER}",
)
