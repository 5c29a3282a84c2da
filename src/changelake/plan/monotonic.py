"""APPEND_ONLY on views (paper 2.2.1): which views it can follow, and the rows such a view adds.

A view of projections, filters, inner, cross and semi joins and UNION ALL only gains rows while
its tables only gain rows, and the rows it gains follow from the rows they gained. Every other
operator is refused, by name: outer and anti joins, GROUP BY, aggregates and window functions can
remove rows when rows are added, and DISTINCT adds a row only for values it did not have, which
the added rows alone cannot tell. Their appended rows would cost what their full changes cost,
while users expect "append-only changes are cheap" (paper 2.2.1, 3.2.3), so the refusal points to
INFORMATION => DEFAULT.

>>> from changelake.plan.delta import formula
>>> from changelake.plan.ir import Col, Scan
>>> t = Scan("t", 1, "t", ("k",), (Col("_v0", "k"),))
>>> u = Scan("u", 2, "u", ("k",), (Col("_v1", "k"),))
>>> refusal(Join(t, u, JoinKind.LEFT, "_v0 = _v1", "t.k = u.k")).operator
'LEFT OUTER JOIN ON t.k = u.k'
>>> refusal(Join(t, u, JoinKind.SEMI, "_v0 = _v1")) is None
True
>>> print(formula(appended(Join(t, u, JoinKind.SEMI, "_v0 = _v1"), changed=lambda s: True)))
Δt ⋉ u@end ∪ +((t@start ⋉ Δu) ▷ u@start)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from changelake.catalog.model import TableInfo
from changelake.changes.query import only_inserted_between
from changelake.plan.delta import Changed, derive
from changelake.plan.ir import (
    Aggregate,
    Join,
    JoinKind,
    Node,
    Union,
    Window,
    children,
)
from changelake.txn.context import StatementContext

FOLLOWED = (
    "follows only views whose added rows follow from their tables' added rows alone"
    " (projections, filters, inner, cross and semi joins, UNION ALL)"
)


@dataclass(frozen=True)
class Refusal:
    """An operator APPEND_ONLY cannot follow: as written, what it does to rows, and the view
    it is written in."""

    operator: str
    effect: str
    view: str | None = None

    def named(self, view: str) -> str:
        """The operator, and where it is when ``view`` reads it from another view."""
        if self.view is None or self.view == view.lower():
            return self.operator
        return f"{self.operator} (in view {self.view}, which it reads)"

    def changes_message(self, about: str, view: str) -> str:
        return (
            f"{about}: INFORMATION => APPEND_ONLY {FOLLOWED}; its {self.named(view)}"
            f" {self.effect}. Use INFORMATION => DEFAULT."
        )

    def stream_message(self, stream: str, view: str) -> str:
        return (
            f"Stream {stream}: APPEND_ONLY = TRUE {FOLLOWED}; view {view}'s {self.named(view)}"
            f" {self.effect}. Create the stream without APPEND_ONLY."
        )

    def stale_reason(self, stream: str, view: str) -> str:
        """Why APPEND_ONLY ``stream`` on ``view``, redefined, cannot go on, and what to do."""
        return (
            f"now uses {self.named(view)}, which APPEND_ONLY cannot follow: it {self.effect}."
            f" Recreate it without APPEND_ONLY: CREATE OR REPLACE STREAM {stream} ON VIEW {view}"
        )


_OUTER = {
    JoinKind.LEFT: "a row added on its right side replaces a left row padded with NULLs",
    JoinKind.RIGHT: "a row added on its left side replaces a right row padded with NULLs",
    JoinKind.FULL: "a row added on one side replaces a row of the other padded with NULLs",
}
_DISTINCT = "adds a row only for values it did not have, which the added rows alone cannot tell"


def refusal(tree: Node, views: Sequence[tuple[str, Node]] = ()) -> Refusal | None:
    """The first operator of view ``tree`` that APPEND_ONLY cannot follow, or None. ``views``:
    the views ``tree`` was built from, each with its tree, innermost first; the refusal names the
    innermost one the operator is in.

    >>> from changelake.plan.ir import Filter, Scan
    >>> s = Scan("t", 1, "t", (), ())
    >>> refusal(Filter(s, "x")), refusal(Aggregate(s, (), (), (), ())).operator
    (None, 'DISTINCT')
    """
    found = _first(tree)
    if found is None:
        return None
    node, operator, effect = found
    where = next((name for name, built in views if _contains(built, node)), None)
    return Refusal(operator, effect, where)


def _first(node: Node) -> tuple[Node, str, str] | None:
    if isinstance(node, Join) and node.kind in _OUTER:
        on = f" ON {node.shown}" if node.shown else ""
        return node, f"{node.kind.name} OUTER JOIN{on}", _removes(_OUTER[node.kind])
    if isinstance(node, Join) and node.kind is JoinKind.ANTI:
        effect = "a row added to what it excludes removes the rows it matches"
        return node, f"anti join ({node.shown})", _removes(effect)
    if isinstance(node, Aggregate) and not node.values:
        # a UNION without ALL is built as DISTINCT over the UNION ALL
        union = isinstance(node.child, Union)
        return node, "UNION without ALL" if union else "DISTINCT", _DISTINCT
    if isinstance(node, Aggregate) and node.keys:
        return node, "GROUP BY", _removes("a row added to a group replaces the group's row")
    if isinstance(node, Aggregate):
        return node, "aggregate without GROUP BY", _removes("each row added replaces its one row")
    if isinstance(node, Window):
        effect = "a row added changes the window values of the other rows of its partition"
        return node, "window function", _removes(effect)
    for child in children(node):
        found = _first(child)
        if found is not None:
            return found
    return None


def _removes(why: str) -> str:
    return f"can remove rows ({why})"


def _contains(tree: Node, node: Node) -> bool:
    return tree is node or any(_contains(c, node) for c in children(tree))


def appended(node: Node, *, changed: Changed) -> Node | None:
    """Δ⁺``node``: the rows a view that ``refusal`` accepts adds over the interval, from the
    rows its tables added (``Delta`` leaves of inserts; ``At`` the end: the start and the rows
    added), or None if none of its tables changed. The rules of ``derive``, except for semi
    joins, whose rows gaining a partner count only if they had none at the start:
    Δ⁺(Q ⋉ R) = Δ⁺Q ⋉ R|end + +((Q|start ⋉ Δ⁺R) ▷ R|start).

    >>> from changelake.plan.delta import formula
    >>> from changelake.plan.ir import Col, Scan
    >>> t = Scan("t", 1, "t", ("k",), (Col("_v0", "k"),))
    >>> u = Scan("u", 2, "u", ("k",), (Col("_v1", "k"),))
    >>> print(formula(appended(Join(t, u, JoinKind.INNER, "_v0 = _v1"), changed=lambda s: True)))
    (t@start ⋈ Δu) + (Δt ⋈ u@end)
    """
    return derive(node, changed=changed, added_only=True)


def inserts_only(
    ctx: StatementContext, tree: Node, versions: Mapping[int, tuple[TableInfo, int, int]]
) -> bool:
    """Whether the changes of view ``tree`` over ``versions`` are inserts only, known from
    metadata: the tables' versions in the intervals only added rows, and the view only gains
    rows while its tables do (``refusal``). Its APPEND_ONLY changes are then its
    minimum delta, and no row they insert has the key of a row it had."""
    if refusal(tree) is not None:
        return False
    changed = {t: (first, last) for t, (_, first, last) in versions.items() if first < last}
    ctx.catalog.read_ahead(changed)
    return all(
        only_inserted_between(ctx.catalog, t, start=first, end=last)
        for t, (first, last) in changed.items()
    )
