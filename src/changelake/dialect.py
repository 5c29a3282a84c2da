"""The changelake SQL dialect: Spark SQL plus Snowflake's CHANGES, AT|BEFORE, TS and ``$`` names.

Strings follow Snowflake (``'it''s'`` is one string with a quote), identifiers may contain ``$``
(``METADATA$ACTION``), and ``$ACTION`` is short for ``METADATA$ACTION`` as in the paper.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, TokenError

from changelake.errors import SqlSyntaxError

METADATA_COLUMNS = ("ACTION", "ISUPDATE", "ROW_ID", "COMMIT_VERSION", "COMMIT_TIMESTAMP")


class Changelake(Spark):
    class Tokenizer(Spark.Tokenizer):
        VAR_SINGLE_TOKENS = {"$"}
        STRING_ESCAPES = ["\\", "'"]

    class Parser(Spark.Parser):
        HISTORICAL_DATA_KIND = Spark.Parser.HISTORICAL_DATA_KIND | {"TS"}


def parse_one(text: str) -> exp.Expression:
    """Parse exactly one statement, raising SqlSyntaxError with line and column on failure."""
    try:
        statements = [s for s in sqlglot.parse(text, read=Changelake) if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        near = first.get("highlight", "")
        end = first.get("col")  # sqlglot points at the last character of the token
        raise SqlSyntaxError(
            f"Syntax error: {_plain(first.get('description', str(e)))} near"
            f" {near or 'end of input'!r}",
            line=first.get("line"),
            column=end - len(near) + 1 if end is not None and near else end,
        ) from None
    except TokenError:
        line, column = _unclosed_quote(text)
        raise SqlSyntaxError(
            "Syntax error: a quoted string or name is not closed", line=line, column=column
        ) from None
    if not statements:
        raise SqlSyntaxError("Empty statement: give one SQL statement.")
    if len(statements) > 1:
        raise SqlSyntaxError(
            f"Got {len(statements)} statements; session.sql runs one statement per call."
        )
    return normalize_metadata_names(statements[0])


_MISSING = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>")
_CLAUSES = {"Where", "From", "Join", "Group", "Having", "Order", "Limit", "Select", "Values"}


def _plain(description: str) -> str:
    """sqlglot's description of a parse error, without its class names."""
    found = _MISSING.search(description)
    if found is None:
        return description
    name = found.group(1)
    return f"incomplete {name.upper() if name in _CLAUSES else 'expression'}"


def _unclosed_quote(text: str) -> tuple[int | None, int | None]:
    """Line and column (1-based) of the quote that opens a string or name left unclosed."""
    quote, start = None, 0
    for i, ch in enumerate(text):
        if quote is None and ch in "'\"`":
            quote, start = ch, i
        elif ch == quote:
            quote = None
    if quote is None:
        return None, None
    line = text.count("\n", 0, start) + 1
    return line, start - (text.rfind("\n", 0, start) + 1) + 1


def normalize_metadata_names(tree: exp.Expression) -> exp.Expression:
    """Rewrite ``$ACTION`` to ``METADATA$ACTION`` and quote ``$`` names so Spark accepts them."""

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Parameter) and isinstance(node.this, exp.Var):
            name = node.this.name.upper()
            if name in METADATA_COLUMNS:
                return exp.column(exp.to_identifier(f"METADATA${name}", quoted=True))
        if isinstance(node, exp.Identifier) and "$" in node.name and not node.quoted:
            upper = node.name.upper()
            return exp.to_identifier(
                upper if upper.startswith("METADATA$") else node.name, quoted=True
            )
        return node

    return tree.transform(fix, copy=False)


def to_spark(tree: exp.Expression) -> str:
    return tree.sql(dialect=Changelake)
