"""Dynamic-table statements of the changelake dialect (a parser mixin of ``Changelake``).

``CREATE [OR REPLACE] DYNAMIC TABLE [IF NOT EXISTS] name [(c1, ...)] options AS query``,
``ALTER DYNAMIC TABLE name REFRESH | SUSPEND | RESUME | SET option = value [, ...]``,
``DROP DYNAMIC TABLE [IF EXISTS] name``, ``DESCRIBE DYNAMIC TABLE name``. Options are
``TARGET_LAG = '<n> <unit>' | DOWNSTREAM``, ``REFRESH_MODE = AUTO | FULL | INCREMENTAL``,
``INITIALIZE = ON_CREATE | ON_SCHEDULE``, ``COMMENT = '...'``, ``WAREHOUSE = name`` (accepted for
Snowflake scripts, and ignored: Spark runs every refresh), ``DATA_RETENTION_TIME_IN_DAYS = n`` and
``MAX_DATA_EXTENSION_TIME_IN_DAYS = n`` (as for tables).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from changelake.dialect.syntax import Syntax
from changelake.errors import InvalidStatementError

OPTIONS = (
    "TARGET_LAG",
    "REFRESH_MODE",
    "INITIALIZE",
    "COMMENT",
    "WAREHOUSE",
    "DATA_RETENTION_TIME_IN_DAYS",
    "MAX_DATA_EXTENSION_TIME_IN_DAYS",
)
# what ALTER ... SET may change (the others are fixed at CREATE)
SETTABLE = (
    "TARGET_LAG",
    "REFRESH_MODE",
    "COMMENT",
    "DATA_RETENTION_TIME_IN_DAYS",
    "MAX_DATA_EXTENSION_TIME_IN_DAYS",
)


class CreateDynamicTableSyntax(Syntax):
    """``options``: option name (upper case) -> its value as written (a str)."""

    arg_types = {
        "this": True,
        "columns": False,
        "options": True,
        "query": True,
        "text": True,
        "replace": False,
        "exists": False,
    }


class AlterDynamicTableSyntax(Syntax):
    """``action``: REFRESH, SUSPEND, RESUME or SET (with ``options``)."""

    arg_types = {"this": True, "action": True, "options": False}


class DropDynamicTableSyntax(Syntax):
    arg_types = {"this": True, "exists": False}


class DescribeDynamicTableSyntax(Syntax):
    arg_types = {"this": True}


class DynamicTableParser:
    """Parse methods for the statements above; mixed into the dialect's parser."""

    _curr: Any
    _prev: Any
    _tokens: Any
    _index: int
    sql: str

    def _dynamic_statement(self) -> Any:
        peek = self._peek  # type: ignore[attr-defined]
        if peek("CREATE", "DYNAMIC") or peek("CREATE", "OR", "REPLACE", "DYNAMIC"):
            return self._parse_create_dynamic
        for words, parse in (
            (("ALTER", "DYNAMIC", "TABLE"), self._parse_alter_dynamic),
            (("DROP", "DYNAMIC", "TABLE"), self._parse_drop_dynamic),
            (("DESCRIBE", "DYNAMIC", "TABLE"), self._parse_describe_dynamic),
            (("DESC", "DYNAMIC", "TABLE"), self._parse_describe_dynamic),
        ):
            if peek(*words):
                return parse
        return None

    def _parse_create_dynamic(self) -> exp.Expression:
        self._advance()  # type: ignore[attr-defined]
        replace = self._match_text_seq("OR", "REPLACE")  # type: ignore[attr-defined]
        self._advance(2)  # type: ignore[attr-defined]  # DYNAMIC TABLE
        exists = self._match_text_seq("IF", "NOT", "EXISTS")  # type: ignore[attr-defined]
        name = self._object_name("dynamic table")  # type: ignore[attr-defined]
        if replace and exists:
            raise InvalidStatementError(
                f"CREATE OR REPLACE DYNAMIC TABLE IF NOT EXISTS {name.name}: OR REPLACE and IF"
                " NOT EXISTS exclude each other; use one."
            )
        columns = None
        if self._match(TokenType.L_PAREN):  # type: ignore[attr-defined]
            columns = self._parse_csv(self._parse_id_var)  # type: ignore[attr-defined]
            if not self._match(TokenType.R_PAREN):  # type: ignore[attr-defined]
                raise InvalidStatementError(
                    f"CREATE DYNAMIC TABLE {name.name}: list the column names in parentheses,"
                    " e.g. (region, total); their types come from the query."
                )
        options = self._dynamic_options(f"CREATE DYNAMIC TABLE {name.name}", OPTIONS)
        if not self._match(TokenType.ALIAS):  # type: ignore[attr-defined]
            raise InvalidStatementError(
                f"CREATE DYNAMIC TABLE {name.name}: expected AS <query> after the options"
                f" (found {self._curr.text if self._curr else 'the end'!r}); options are"
                f" {', '.join(OPTIONS)}."
            )
        start = self._curr.start if self._curr else len(self.sql)
        query = self._parse_statement()  # type: ignore[attr-defined]
        if not isinstance(query, exp.Query):
            raise InvalidStatementError(
                f"CREATE DYNAMIC TABLE {name.name}: AS must be followed by a query (SELECT ...)."
            )
        text = self.sql[start : self._prev.end + 1]
        return self.expression(  # type: ignore[attr-defined]
            CreateDynamicTableSyntax(
                this=name,
                columns=columns,
                options=options,
                query=query,
                text=text,
                replace=replace,
                exists=exists,
            )
        )

    def _dynamic_options(self, about: str, allowed: tuple[str, ...]) -> dict[str, str]:
        options: dict[str, str] = {}
        while self._curr and self._curr.text.upper() in allowed:
            word = self._curr.text.upper()
            self._advance()  # type: ignore[attr-defined]
            if word in options:
                raise InvalidStatementError(f"{about}: {word} is given twice.")
            if not self._match(TokenType.EQ) or self._curr is None:  # type: ignore[attr-defined]
                raise InvalidStatementError(f"{about}: expected {word} = <value>.")
            options[word] = self._curr.text
            self._advance()  # type: ignore[attr-defined]
            self._match(TokenType.COMMA)  # type: ignore[attr-defined]
        return options

    def _parse_alter_dynamic(self) -> exp.Expression:
        self._advance(3)  # type: ignore[attr-defined]
        name = self._object_name("dynamic table")  # type: ignore[attr-defined]
        about = f"ALTER DYNAMIC TABLE {name.name}"
        word = self._curr.text.upper() if self._curr else ""
        if word not in ("REFRESH", "SUSPEND", "RESUME", "SET"):
            raise InvalidStatementError(
                f"{about}: expected REFRESH, SUSPEND, RESUME or SET <option> = <value>."
            )
        self._advance()  # type: ignore[attr-defined]
        options = self._dynamic_options(about, SETTABLE) if word == "SET" else None
        if word == "SET" and not options:
            raise InvalidStatementError(
                f"{about} SET: expected one of {', '.join(SETTABLE)} = <value>."
            )
        return self.expression(  # type: ignore[attr-defined]
            AlterDynamicTableSyntax(this=name, action=word, options=options)
        )

    def _parse_drop_dynamic(self) -> exp.Expression:
        self._advance(3)  # type: ignore[attr-defined]
        exists = self._match_text_seq("IF", "EXISTS")  # type: ignore[attr-defined]
        name = self._object_name("dynamic table")  # type: ignore[attr-defined]
        return self.expression(DropDynamicTableSyntax(this=name, exists=exists))  # type: ignore[attr-defined]

    def _parse_describe_dynamic(self) -> exp.Expression:
        self._advance(3)  # type: ignore[attr-defined]
        name = self._object_name("dynamic table")  # type: ignore[attr-defined]
        return self.expression(DescribeDynamicTableSyntax(this=name))  # type: ignore[attr-defined]
