"""What runs a command's statements: the warehouse's service, or a Spark of the command's own;
and how a command's text splits into statements. Loads no Spark and, for one statement, no SQL
parser."""

from __future__ import annotations

import importlib
from typing import Any

from changelake.cli import remote
from changelake.cli.target import Target


def split(text: str) -> list[str]:
    """The statements of ``text``; one without ';' or comments is taken whole, without loading
    the SQL parser (a fifth of a second)."""
    stripped = text.strip().rstrip(";").strip()
    if not any(mark in stripped for mark in (";", "--", "/*")):
        return [stripped] if stripped else []
    return importlib.import_module("changelake.dialect").split_statements(text)


def runner_for(target: Target) -> Any:
    """The service running the warehouse (a ``remote.Service``), when there is one; else this
    process's own Spark (a ``local.Local``, which loads PySpark)."""
    url = remote.service_url(target)
    if url is not None:
        return remote.Service(url, target.token)
    return importlib.import_module("changelake.cli.local").Local(target)
