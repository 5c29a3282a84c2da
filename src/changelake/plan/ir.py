"""The relational IR of a view's query: immutable nodes whose columns have unique, resolved names.

Every column a node outputs is a ``Col``: an internal name unique in the whole tree (what
expressions refer to, so no qualifier or ambiguity survives building) and the name the user sees.
Expressions are Spark SQL text over internal names, so any Spark SQL expression keeps working.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum


@dataclass(frozen=True)
class Col:
    """A column a node outputs: ``id`` is unique in the tree, ``name`` is what the user sees."""

    id: str
    name: str


class JoinKind(Enum):
    INNER = "inner"
    CROSS = "cross"
    LEFT = "left"
    RIGHT = "right"
    FULL = "full"
    SEMI = "left_semi"
    ANTI = "left_anti"


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
        if self.kind in (JoinKind.SEMI, JoinKind.ANTI):
            return self.left.columns
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
class Aggregate:
    """GROUP BY ``keys`` (computed by ``key_expressions``) with aggregate ``values``; no keys is
    one group over all rows, no values is DISTINCT."""

    child: Node
    keys: tuple[Col, ...]
    key_expressions: tuple[str, ...]
    values: tuple[Col, ...]
    value_expressions: tuple[str, ...]

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.keys + self.values


@dataclass(frozen=True)
class Window:
    """Window functions over ``child``'s rows: ``outputs[i]`` is ``expressions[i]`` (a call
    with its OVER clause), appended to the child's columns. ``partition`` are the PARTITION BY
    expressions every call shares (none: all rows are one partition)."""

    child: Node
    partition: tuple[str, ...]
    outputs: tuple[Col, ...]
    expressions: tuple[str, ...]

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.child.columns + self.outputs


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
    """A derivative's leaf: ``scan`` as of the interval's start or end. With ``key`` (a column
    of the table), only the rows whose ``key`` the interval's changes of the table may touch are
    needed: files whose statistics rule those values out are skipped."""

    scan: Scan
    end: End
    key: str | None = None

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


@dataclass(frozen=True)
class Pad:
    """An outer join's unmatched rows: ``child`` (one side's rows) with NULLs for the columns
    of the other side, ``left`` or ``right`` of them as ``side`` says; ids mark the NULL side."""

    child: Node
    nulls: tuple[Col, ...]
    side: str  # where the child's columns go: "left" (NULLs after them) or "right"

    @property
    def columns(self) -> tuple[Col, ...]:
        if self.side == "left":
            return self.child.columns + self.nulls
        return self.nulls + self.child.columns


@dataclass(frozen=True)
class Signed:
    """A derivative's node: ``child``'s rows (a state) as changes with ``action``."""

    child: Node
    action: str  # INSERT | DELETE

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.child.columns


@dataclass(frozen=True)
class Regroup:
    """A derivative's node: the groups of an aggregate (or partitions of a window) whose keys
    ``delta`` (its input's changes) touches, recomputed at the interval's start (as DELETEs)
    and end (as INSERTs)."""

    stateful: Aggregate | Window
    delta: Node
    # (table id, column): a key is that base column, and only that table changed, so the
    # touched keys lie within the values of its changed files
    bounded: tuple[int, str] | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """The key expressions, over the stateful node's input columns."""
        if isinstance(self.stateful, Aggregate):
            return self.stateful.key_expressions
        return self.stateful.partition

    @property
    def columns(self) -> tuple[Col, ...]:
        return self.stateful.columns


Node = (
    Scan
    | Filter
    | Project
    | Join
    | Union
    | Branch
    | At
    | Delta
    | Aggregate
    | Window
    | Regroup
    | Pad
    | Signed
)


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Filter | Project | Branch | Aggregate | Window | Pad | Signed):
        return (node.child,)
    if isinstance(node, Regroup):
        return (node.stateful.child, node.delta)
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


def at(node: Node, end: End) -> Node:
    """``node`` with every base-table scan read as of ``end`` of the interval."""
    if isinstance(node, Scan):
        return At(node, end)
    if isinstance(node, Filter | Project | Branch | Pad | Aggregate | Window | Signed):
        return replace(node, child=at(node.child, end))
    if isinstance(node, Join | Union):
        return replace(node, left=at(node.left, end), right=at(node.right, end))
    return node


def referenced(expression: str) -> str | None:
    """The column id ``expression`` is when it is nothing but a reference to one column."""
    found = re.fullmatch(r"`(_v\d+)`", expression)
    return found[1] if found else None


def source_column(node: Node, col_id: str) -> tuple[Scan, str] | None:
    """The base-table scan and column whose value column ``col_id`` of ``node`` is on every row
    (through filters, renaming projections and the row-preserving side of joins), or None."""
    if isinstance(node, Scan):
        found = [s for s, c in zip(node.sources, node.columns, strict=True) if c.id == col_id]
        return (node, found[0]) if found else None
    if isinstance(node, Filter):
        return source_column(node.child, col_id)
    if isinstance(node, Project):
        for col, expression in zip(node.outputs, node.expressions, strict=True):
            if col.id == col_id:
                renamed = referenced(expression)
                return source_column(node.child, renamed) if renamed else None
        return None
    if isinstance(node, Join):
        left = node.kind in (JoinKind.INNER, JoinKind.CROSS, JoinKind.LEFT, JoinKind.SEMI)
        right = node.kind in (JoinKind.INNER, JoinKind.CROSS, JoinKind.RIGHT)
        if left and any(c.id == col_id for c in node.left.columns):
            return source_column(node.left, col_id)
        if right and any(c.id == col_id for c in node.right.columns):
            return source_column(node.right, col_id)
    return None


def keyed(node: Node, table_id: int, key: str) -> Node:
    """``node`` with its reads of table ``table_id`` narrowed to the rows ``key`` may touch."""
    if isinstance(node, At):
        return replace(node, key=key) if node.scan.table_id == table_id else node
    if isinstance(node, Filter | Project | Branch | Pad | Aggregate | Window | Signed):
        return replace(node, child=keyed(node.child, table_id, key))
    if isinstance(node, Join | Union):
        return replace(
            node, left=keyed(node.left, table_id, key), right=keyed(node.right, table_id, key)
        )
    return node


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
    elif isinstance(node, Aggregate):
        keys = ", ".join(c.name for c in node.keys) or "()"
        values = ", ".join(c.name for c in node.values)
        head = f"Aggregate by {keys}" + (f": {values}" if values else " (distinct)")
    elif isinstance(node, Window):
        by = f" partitioned by {', '.join(node.partition)}" if node.partition else ""
        head = f"Window {', '.join(node.expressions)}{by}"
    elif isinstance(node, Pad):
        head = f"Pad with NULL {', '.join(c.name for c in node.nulls)}"
    elif isinstance(node, Signed):
        head = f"as {node.action}"
    elif isinstance(node, Regroup):
        keys = ", ".join(node.keys) or "()"
        what = "groups" if isinstance(node.stateful, Aggregate) else "partitions"
        head = f"Regroup by {keys}: {what} touched by the second input, at start and end"
        if node.bounded is not None:
            head += f"; reads only files that may hold touched {node.bounded[1]}"
    else:
        head = "Union all"
    return [pad + head] + [line for c in children(node) for line in describe(c, indent + 1)]
