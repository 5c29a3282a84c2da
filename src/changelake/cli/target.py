"""Where a command's statements run: a warehouse (and catalog), through a running service or with
a Spark of the command's own."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """The warehouse and, optionally, a catalog database URL; ``server`` (a service's URL) and
    ``token`` to run statements through a service; whether Spark's own output reaches the
    terminal (``verbose``) or the warehouse's log file."""

    warehouse: str
    catalog: str | None = None
    verbose: bool = False
    server: str | None = None
    token: str | None = None

    @property
    def local(self) -> str | None:
        """The warehouse's directory, when it is on this machine."""
        if "://" in self.warehouse and not self.warehouse.startswith("file://"):
            return None
        return os.path.abspath(self.warehouse.removeprefix("file://"))

    @property
    def log(self) -> str:
        """The file Spark's output goes to: ``_logs/spark.log`` in a local warehouse, else in
        the user's cache directory."""
        if self.local is not None:
            return os.path.join(self.local, "_logs", "spark.log")
        cache = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
        return os.path.join(cache, "changelake", "spark.log")
