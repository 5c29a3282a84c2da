"""What one read of a table's data files returns (``Scan``), and which of three ways reads it
(``choose``, from what the session's JVM can do: docs/DESIGN.md §2, "Reading").

The ways differ in how a scan skips the positions its deletion vectors record and gets each
file's constants (base row id, version, tag, ROW_ID mask): inside changelake's Parquet file
format; over Spark's Parquet reader by changelake's Catalyst expressions; or over Spark's reader
by joins. Every way returns the same rows and columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from enum import Enum

import pyarrow as pa
from pyspark.sql.types import StructType

from changelake.catalog.model import DataFile
from changelake.spark.native import ENABLED, READER
from changelake.storage.deletion import DRIVER_POSITIONS, Part


@dataclass(frozen=True)
class Scan:
    """The rows of ``files`` (``physical``: their Parquet schema) less the positions the
    deletion vectors of ``deleted`` record, with physical column names. Virtual columns, which
    no file holds: the address columns and ``_cl_size`` if ``positions``; ``_cl_rid``,
    ``_cl_ver`` and ``_i_tag`` if ``identity``, the tag one of ``tags`` per file (NULL without
    them); ``ROW_HEX``, the rows' METADATA$ROW_IDs in the table ``row_ids_of``, if it is given.

    ``only`` (file name -> positions, instead of ``deleted``) says which rows the caller wants:
    changelake's reader then decodes little more than those (late materialization); the other
    ways return every row, for the caller's join to select.

    ``late``: the caller filters the scan by a condition on its stored columns and reads every
    column of few rows (a row-level write's one pass): changelake's reader evaluates the filter
    on the condition's columns first and decodes the others only at the rows it keeps."""

    files: tuple[DataFile, ...]
    physical: StructType
    _: KW_ONLY
    positions: bool = False
    identity: bool = False
    tags: tuple[int, ...] | None = None
    row_ids_of: int | None = None
    deleted: tuple[Part, ...] = ()
    only: Mapping[str, pa.Array] | None = None
    late: bool = False

    def __post_init__(self) -> None:
        if self.row_ids_of is not None and not self.identity:
            raise ValueError("a scan's ROW_IDs come with its identity columns")
        if self.tags is not None and len(self.tags) != len(self.files):
            raise ValueError(f"a scan of {len(self.files)} files has {len(self.tags)} tags")
        if self.only is not None and self.deleted:
            raise ValueError("a scan keeps only given positions or skips deleted ones, not both")

    @property
    def file_tags(self) -> tuple[int | None, ...]:
        """One tag per file (None: NULL)."""
        return self.tags if self.tags is not None else (None,) * len(self.files)


class Way(Enum):
    """How a scan skips deleted positions and reads per-file constants."""

    FORMAT = "changelake's Parquet format"
    EXPRESSIONS = "changelake's expressions over Spark's reader"
    JOINS = "joins over Spark's reader"


@dataclass(frozen=True)
class ReadPath:
    """How a scan is read (``way``), how it skips deleted positions (``deletes``: the same way,
    except by joins on the EXPRESSIONS way when the positions are too many to hold on the
    driver), and why."""

    way: Way
    deletes: Way
    reason: str

    def __post_init__(self) -> None:
        if (self.way is Way.FORMAT) != (self.deletes is Way.FORMAT) or (
            self.way is Way.JOINS and self.deletes is not Way.JOINS
        ):
            raise ValueError(
                f"no scan reads by {self.way.value} and deletes by {self.deletes.value}"
            )


def choose(scan: Scan, *, reader: bool, expressions: bool, positions_past_driver: bool) -> ReadPath:
    """The read path of ``scan`` where changelake's Parquet format (``reader``) and its
    expressions (``expressions``: asked only where Spark's reader would use them) are loaded and
    on, or not; ``positions_past_driver``: the deleted positions are more than
    ``DRIVER_POSITIONS`` (asked only where a way would hold them on the driver)."""
    if reader and scan.only is not None:
        return ReadPath(Way.FORMAT, Way.FORMAT, "changelake's reader keeps the given positions")
    if reader and not positions_past_driver:
        return ReadPath(Way.FORMAT, Way.FORMAT, "changelake's reader is loaded and on")
    if not (scan.deleted or scan.identity):
        why = "Spark's reader alone: no deleted positions to skip, no per-file constants"
        return ReadPath(Way.JOINS, Way.JOINS, why)
    if not expressions:
        why = f"changelake's expressions are not loaded, or {ENABLED} is false"
        return ReadPath(Way.JOINS, Way.JOINS, why)
    if positions_past_driver:
        why = f"over {DRIVER_POSITIONS} deleted positions, too many for the driver: an anti-join"
        return ReadPath(Way.EXPRESSIONS, Way.JOINS, why)
    why = f"changelake's reader is not loaded, or {READER} is false"
    return ReadPath(Way.EXPRESSIONS, Way.EXPRESSIONS, why)
