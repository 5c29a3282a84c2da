"""The base of the syntax nodes changelake adds to Spark SQL.

A statement is a node of the parsed tree here (``AlterTaskSyntax``), the typed value ``sql``
builds from that node (``sql.tasks.AlterTask``) and the catalog updates it commits in the end
(``catalog.alters.AlterTask``). Every node of the dialect is a ``Syntax`` named ``…Syntax``, so
that a node is never taken for the value built from it; its sqlglot ``key``, by which sqlglot
names it in generation and in messages, is the name without the suffix (``altertask``).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp


class Syntax(exp.Expression):
    """A node of a statement or clause of the changelake dialect."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__name__.endswith("Syntax"):
            raise TypeError(f"{cls.__name__}: a dialect node's name ends in Syntax")
        cls.key = cls.__name__.removesuffix("Syntax").lower()
