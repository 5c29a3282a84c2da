"""Differentiation: the changes of a query as a plan over its base tables' changes and states.

Δ is pushed from the root to the scans by one rule per operator (paper 3.2.1); the result is an IR
tree whose leaves are ``Delta`` (a table's changes over the interval) and ``At`` (a table at the
interval's start or end), which the compiler runs like any other plan. A subtree whose tables did
not change has no derivative (None), so joins with an unchanged side drop a term.

The rules produce a *redundant* delta: a row may be deleted and inserted again unchanged (an
update to a column the view excludes), so DEFAULT consolidates at the end (``view_changes``).

>>> from changelake.plan.ir import Col, Scan
>>> people = Scan("people", 1, "people", ("id",), (Col("_v0", "id"),))
>>> items = Scan("items", 2, "items", ("oid",), (Col("_v1", "oid"),))
>>> q = Join(people, items, JoinKind.INNER, "_v0 = _v1")
>>> print(formula(derive(q, changed=lambda s: True)))
(people@start ⋈ Δitems) + (Δpeople ⋈ items@end)
>>> print(formula(derive(q, changed=lambda s: s.table == "items")))
people@start ⋈ Δitems
"""

from __future__ import annotations

from collections.abc import Callable

from changelake.plan.ir import (
    Aggregate,
    At,
    Branch,
    Delta,
    End,
    Filter,
    Join,
    JoinKind,
    Node,
    Pad,
    Project,
    Regroup,
    Scan,
    Signed,
    Union,
    Window,
    at,
    children,
    referenced,
    scans,
    source_column,
)

Changed = Callable[[Scan], bool]


def derive(node: Node, *, changed: Changed, added_only: bool = False) -> Node | None:
    """Δ``node``: its changes over the interval, or None if none of its tables changed.

    ``added_only``: Δ⁺``node``, the rows it adds, for a view ``monotonic.refusal`` accepts, from
    the rows its tables added. The same rules, except for semi joins, whose rows gaining a
    partner count only if they had none at the start (``delta_semi_added``).
    """

    def down(child: Node) -> Node | None:
        return derive(child, changed=changed, added_only=added_only)

    if isinstance(node, Scan):
        return delta_scan(node, changed)
    if isinstance(node, Filter):
        return delta_filter(node, down(node.child))
    if isinstance(node, Project):
        return delta_project(node, down(node.child))
    if isinstance(node, Branch):
        return delta_branch(node, down(node.child))
    if isinstance(node, Union):
        return delta_union(node, down(node.left), down(node.right))
    if added_only:
        if isinstance(node, Join) and node.kind is JoinKind.SEMI:
            return delta_semi_added(node, down(node.left), down(node.right))
        if not (isinstance(node, Join) and node.kind in (JoinKind.INNER, JoinKind.CROSS)):
            raise TypeError(f"APPEND_ONLY cannot follow {type(node).__name__}; refusal() says why")
    if isinstance(node, Join):
        return delta_join(node, down(node.left), down(node.right))
    if isinstance(node, Aggregate):
        return delta_aggregate(node, down(node.child))
    if isinstance(node, Window):
        return delta_window(node, down(node.child))
    raise TypeError(f"cannot differentiate {type(node).__name__}")


def delta_scan(scan: Scan, changed: Changed) -> Node | None:
    """Δ of a base table is its change scan.

    >>> s = Scan("t", 1, "t", (), ())
    >>> derive(s, changed=lambda _: True), derive(s, changed=lambda _: False)
    (Delta(scan=Scan(table='t', table_id=1, alias='t', sources=(), columns=())), None)
    """
    return Delta(scan) if changed(scan) else None


def delta_filter(node: Filter, child: Node | None) -> Node | None:
    """Linear: Δσ(Q) = σ(ΔQ). A row updated into or out of the filter keeps only its INSERT or
    its DELETE half (update coercion).

    >>> s = Scan("t", 1, "t", (), ())
    >>> print(formula(derive(Filter(s, "x > 1"), changed=lambda _: True)))
    σ(Δt)
    """
    return None if child is None else Filter(child, node.condition, node.shown)


def delta_project(node: Project, child: Node | None) -> Node | None:
    """Linear: Δπ(Q) = π(ΔQ); ids pass through unchanged.

    >>> s = Scan("t", 1, "t", (), ())
    >>> print(formula(derive(Project(s, (), ()), changed=lambda _: True)))
    π(Δt)
    """
    return None if child is None else Project(child, node.outputs, node.expressions)


def delta_branch(node: Branch, child: Node | None) -> Node | None:
    """A UNION ALL branch tags the ids of its changes as it tags its rows."""
    return None if child is None else Branch(child, node.tag)


