"""Table schemas: logical columns with stable ids, and the SQL types changelake supports.

Columns are stored in Parquet under physical names derived from their id (``c<id>``), so RENAME
is a metadata change and ADD COLUMN reads NULL from older files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from changelake.errors import ColumnNotFoundError, InvalidStatementError, did_you_mean

HIDDEN_PREFIX = "_cl_"
STORED_ROW_ID = "_cl_row_id"
ROW_VERSION = "_cl_row_version"
# A dynamic table's column holding each row's ROW_ID in its defining query: stored as a column of
# the table (so writes, deletion-vector images and compaction keep it), never shown to users.
ROW_KEY = "_cl_row_key"
# The row key hashed by two algorithms (96 bits), written beside it in every data file of a table
# with a row key and no aggregate state (physical columns only: no table schema names them). A
# lookup of a few keys among many stored rows compares these numbers instead of decoding and
# hashing every stored key string (``dml.keyed``); two hashes, as a key collision would be one
# stored row taken for another. (name, type, SQL function of the key)
KEY_HASHES = (("_cl_key_h1", "bigint", "xxhash64"), ("_cl_key_h2", "int", "hash"))
# A dynamic table that maintains an aggregate keeps per-group state in hidden columns named
# ``_cl_<...>`` after its visible ones (``dynamic.measures``): the group's row count, sums and
# counts of each aggregate. Like the row key they are never shown; unlike it they are not part of
# a row's identity, and a change to them alone is no change of the table.

# SQL spellings accepted in DDL, mapped to the Spark type name stored in the catalog.
_TYPE_ALIASES = {
    "int": "int",
    "integer": "int",
    "smallint": "int",
    "tinyint": "int",
    "bigint": "bigint",
    "long": "bigint",
    "float": "double",
    "float4": "double",
    "float8": "double",
    "real": "double",
    "double": "double",
    "double precision": "double",
    "boolean": "boolean",
    "bool": "boolean",
    "string": "string",
    "varchar": "string",
    "char": "string",
    "text": "string",
    "nvarchar": "string",
    "date": "date",
    "timestamp": "timestamp",
    "datetime": "timestamp",
    "timestamp_ntz": "timestamp",
    "timestamp_ltz": "timestamp",
    "binary": "binary",
    "varbinary": "binary",
}
_DECIMAL = re.compile(r"^(?:decimal|numeric|number|dec)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$")
_SIZED = re.compile(r"^(varchar|char|string|nvarchar|binary|varbinary)\s*\(\s*\d+\s*\)$")

SUPPORTED_TYPES = "INT, BIGINT, NUMBER/DECIMAL(p,s), FLOAT, DOUBLE, BOOLEAN, STRING/VARCHAR, DATE, TIMESTAMP, BINARY"


def normalize_type(sql_type: str) -> str:
    """The Spark type name for a SQL type spelling, e.g. ``NUMBER(10,2)`` -> ``decimal(10,2)``.

    >>> normalize_type("VARCHAR(20)"), normalize_type("number"), normalize_type("FLOAT")
    ('string', 'decimal(38,0)', 'double')
    """
    text = " ".join(sql_type.strip().lower().split())
    if text in _TYPE_ALIASES:
        return _TYPE_ALIASES[text]
    sized = _SIZED.match(text)
    if sized:
        return _TYPE_ALIASES[sized.group(1)]
    decimal = _DECIMAL.match(text)
    if decimal:
        precision = int(decimal.group(1) or 38)
        scale = int(decimal.group(2) or 0)
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise InvalidStatementError(
                f"Invalid {sql_type}: precision must be 1..38 and scale 0..precision."
            )
        return f"decimal({precision},{scale})"
    raise InvalidStatementError(
        f"Unsupported column type {sql_type!r}; use one of {SUPPORTED_TYPES}."
    )


@dataclass(frozen=True)
class Column:
    """A logical column: stable id, current name, Spark type name, nullability."""

    column_id: int
    name: str
    type: str
    nullable: bool = True

    @property
    def physical(self) -> str:
        return f"c{self.column_id}"


@dataclass(frozen=True)
class TableSchema:
    """The ordered columns of a table at one version."""

    columns: tuple[Column, ...]

    @cached_property
    def _by_lower(self) -> dict[str, Column]:
        return {c.name.lower(): c for c in self.columns}

    @property
    def visible(self) -> tuple[Column, ...]:
        """The columns users see: all but a dynamic table's row key and state columns."""
        return tuple(c for c in self.columns if not c.name.lower().startswith(HIDDEN_PREFIX))

    @property
    def state(self) -> tuple[Column, ...]:
        """A dynamic table's hidden state columns (none for other tables)."""
        return tuple(
            c
            for c in self.columns
            if c.name.lower().startswith(HIDDEN_PREFIX) and c.name != ROW_KEY
        )

    @property
    def stored(self) -> tuple[Column, ...]:
        """What a dynamic table's row holds besides its key: visible and state columns."""
        return tuple(c for c in self.columns if c.name != ROW_KEY)

    @property
    def row_key(self) -> Column | None:
        """A dynamic table's row-key column (its rows' ROW_IDs in the defining query)."""
        return self._by_lower.get(ROW_KEY)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.visible]

    def find(self, name: str) -> Column | None:
        return self._by_lower.get(name.lower())

    def column(self, name: str, *, table: str) -> Column:
        """The column called ``name`` (case-insensitive), or a ColumnNotFoundError with a hint."""
        found = self.find(name)
        if found is None:
            raise ColumnNotFoundError(
                f"Column {name!r} does not exist in table {table}.{did_you_mean(name, self.names)}"
                f" Its columns are: {', '.join(self.names)}."
            )
        return found

    @property
    def next_column_id(self) -> int:
        return max((c.column_id for c in self.columns), default=0) + 1


def key_hashes(key: str) -> list[str]:
    """The ``KEY_HASHES`` of the row key ``key`` (SQL text), as SQL expressions in their order."""
    return [f"{function}({key})" for _, _, function in KEY_HASHES]


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier: in backticks, inner backticks doubled."""
    return "`" + name.replace("`", "``") + "`"


def check_column_name(name: str) -> None:
    """Reject names reserved for hidden columns."""
    if name.lower().startswith(HIDDEN_PREFIX) or name.upper().startswith("METADATA$"):
        raise InvalidStatementError(
            f"Column name {name!r} is reserved (names starting with {HIDDEN_PREFIX!r} or METADATA$"
            " are used by changelake); choose another name."
        )
