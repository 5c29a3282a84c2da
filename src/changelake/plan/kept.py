"""Bound definitions kept across statements: a view's IR or a dynamic table's query, bound once
per definitions token (txn/definitions.py) and reused by every statement that reads under it.

A binding holds the tables it found by name and id, and the columns each had at the versions its
statement read. A statement under the same token finds the same tables with the same columns at
its own read versions (columns change only by DDL, which renews the token), so it takes the IR
as it is and reads only the tables' rows again (one query: current versions and retention move
without DDL), and the columns it would have read besides. A table that is no longer the one the
binding found (a name taken by another table after the statement's snapshot) makes it bind
afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from changelake.catalog.model import TableInfo
from changelake.schema import TableSchema
from changelake.txn.context import StatementContext

T = TypeVar("T")


@dataclass(frozen=True)
class Bound(Generic[T]):
    """A definition as one statement bound it; ``tables``: (name, id) of each table it found;
    ``columns``: per table id, the schema it bound the table's columns from."""

    definition: T
    tables: tuple[tuple[str, int], ...]
    columns: tuple[tuple[int, TableSchema], ...]

    @staticmethod
    def of(
        definition: T, tables: Mapping[int, TableInfo], columns: Mapping[int, TableSchema]
    ) -> Bound[T]:
        return Bound(
            definition,
            tuple(sorted((info.name, table_id) for table_id, info in tables.items())),
            tuple(sorted((t, c) for t, c in columns.items() if t in tables)),
        )


def kept(
    ctx: StatementContext,
    key: Hashable,
    bind: Callable[[], Bound[T]],
    rebind: Callable[[T, dict[int, TableInfo]], T],
) -> T:
    """The definition ``bind`` makes, or the one kept under ``key`` for this statement's
    definitions, given to ``rebind`` with the tables as this statement reads them."""
    return kept_all(ctx, [(key, bind)], rebind)[0]


def kept_all(
    ctx: StatementContext,
    wanted: Sequence[tuple[Hashable, Callable[[], Bound[T]]]],
    rebind: Callable[[T, dict[int, TableInfo]], T],
) -> list[T]:
    """``kept`` of each (key, bind) of ``wanted``, the tables of all those kept read in one
    query (a round of dynamic tables rebinds its queries at once)."""
    definitions = ctx.catalog.definitions()
    found = [None if definitions is None else definitions.get(key) for key, _ in wanted]
    names = sorted({name for bound in found if bound is not None for name, _ in bound.tables})
    named = ctx.catalog.find_tables(names) if names else {}
    result = []
    for (key, bind), bound in zip(wanted, found, strict=True):
        tables = None if bound is None else _tables_now(ctx, bound, named)
        if bound is not None and tables is not None:
            result.append(rebind(bound.definition, tables))
            continue
        fresh = bind()
        if definitions is not None:
            definitions.put(key, fresh)
        result.append(fresh.definition)
    return result


def _tables_now(
    ctx: StatementContext, bound: Bound, named: Mapping[str, TableInfo]
) -> dict[int, TableInfo] | None:
    """The tables of ``bound`` as this statement reads them (``named``: the live tables by
    name), with the columns it bound kept for the statement; None if a name now names another
    table."""
    tables: dict[int, TableInfo] = {}
    for name, table_id in bound.tables:
        info = named.get(name)
        if info is None or info.table_id != table_id:
            return None
        tables[table_id] = info
    ctx.catalog.keep_schemas(
        {(t, ctx.read_version(tables[t])): schema for t, schema in bound.columns}
    )
    return tables