def delta_union(node: Union, left: Node | None, right: Node | None) -> Node | None:
    """Linear: Δ(Q ∪ R) = ΔQ ∪ ΔR. A union's columns are its left branch's, so the right
    branch's changes alone take the left's column names.

    >>> a, b = Scan("a", 1, "a", (), ()), Scan("b", 2, "b", (), ())
    >>> u = Union(Branch(a, "0"), Branch(b, "1"))
    >>> print(formula(derive(u, changed=lambda _: True)))
    Δa ∪ Δb
    >>> print(formula(derive(u, changed=lambda s: s.table == "b")))
    π(Δb)
    """
    if left is None and right is None:
        return None
    if right is None:
        return left
    if left is None:
        names = tuple(f"`{c.id}`" for c in node.right.columns)
        return Project(right, node.left.columns, names)
    return Union(left, right)


def delta_join(node: Join, left: Node | None, right: Node | None) -> Node | None:
    """Bilinear: Δ(Q ⋈ R) = Q|start ⋈ ΔR + ΔQ ⋈ R|end, for inner and cross joins. A term whose
    delta side did not change is dropped. Semi and anti joins: ``delta_semi_anti``. Outer joins
    are their matched rows plus each outer side's unmatched rows padded with NULLs:
    Δ(Q ⟕ R) = Δ(Q ⋈ R) + pad(Δ(Q ▷ R)).

    >>> from changelake.plan.ir import Col
    >>> q = Scan("q", 1, "q", ("k",), (Col("_v0", "k"),))
    >>> r = Scan("r", 2, "r", ("k",), (Col("_v1", "k"),))
    >>> left = Join(q, r, JoinKind.LEFT, "_v0 = _v1")
    >>> print(formula(derive(left, changed=lambda s: s.table == "q")))
    Δq ⋈ r@end ∪ pad(Δq ▷ r@end)
    """
    if node.kind in (JoinKind.SEMI, JoinKind.ANTI):
        return delta_semi_anti(node, left, right)
    if node.kind in (JoinKind.LEFT, JoinKind.RIGHT, JoinKind.FULL):
        return _delta_outer(node, left, right)
    terms: list[Node] = []
    if right is not None:
        terms.append(Join(at(node.left, End.START), right, node.kind, node.condition, node.shown))
    return _sum(terms + _left_terms(node, left))


def _left_terms(node: Join, left: Node | None) -> list[Node]:
    """ΔQ ⋈ R|end (the join's own kind), the term of the left side's changes, if it changed."""
    if left is None:
        return []
    return [Join(left, at(node.right, End.END), node.kind, node.condition, node.shown)]


def delta_semi_added(node: Join, left: Node | None, right: Node | None) -> Node | None:
    """Δ⁺ of a semi join whose inputs only gain rows: a row gaining a partner is added only if
    it had none at the start, Δ⁺(Q ⋉ R) = Δ⁺Q ⋉ R|end + +((Q|start ⋉ Δ⁺R) ▷ R|start)."""
    terms = _left_terms(node, left)
    cond, shown = node.condition, node.shown
    if right is not None:
        partnered = Join(at(node.left, End.START), right, JoinKind.SEMI, cond, shown)
        new = Join(partnered, at(node.right, End.START), JoinKind.ANTI, cond, shown)
        terms.append(Signed(new, "INSERT"))  # rows of a state: say they are added
    return _sum(terms)


def delta_semi_anti(node: Join, left: Node | None, right: Node | None) -> Node | None:
    """Δ(Q ▷ R) = ΔQ ▷ R|end + (C ▷ R|end as INSERT) − (C ▷ R|start as DELETE), where
    C = Q|start ⋉ ΔR are the rows whose partners may have changed (the same with ⋉ for semi
    joins): linear in Q, and in R only through the rows that ΔR touches.

    >>> from changelake.plan.ir import Col
    >>> q = Scan("q", 1, "q", ("k",), (Col("_v0", "k"),))
    >>> r = Scan("r", 2, "r", ("k",), (Col("_v1", "k"),))
    >>> anti = Join(q, r, JoinKind.ANTI, "_v0 = _v1")
    >>> print(formula(derive(anti, changed=lambda s: s.table == "r")))
    +((q@start ⋉ Δr) ▷ r@end) ∪ −((q@start ⋉ Δr) ▷ r@start)
    """
    terms = _left_terms(node, left)
    cond, shown = node.condition, node.shown
    if right is not None:
        candidates = Join(at(node.left, End.START), right, JoinKind.SEMI, cond, shown)
        after = Join(candidates, at(node.right, End.END), node.kind, cond, shown)
        before = Join(candidates, at(node.right, End.START), node.kind, cond, shown)
        terms += [Signed(after, "INSERT"), Signed(before, "DELETE")]
    return _sum(terms)


