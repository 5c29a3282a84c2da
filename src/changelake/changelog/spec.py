"""What an APPLY CHANGES statement asks for, as one value shared by SQL and Python."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sqlglot import exp

from changelake.errors import InvalidStatementError, member_named


class OpFormat(Enum):
    """How the OP COLUMN says what a row is (see ``events.py`` for the values)."""

    ODF = "ODF"
    FLINK = "FLINK"
    DEBEZIUM = "DEBEZIUM"
    SNOWFLAKE = "SNOWFLAKE"

    @staticmethod
    def parse(text: str) -> OpFormat:
        return member_named(OpFormat, text, "OP COLUMN FORMAT")


@dataclass(frozen=True)
class ApplySpec:
    """``APPLY CHANGES INTO target FROM ... KEYS (keys) SEQUENCE BY sequence_by [OP COLUMN
    op_column FORMAT op_format] [APPLY AS DELETE WHEN delete_when] [IGNORE NULL UPDATES]
    [COLUMNS (columns) | COLUMNS * EXCEPT (except_columns)] [STORED AS SCD TYPE scd_type]``.

    ``sequence_by`` and ``op_column`` are paths (``("source", "version")`` for
    ``source.version``); ``delete_when`` is a predicate over the source row."""

    target: str
    keys: tuple[str, ...]
    sequence_by: tuple[str, ...]
    op_column: tuple[str, ...] | None = None
    op_format: OpFormat | None = None
    delete_when: exp.Expression | None = None
    ignore_null_updates: bool = False
    columns: tuple[str, ...] | None = None
    except_columns: tuple[str, ...] | None = None
    scd_type: int = 1

    def __post_init__(self) -> None:
        where = f"APPLY CHANGES INTO {self.target}"
        if not self.keys:
            raise InvalidStatementError(f"{where}: KEYS (k1, ...) names at least one column.")
        if len({k.lower() for k in self.keys}) != len(self.keys):
            raise InvalidStatementError(f"{where}: a column appears twice in KEYS.")
        if not self.sequence_by:
            raise InvalidStatementError(f"{where}: SEQUENCE BY names the column to order by.")
        if self.scd_type not in (1, 2):
            raise InvalidStatementError(
                f"{where}: STORED AS SCD TYPE {self.scd_type} is not a type; use 1 or 2."
            )
        if self.columns is not None and self.except_columns is not None:
            raise InvalidStatementError(
                f"{where}: give COLUMNS (c1, ...) or COLUMNS * EXCEPT (c1, ...), not both."
            )
        if (self.op_column is None) != (self.op_format is None):
            raise InvalidStatementError(
                f"{where}: OP COLUMN and its FORMAT go together: OP COLUMN op FORMAT ODF |"
                " FLINK | DEBEZIUM | SNOWFLAKE."
            )
        excluded = {c.lower() for c in self.except_columns or ()}
        for key in self.keys:
            if key.lower() in excluded:
                raise InvalidStatementError(
                    f"{where}: key column {key} cannot be excluded with EXCEPT; keys are always"
                    " copied."
                )

    @property
    def sequence_name(self) -> str:
        return ".".join(self.sequence_by)


def path_of(text: str) -> tuple[str, ...]:
    """``"source.version"`` -> ``("source", "version")``."""
    parts = tuple(p.strip().strip("`") for p in text.split("."))
    if not all(parts):
        raise InvalidStatementError(f"Not a column path: {text!r}.")
    return parts
