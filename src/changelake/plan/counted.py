"""``SELECT COUNT(*) FROM t`` answered from the catalog: a table state's live rows are known
(each file's row count less its deletion vectors' rows), so the count needs no scan and no
Spark job, as Snowflake and Delta Lake answer it from metadata.
"""

from __future__ import annotations

from sqlglot import exp

from changelake.spark.relation import Relation

_BARE = {"expressions", "from", "from_"}


def whole_count(tree: exp.Expression, live_rows: dict[str, int]) -> Relation | None:
    """The count of ``tree`` as one literal row when ``tree`` is ``SELECT COUNT(*)`` (or
    ``COUNT(1)``, aliased or not) of one placeholder in ``live_rows`` and nothing else."""
    if not isinstance(tree, exp.Select) or {k for k, v in tree.args.items() if v} - _BARE:
        return None
    if len(tree.expressions) != 1:
        return None
    item = tree.expressions[0]
    counted = item.this if isinstance(item, exp.Alias) else item
    if not isinstance(counted, exp.Count) or {k for k, v in counted.args.items() if v} - {
        "this",
        "big_int",
    }:
        return None
    argument = counted.this
    if not (isinstance(argument, exp.Star) or _is_one(argument)):
        return None
    source = tree.args.get("from") or tree.args.get("from_")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or {k for k, v in table.args.items() if v} - {
        "this",
        "alias",
    }:
        return None
    rows = live_rows.get(table.name)
    if rows is None:
        return None
    name = item.alias if isinstance(item, exp.Alias) else "count(1)"
    column = name.replace("`", "``")
    return Relation.of_sql(
        f"SELECT * FROM VALUES (CAST({rows} AS BIGINT)) AS _c(`{column}`)", [name]
    )


def _is_one(e: exp.Expression) -> bool:
    return isinstance(e, exp.Literal) and not e.is_string and e.this == "1"
