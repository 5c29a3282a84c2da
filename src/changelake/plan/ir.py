"""The relational IR of a view's query: immutable nodes whose columns have unique, resolved names.

Every column a node outputs is a ``Col``: an internal name unique in the whole tree (what
expressions refer to, so no qualifier or ambiguity survives building) and the name the user sees.
Expressions are Spark SQL text over internal names, so any Spark SQL expression keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Col:
    """A column a node outputs: ``id`` is unique in the tree, ``name`` is what the user sees."""

    id: str
    name: str


class JoinKind(Enum):
    INNER = "inner"
    CROSS = "cross"


@dataclass(frozen=True)
class Scan:
    """A base table read: ``columns[i]`` is the table's column ``sources[i]``."""

    table: str
    table_id: int
    alias: str
    sources: tuple[str, ...]
    columns: tuple[Col, ...]


@dataclass(frozen=True)
class Filter:
    """Rows of ``child`` where ``condition`` holds (``shown``: the condition as written)."""

    child: Node
    condition: str
    shown: str = ""

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.child.columns


@dataclass(frozen=True)
class Project:
    """``outputs[i]`` is computed by ``expressions[i]``."""

    child: Node
    outputs: tuple[Col, ...]
    expressions: tuple[str, ...]

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.outputs


@dataclass(frozen=True)
class Join:
    left: Node
    right: Node
    kind: JoinKind
    condition: str | None
    shown: str = ""

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.left.columns + self.right.columns


@dataclass(frozen=True)
class Union:
    """UNION ALL; the output columns are the left branch's (the right's match by position)."""

    left: Node
    right: Node

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.left.columns


@dataclass(frozen=True)
class Branch:
    """A UNION ALL branch: its rows' ids are tagged with ``tag``, so that the same row read by
    two branches keeps two ids."""

    child: Node
    tag: str

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.child.columns


class End(Enum):
    START = "start"
    END = "end"


@dataclass(frozen=True)
class At:
    """A derivative's leaf: ``scan`` as of the interval's start or end."""

    scan: Scan
    end: End

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.scan.columns


@dataclass(frozen=True)
class Delta:
    """A derivative's leaf: the changes of ``scan``'s table over the interval."""

    scan: Scan

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.scan.columns


Node = Scan | Filter | Project | Join | Union | Branch | At | Delta


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Filter | Project | Branch):
        return (node.child,)
    if isinstance(node, Join | Union):
        return (node.left, node.right)
    return ()


def scans(node: Node) -> list[Scan]:
    """The base-table scans under ``node``, left to right."""
    if isinstance(node, Scan):
        return [node]
    if isinstance(node, At | Delta):
        return [node.scan]
    return [s for child in children(node) for s in scans(child)]


def describe(node: Node, indent: int = 0) -> list[str]:
    """``node`` as indented lines, for EXPLAIN."""
    pad = "  " * indent
    if isinstance(node, Scan):
        head = f"Scan {node.table}" + (f" AS {node.alias}" if node.alias != node.table else "")
    elif isinstance(node, At):
        head = f"{node.scan.alias} at the {node.end.value}"
    elif isinstance(node, Delta):
        head = f"changes of {node.scan.alias}"
    elif isinstance(node, Filter):
        head = f"Filter {node.shown or node.condition}"
    elif isinstance(node, Project):
        head = f"Project {', '.join(c.name for c in node.outputs)}"
    elif isinstance(node, Join):
        on = f" ON {node.shown or node.condition}" if node.condition else ""
        head = f"Join {node.kind.value}{on}"
    elif isinstance(node, Branch):
        head = f"Branch {node.tag}"
    else:
        head = "Union all"
    return [pad + head] + [line for c in children(node) for line in describe(c, indent + 1)]
