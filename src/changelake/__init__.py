"""changelake: tables on a data lake that know their own changes, on Apache Spark.

>>> import changelake
>>> s = changelake.connect("./wh")                       # doctest: +SKIP
>>> s.sql("CREATE TABLE people (id INT, name STRING)")   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from changelake.clock import Clock, ManualClock, SystemClock
from changelake.errors import ChangelakeError

if TYPE_CHECKING:
    from changelake.session import Session, connect

__all__ = ["ChangelakeError", "Clock", "ManualClock", "Session", "SystemClock", "connect"]
__version__ = "0.1.0"

# The session brings PySpark (a second and a half to import): it is loaded on first use, so that
# what needs no Spark (the command line talking to a running service) starts fast.
_LAZY = {"Session": "changelake.session", "connect": "changelake.session"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'changelake' has no attribute {name!r}")
