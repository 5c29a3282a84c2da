"""Schema-qualified names in SQL a user or dbt writes by hand (``insert into {{ target.schema
}}.seed``, hooks, analyses): ``schema.name`` becomes the warehouse's name for it
(``relation.stored_name``), for the schemas of this profile.

Only the text of two name tokens and a dot changes: strings, comments and the rest stay as
written. The schemas are the profile's own and its custom ones (dbt names those
``<schema>_<custom>``); any other ``a.b`` is left to changelake (a column of a table alias).
"""

from __future__ import annotations

from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType

from dbt.adapters.changelake.relation import stored_name

_NAMES = (TokenType.VAR, TokenType.IDENTIFIER)


def unqualified(statement: str, schema: str) -> str:
    """``statement`` with names qualified by ``schema`` (or one of its custom schemas) made the
    warehouse's names."""
    if "." not in statement:
        return statement
    ours = schema.lower()
    try:
        tokens = Spark().tokenize(statement)
    except Exception:  # sqlglot cannot tokenize it: changelake will say what is wrong
        return statement
    parts, last, skip = [], 0, -1
    for i in range(len(tokens) - 2):
        first, dot, name = tokens[i : i + 3]
        if i <= skip or first.token_type not in _NAMES or dot.token_type != TokenType.DOT:
            continue
        if name.token_type not in _NAMES or (i and tokens[i - 1].token_type == TokenType.DOT):
            continue
        owner = first.text.lower()
        if owner != ours and not owner.startswith(ours + "_"):
            continue
        if i + 3 < len(tokens) and tokens[i + 3].token_type == TokenType.DOT:
            continue  # schema.table.column: a qualified column, left as written
        parts.append(statement[last : first.start])
        parts.append(stored_name(first.text, name.text))
        last, skip = name.end + 1, i + 2
    return "".join(parts) + statement[last:] if parts else statement
