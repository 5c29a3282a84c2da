"""A table as one statement sees it at one version: its schema and live files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from changelake.catalog.model import LiveFile
from changelake.schema import TableSchema


@dataclass(frozen=True)
class TableState:
    """What a reader needs to see a table at one point: schema and live files."""

    table_id: int
    name: str
    version: int
    schema: TableSchema
    files: tuple[LiveFile, ...]

    def with_files(self, files: Sequence[LiveFile]) -> TableState:
        return replace(self, files=tuple(files))

    @property
    def live_rows(self) -> int:
        return sum(f.live_rows for f in self.files)
