"""A view's definition: its IR, built from the catalog's view texts, and what it means.

A stream on a view remembers the fingerprint of the definitions it was created on (the view's and
those of the views it reads), and goes stale when they change. A view's definition is bound once
per definitions token and kept (plan/kept.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from sqlglot import exp

from changelake.catalog.model import TableInfo
from changelake.dialect import parse_one
from changelake.plan.build import Builder, Catalog
from changelake.plan.grammar import names_read
from changelake.plan.ir import Node
from changelake.plan.kept import Bound, kept
from changelake.plan.monotonic import Refusal, refusal
from changelake.schema import TableSchema
from changelake.txn.context import StatementContext


def _catalog(
    ctx: StatementContext,
    read: list[tuple[str, str]],
    tables: dict[int, TableInfo],
    columns: dict[int, TableSchema],
    at: Mapping[int, TableSchema],
) -> Catalog:
    """What building reads of the catalog; a table's columns are those of ``at`` (by table id),
    else those at the version the statement reads."""
    looked_up: dict[str, TableInfo | None] = {}  # by ahead: None, not a table

    def ahead(query: exp.Expression) -> exp.Expression:
        # one query for the tables it names, one for their schemas at the versions read
        missing = [n for n in names_read(query) if n not in looked_up]
        if missing:
            found = ctx.catalog.find_tables(missing)
            looked_up.update({n: found.get(n) for n in missing})
            ctx.catalog.schemas_at({i.table_id: ctx.read_version(i) for i in found.values()})
        return query

    def table(name: str) -> tuple[TableInfo, tuple[str, ...]] | None:
        key = name.lower()
        info = looked_up[key] if key in looked_up else ctx.catalog.find_table(name)
        if info is None:
            return None
        tables[info.table_id] = info
        schema = at.get(info.table_id) or ctx.schema_state(info).schema
        columns[info.table_id] = schema
        return info, tuple(c.name for c in schema.visible)

    def view_sql(name: str) -> str | None:
        sql = ctx.catalog.view_sql(name)
        if sql is not None:
            read.append((name.lower(), sql))
        return sql

    return Catalog(table, view_sql, ctx.catalog.object_names, ahead)


@dataclass(frozen=True)
class ViewDefinition:
    """A view's IR; the fingerprint of the definitions it was built from; the views it was
    built from (itself last), each with its IR, innermost first; and the base tables its scans
    read, as the statement found them (by id)."""

    tree: Node
    fingerprint: str
    built: tuple[tuple[str, Node], ...]
    tables: Mapping[int, TableInfo]

    def append_only_refusal(self) -> Refusal | None:
        """The operator APPEND_ONLY cannot follow, named in the view it is written in."""
        return refusal(self.tree, self.built)


def view_definition(
    ctx: StatementContext, name: str, about: str, *, at: Mapping[int, int] | None = None
) -> ViewDefinition:
    """View ``name`` as the catalog defines it now; errors name ``about``. Its tables' columns
    are those at the versions the statement reads, or (``at``: table id -> version) those of
    the versions a time travel reads."""
    schemas = ctx.catalog.schemas_at(at) if at else {}

    def bind() -> Bound[ViewDefinition]:
        read: list[tuple[str, str]] = []
        tables: dict[int, TableInfo] = {}
        columns: dict[int, TableSchema] = {}
        builder = Builder(_catalog(ctx, read, tables, columns, schemas), about)
        tree = builder.view(name)
        fingerprint = hashlib.sha256(json.dumps(read).encode()).hexdigest()
        definition = ViewDefinition(
            tree, fingerprint, tuple(builder.built), MappingProxyType(tables)
        )
        # columns at the read versions are what a statement under the same token reads again
        return Bound.of(definition, tables, {} if at else columns)

    def rebind(definition: ViewDefinition, tables: dict[int, TableInfo]) -> ViewDefinition:
        return replace(definition, tables=MappingProxyType(tables))

    key = ("view", name.lower(), tuple(sorted(schemas.items(), key=lambda s: s[0])))
    return kept(ctx, key, bind, rebind)


def view_tree(ctx: StatementContext, name: str, about: str) -> Node:
    return view_definition(ctx, name, about).tree


def query_definition(
    ctx: StatementContext, sql: str, about: str, parsed: exp.Expression | None = None
) -> Bound[ViewDefinition]:
    """A query (a dynamic table's) as the catalog's tables and views define it now, as bound
    (what it was bound from: ``Bound``); its fingerprint covers the query and the views it
    reads. Raises UnsupportedError naming the operator that has no differentiation rule.
    ``parsed``: ``sql`` parsed already (it is consumed)."""
    read: list[tuple[str, str]] = [("", sql)]
    tables: dict[int, TableInfo] = {}
    columns: dict[int, TableSchema] = {}
    catalog = _catalog(ctx, read, tables, columns, {})
    parsed = parsed if parsed is not None else parse_one(sql)
    catalog.ahead(parsed)
    builder = Builder(catalog, about)
    tree = builder.query(parsed, {})
    fingerprint = hashlib.sha256(json.dumps(read).encode()).hexdigest()
    definition = ViewDefinition(tree, fingerprint, tuple(builder.built), MappingProxyType(tables))
    return Bound.of(definition, tables, columns)
