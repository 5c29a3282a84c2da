"""METADATA$ROW_ID of a base table's row: its 64-bit identity scrambled by a per-table mask, as
16 hex digits.

Two forms compute the same string: SQL text over an identity column (``row_id_sql``: derived rows,
Spark's own reader), and the virtual column ``native.ROW_HEX`` that changelake's reader fills per batch
(``ChangelakeParquet``: no expression per row). ``tests/storage/test_row_ids.py`` checks that
they agree.
"""

from __future__ import annotations


def mask(table_id: int) -> int:
    """The table's mask, a negative long: a row's ROW_ID is the hex of ``identity ^ mask``."""
    return ((table_id * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0x7FFFFFFFFFFFFFFF) - 2**63


def scrambled_sql(table_id: int, rid: str) -> str:
    """The long whose hex is the ROW_ID, as SQL text over the identity ``rid``. Every such long
    is negative, so their order as longs is the order of the ROW_ID strings."""
    return f"({rid} ^ CAST({mask(table_id)} AS BIGINT))"


def row_id_sql(table_id: int, rid: str) -> str:
    """The opaque, stable METADATA$ROW_ID of a row identity: 16 hex digits.

    The identity is scrambled with a per-table mask (a bijection, so ids stay unique) and the
    sign bit is set, so that ``hex`` alone always prints 16 digits: one cheap expression per
    row, unlike a cryptographic hash. SQL text over the identity column ``rid``.
    """
    return f"hex({scrambled_sql(table_id, rid)})"
