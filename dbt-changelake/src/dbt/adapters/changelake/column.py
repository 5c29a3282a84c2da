"""Columns with Spark SQL's type names (as changelake reports them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dbt.adapters.base.column import Column

_INTEGERS = ("tinyint", "smallint", "int", "integer", "bigint", "byte", "short", "long")
_FLOATS = ("float", "double", "real")


@dataclass
class ChangelakeColumn(Column):
    TYPE_LABELS: ClassVar[dict[str, str]] = {
        "TEXT": "STRING",
        "VARCHAR": "STRING",
        "CHARACTER VARYING": "STRING",
        "INTEGER": "INT",
        "FLOAT": "DOUBLE",
        "NUMERIC": "DECIMAL",
    }

    @classmethod
    def string_type(cls, size: int) -> str:
        return "string"

    @classmethod
    def numeric_type(cls, dtype: str, precision: object, scale: object) -> str:
        return dtype if precision is None or scale is None else f"decimal({precision},{scale})"

    def _base(self) -> str:
        return self.dtype.lower().split("(", 1)[0].strip()

    def is_string(self) -> bool:
        return self._base() in ("string", "varchar", "char", "text")

    def is_integer(self) -> bool:
        return self._base() in _INTEGERS

    def is_float(self) -> bool:
        return self._base() in _FLOATS

    def is_numeric(self) -> bool:
        return self._base() in ("decimal", "numeric", "dec")

    def string_size(self) -> int:
        return 2**31 - 1  # a Spark string has no declared size

    def can_expand_to(self, other_column: Column) -> bool:
        return False  # changelake has no sized strings to widen

    @property
    def quoted(self) -> str:
        return f"`{self.column}`"

    @property
    def data_type(self) -> str:
        return self.dtype