def _delta_outer(node: Join, left: Node | None, right: Node | None) -> Node | None:
    cond, shown = node.condition, node.shown
    terms = [delta_join(Join(node.left, node.right, JoinKind.INNER, cond, shown), left, right)]
    if node.kind in (JoinKind.LEFT, JoinKind.FULL):
        anti = Join(node.left, node.right, JoinKind.ANTI, cond, shown)
        unmatched = delta_semi_anti(anti, left, right)
        terms.append(None if unmatched is None else Pad(unmatched, node.right.columns, "left"))
    if node.kind in (JoinKind.RIGHT, JoinKind.FULL):
        anti = Join(node.right, node.left, JoinKind.ANTI, cond, shown)
        unmatched = delta_semi_anti(anti, right, left)
        terms.append(None if unmatched is None else Pad(unmatched, node.left.columns, "right"))
    return _sum([t for t in terms if t is not None])


def _sum(terms: list[Node]) -> Node | None:
    if not terms:
        return None
    out = terms[0]
    for term in terms[1:]:
        out = Union(out, term)
    return out


def delta_aggregate(node: Aggregate, child: Node | None) -> Node | None:
    """Stateful: Δγ(Q) = the groups whose keys ΔQ touches, recomputed at both ends (old values
    deleted, new ones inserted; unchanged groups cancel in consolidation). DISTINCT is the
    aggregate without values.

    >>> s = Scan("t", 1, "t", (), ())
    >>> print(formula(derive(Aggregate(s, (), (), (), ()), changed=lambda _: True)))
    γ(t | touched by Δt)
    """
    return None if child is None else Regroup(node, child, _bounded(node, child))


def _bounded(node: Aggregate | Window, child: Node) -> tuple[int, str] | None:
    """(table id, column) when a key of ``node`` is a column of a base table that is the only
    one changing (and read once): the touched keys are then values of its changed rows."""
    keys = node.key_expressions if isinstance(node, Aggregate) else node.partition
    changed = {d.scan.table_id for d in _deltas(child)}
    for key in keys:
        named = referenced(key)
        found = source_column(node.child, named) if named else None
        if found is None:
            continue
        scan, column = found
        once = sum(1 for s in scans(node.child) if s.table_id == scan.table_id) == 1
        if changed == {scan.table_id} and once:
            return scan.table_id, column
    return None


def _deltas(node: Node) -> list[Delta]:
    if isinstance(node, Delta):
        return [node]
    return [d for c in children(node) for d in _deltas(c)]


def delta_window(node: Window, child: Node | None) -> Node | None:
    """Stateful: Δω(Q) = the partitions that ΔQ touches, recomputed at both ends; a row keeps
    its input's id, so a row whose window values did not change cancels in consolidation.
    Without PARTITION BY every change touches the one partition: all rows are recomputed.

    >>> s = Scan("t", 1, "t", (), ())
    >>> print(formula(derive(Window(s, ("k",), (), ()), changed=lambda _: True)))
    ω(t | touched by Δt)
    """
    return None if child is None else Regroup(node, child, _bounded(node, child))


def formula(node: Node) -> str:
    """A derivative written as algebra, for doctests and EXPLAIN."""
    if isinstance(node, Delta):
        return f"Δ{node.scan.alias}"
    if isinstance(node, At):
        return f"{node.scan.alias}@{node.end.value}"
    if isinstance(node, Scan):
        return node.alias
    if isinstance(node, Filter):
        return f"σ({formula(node.child)})"
    if isinstance(node, Project):
        return f"π({formula(node.child)})"
    if isinstance(node, Branch):
        return formula(node.child)
    if isinstance(node, Aggregate):
        return f"γ({formula(node.child)})"
    if isinstance(node, Window):
        return f"ω({formula(node.child)})"
    if isinstance(node, Regroup):
        op = "γ" if isinstance(node.stateful, Aggregate) else "ω"
        return f"{op}({formula(node.stateful.child)} | touched by {formula(node.delta)})"
    if isinstance(node, Join):
        return f"{_term(node.left)} {_SYMBOL[node.kind]} {_term(node.right)}"
    if isinstance(node, Union):
        if isinstance(node.left, Join) and isinstance(node.right, Join):
            return f"({formula(node.left)}) + ({formula(node.right)})"
        return f"{formula(node.left)} ∪ {formula(node.right)}"
    if isinstance(node, Pad):
        return f"pad({formula(node.child)})"
    if isinstance(node, Signed):
        return f"{'+' if node.action == 'INSERT' else '−'}({formula(node.child)})"
    raise TypeError(type(node).__name__)


_SYMBOL = {
    JoinKind.INNER: "⋈",
    JoinKind.CROSS: "×",
    JoinKind.LEFT: "⟕",
    JoinKind.RIGHT: "⟖",
    JoinKind.FULL: "⟗",
    JoinKind.SEMI: "⋉",
    JoinKind.ANTI: "▷",
}


def _term(node: Node) -> str:
    text = formula(node)
    return f"({text})" if isinstance(node, Join | Union) else text
