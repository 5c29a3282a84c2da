"""A dynamic table's query: its IR (when it differentiates), what it reads, and the refresh mode
it gets."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from types import MappingProxyType

from sqlglot import exp

from changelake.catalog.model import RefreshMode, TableInfo
from changelake.dialect import parse_one
from changelake.errors import InvalidStatementError, TableNotFoundError, UnsupportedError
from changelake.plan.definition import query_definition, view_tree
from changelake.plan.ir import Node, scans
from changelake.plan.kept import Bound, kept_all
from changelake.txn.context import StatementContext


@dataclass(frozen=True)
class Definition:
    """``tree`` is None when the query has no differentiation rule (``refusal`` says which
    operator); such a query is refreshed FULL. ``tables``: every base table it reads (through
    views), by id: a refresh's frontier has one version per table."""

    sql: str
    tree: Node | None
    refusal: str
    fingerprint: str
    depends_on: tuple[str, ...]
    tables: Mapping[int, TableInfo]


def define(ctx: StatementContext, sql: str, about: str) -> Definition:
    """The definition of query ``sql`` over the catalog as it is now (bound once per
    definitions token, plan/kept.py); errors and the refusal name ``about``."""
    return define_all(ctx, [(sql, about)])[0]


def define_all(ctx: StatementContext, queries: Sequence[tuple[str, str]]) -> list[Definition]:
    """``define`` of each (sql, about), those kept rebound with one read of their tables."""
    return kept_all(
        ctx,
        [(("query", sql, about), partial(_bind, ctx, sql, about)) for sql, about in queries],
        _rebind,
    )


def _bind(ctx: StatementContext, sql: str, about: str) -> Bound[Definition]:
    tree = parse_one(sql)
    named = _named(tree)
    found = ctx.catalog.find_tables(named)
    for name in named:
        if name not in found and ctx.catalog.view_sql(name) is None:
            raise TableNotFoundError(f"{about}: table or view {name!r} does not exist.")
    try:
        built = query_definition(ctx, sql, about, tree)
    except UnsupportedError as e:
        views = sorted((n, ctx.catalog.view_sql(n) or "") for n in named)
        fingerprint = hashlib.sha256(json.dumps([sql, views]).encode()).hexdigest()
        tables = MappingProxyType(_tables(ctx, named))
        return Bound.of(Definition(sql, None, str(e), fingerprint, named, tables), tables, {})
    view = built.definition
    tables = MappingProxyType({s.table_id: view.tables[s.table_id] for s in scans(view.tree)})
    definition = Definition(sql, view.tree, "", view.fingerprint, named, tables)
    return Bound.of(definition, tables, dict(built.columns))


def _rebind(definition: Definition, tables: dict[int, TableInfo]) -> Definition:
    return replace(definition, tables=MappingProxyType(tables))


def _named(tree: exp.Expression) -> tuple[str, ...]:
    """The tables and views a query names (not its CTEs), lower case."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names = {t.name.lower() for t in tree.find_all(exp.Table) if t.name}
    return tuple(sorted(names - ctes))


def _tables(ctx: StatementContext, named: tuple[str, ...]) -> dict[int, TableInfo]:
    found: dict[int, TableInfo] = {}
    for name in named:
        info = ctx.catalog.find_table(name)
        if info is not None:
            found[info.table_id] = info
            continue
        try:
            inner = view_tree(ctx, name, f"view {name}")
        except UnsupportedError:
            continue  # a view that does not differentiate: no frontier, every refresh is FULL
        for scan in scans(inner):
            found[scan.table_id] = ctx.catalog.table_by_id(scan.table_id)
    return found


def effective_mode(requested: str, definition: Definition, about: str) -> tuple[str, str]:
    """The refresh mode a definition gets for REFRESH_MODE = ``requested``, and why."""
    if requested == RefreshMode.FULL:
        return RefreshMode.FULL, "REFRESH_MODE = FULL"
    if definition.tree is None:
        if requested == RefreshMode.INCREMENTAL:
            raise InvalidStatementError(
                f"{about}: REFRESH_MODE = INCREMENTAL, but the query cannot be refreshed"
                f" incrementally: {definition.refusal} Use REFRESH_MODE = FULL or AUTO."
            )
        return RefreshMode.FULL, f"the query does not differentiate: {definition.refusal}"
    if requested == RefreshMode.INCREMENTAL:
        return RefreshMode.INCREMENTAL, "REFRESH_MODE = INCREMENTAL"
    return RefreshMode.INCREMENTAL, "every operator of the query differentiates"
