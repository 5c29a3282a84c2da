"""The changelake SQL dialect: Spark SQL plus Snowflake's CHANGES, AT|BEFORE, TS and ``$`` names.

Strings follow Snowflake (``'it''s'`` is one string with a quote), identifiers may contain ``$``
(``METADATA$ACTION``), and ``$ACTION`` is short for ``METADATA$ACTION`` as in the paper.
"""

from __future__ import annotations

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
        raise SqlSyntaxError(
            f"Syntax error: {first.get('description', str(e))} near"
            f" {first.get('highlight', '') or 'end of input'!r}",
            line=first.get("line"),
            column=first.get("col"),
        ) from None
    except TokenError as e:
        raise SqlSyntaxError(f"Syntax error: {e}") from None
    if not statements:
        raise SqlSyntaxError("Empty statement: give one SQL statement.")
    if len(statements) > 1:
        raise SqlSyntaxError(
            f"Got {len(statements)} statements; session.sql runs one statement per call."
        )
    return normalize_metadata_names(statements[0])


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
