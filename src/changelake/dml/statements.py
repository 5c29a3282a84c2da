"""The write statements as frozen values: what the parser makes of INSERT, UPDATE, DELETE and MERGE
and what their handlers (and EXPLAIN) take. Queries and expressions stay sqlglot trees (the
binder turns them into Spark plans)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp


@dataclass(frozen=True)
class Insert:
    table: str
    columns: list[str] | None
    source: exp.Expression
    overwrite: bool


@dataclass(frozen=True)
class Update:
    table: exp.Table
    assignments: list[exp.Expression]
    source: exp.Expression | None
    condition: exp.Expression | None


@dataclass(frozen=True)
class Delete:
    table: exp.Table
    using: list[exp.Expression]
    condition: exp.Expression | None


@dataclass(frozen=True)
class Merge:
    table: exp.Table
    source: exp.Expression
    on: exp.Expression
    whens: list[exp.Expression]
