"""Per-file statistics read from Parquet footers: row counts, min, max, null counts."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake.catalog.model import DataFile, Stats
from changelake.storage.warehouse import Warehouse

_MAX_STRING_STAT = 64


def _jsonable(value: Any) -> Any:
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= _MAX_STRING_STAT else None
    if isinstance(value, dt.datetime):
        return (
            value.replace(tzinfo=None).isoformat(sep=" ")
            if value.tzinfo is None
            else (value.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat(sep=" "))
        )
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return None  # binary and anything else: no stats


def trusted_statistics(data: pa.Table) -> list[str]:
    """Columns of ``data`` whose Parquet min/max PyArrow may write.

    PyArrow leaves NaN out of a float column's min/max, but Spark orders NaN above every number
    (``NaN > 5`` is true): readers that trust such bounds, Spark's own Parquet filter included,
    would skip rows that match. Pass the result as ``write_statistics=`` to ``pq.write_table``.
    """
    return [
        field.name
        for field, column in zip(data.schema, data.columns, strict=True)
        if not (pa.types.is_floating(field.type) and pc.any(pc.is_nan(column)).as_py())
    ]


def file_stats(metadata: pq.FileMetaData) -> Stats:
    """Min/max/null count per physical column, merged over the file's row groups."""
    raw: dict[str, dict[str, Any]] = {}
    usable: dict[str, bool] = {}
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        for ci in range(group.num_columns):
            chunk = group.column(ci)
            name = chunk.path_in_schema
            st = chunk.statistics
            entry = raw.setdefault(name, {"min": None, "max": None, "nulls": 0})
            if st is None or not st.has_null_count:
                usable[name] = False
                continue
            entry["nulls"] += st.null_count
            usable.setdefault(name, True)
            if st.has_min_max:
                lo, hi = st.min, st.max
                entry["min"] = lo if entry["min"] is None else min(entry["min"], lo)
                entry["max"] = hi if entry["max"] is None else max(entry["max"], hi)
            elif st.null_count < chunk.num_values:
                usable[name] = False
    stats: Stats = {}
    for name, entry in raw.items():
        if not usable.get(name):
            continue
        lo, hi = _jsonable(entry["min"]), _jsonable(entry["max"])
        if (lo is None) != (entry["min"] is None) or (hi is None) != (entry["max"] is None):
            stats[name] = {"min": None, "max": None, "nulls": entry["nulls"], "bounded": False}
        else:
            stats[name] = {"min": lo, "max": hi, "nulls": entry["nulls"], "bounded": lo is not None}
    return stats


def describe_files(warehouse: Warehouse, relative_dir: str) -> list[DataFile]:
    """DataFiles (not yet committed) for the non-empty Parquet files written into ``relative_dir``."""
    found = []
    for path, size in warehouse.list_parquet(relative_dir):
        with warehouse.fs.open_input_file(warehouse.fs_path(path)) as handle:
            metadata = pq.ParquetFile(handle).metadata
        if metadata.num_rows == 0:
            warehouse.fs.delete_file(warehouse.fs_path(path))
            continue
        found.append(
            DataFile(
                path=path,
                row_count=metadata.num_rows,
                size_bytes=size,
                base_row_id=None,
                begin_version=None,
                stats=file_stats(metadata),
            )
        )
    return found


# Data files never change, so their column sizes are cached by path (a bounded number of them).
_COLUMN_BYTES: dict[str, dict[str, int]] = {}
_CACHED_FOOTERS = 4096


def column_bytes(warehouse: Warehouse, path: str) -> dict[str, int]:
    """Compressed bytes per physical column of the data file at ``path`` (from its footer)."""
    uri = warehouse.uri(path)
    found = _COLUMN_BYTES.get(uri)
    if found is None:
        with warehouse.fs.open_input_file(warehouse.fs_path(path)) as handle:
            metadata = pq.ParquetFile(handle).metadata
        found = {}
        for rg in range(metadata.num_row_groups):
            group = metadata.row_group(rg)
            for ci in range(group.num_columns):
                chunk = group.column(ci)
                name = chunk.path_in_schema
                found[name] = found.get(name, 0) + chunk.total_compressed_size
        if len(_COLUMN_BYTES) >= _CACHED_FOOTERS:
            _COLUMN_BYTES.clear()
        _COLUMN_BYTES[uri] = found
    return found
