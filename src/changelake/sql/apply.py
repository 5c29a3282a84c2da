"""APPLY CHANGES statements: their typed value, built from the dialect's node; the work is in
``changelake.changelog``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from changelake.changelog.spec import ApplySpec, OpFormat
from changelake.dialect import apply as d


@dataclass(frozen=True)
class ApplyChanges:
    """``APPLY CHANGES INTO ... FROM source ...``: what to apply, and the source reference
    (a table, view or stream, or a subquery)."""

    spec: ApplySpec
    source: exp.Expression


def _apply_changes(tree: d.ApplyChangesSyntax) -> ApplyChanges:
    """The statement of a parsed ``APPLY CHANGES``."""

    def names(key: str) -> tuple[str, ...] | None:
        found = tree.args.get(key)
        return tuple(e.name for e in found.expressions) if found is not None else None

    def path(key: str) -> tuple[str, ...] | None:
        found = tree.args.get(key)
        return tuple(p.name for p in found.parts) if found is not None else None

    op_format = tree.args.get("op_format")
    spec = ApplySpec(
        target=tree.this.name,
        keys=names("keys") or (),
        sequence_by=path("sequence") or (),
        op_column=path("op_column"),
        op_format=OpFormat.parse(op_format.name) if op_format is not None else None,
        delete_when=tree.args.get("delete_when"),
        ignore_null_updates=bool(tree.args.get("ignore_null_updates")),
        columns=names("columns"),
        except_columns=names("except_columns"),
        scd_type=tree.args.get("scd_type") or 1,
    )
    return ApplyChanges(spec, tree.args["source"])


BUILDERS: dict[type, Callable[..., ApplyChanges]] = {d.ApplyChangesSyntax: _apply_changes}
