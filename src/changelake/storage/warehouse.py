"""The warehouse directory: where data and deletion-vector files live, and how to reach them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

import pyarrow.fs as pafs

from changelake.errors import ConfigurationError


@dataclass(frozen=True)
class Warehouse:
    """A warehouse root: a local directory or a URI both Spark and PyArrow can open."""

    root: str

    @staticmethod
    def at(location: str) -> Warehouse:
        if "://" not in location:
            location = os.path.abspath(location)
            os.makedirs(location, exist_ok=True)
        return Warehouse(location.rstrip("/"))

    def catalog_url(self, catalog: str | None) -> str:
        """``catalog``, or by default the URL of a SQLite catalog inside a local warehouse."""
        if catalog is not None:
            return catalog
        if not self.is_local:
            raise ConfigurationError(
                f"Warehouse {self.root} is not a local directory, so the default SQLite catalog"
                " cannot live in it; pass catalog='postgresql://...'."
            )
        return f"sqlite:///{self.root.removeprefix('file://')}/catalog.db"

    @property
    def is_local(self) -> bool:
        return "://" not in self.root or self.root.startswith("file://")

    @cached_property
    def _fs_and_base(self) -> tuple[pafs.FileSystem, str]:
        return pafs.FileSystem.from_uri(self.root)

    @property
    def fs(self) -> pafs.FileSystem:
        return self._fs_and_base[0]

    def fs_path(self, relative: str) -> str:
        """Path of ``relative`` inside ``fs``."""
        return f"{self._fs_and_base[1]}/{relative}"

    def uri(self, relative: str) -> str:
        """Location of ``relative`` as Spark reads and writes it."""
        return f"{self.root}/{relative}"

    @staticmethod
    def data_dir(statement_id: str, part: str = "") -> str:
        """Where a statement writes data files (``part`` separates several writes of one statement)."""
        return f"data/{statement_id}{part}"

    @staticmethod
    def dv_dir(statement_id: str) -> str:
        return f"dv/{statement_id}"

    def list_parquet(self, relative_dir: str) -> list[tuple[str, int]]:
        """(relative path, size) of the Parquet files directly in ``relative_dir``."""
        selector = pafs.FileSelector(self.fs_path(relative_dir), allow_not_found=True)
        found = []
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File and info.base_name.endswith(".parquet"):
                found.append((f"{relative_dir}/{info.base_name}", info.size or 0))
        return sorted(found)
