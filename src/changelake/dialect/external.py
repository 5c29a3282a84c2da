"""External-table and connection statements of the changelake dialect (a parser mixin of
``Changelake``).

``CREATE [OR REPLACE] CONNECTION [IF NOT EXISTS] name TYPE = POSTGRES OPTIONS (key => value, ...)``
(``key = value`` too), ``DROP CONNECTION [IF EXISTS] name``;
``CREATE [OR REPLACE] EXTERNAL TABLE [IF NOT EXISTS] name [(column type, ...)] source options``
where the source is ``FROM CONNECTION conn TABLE 'schema.table'`` (options ``KEYS (c, ...)``,
``SCOPE = ALL | DEPENDENTS``) or ``FROM FILES '<directory or URI>'`` (options
``FILE_FORMAT = (TYPE = PARQUET | CSV | JSON [, option = value ...])``, ``PATTERN = '<regex>'``),
both with ``FOLLOW_LAG = '<n> <unit>'`` and ``COMMENT = '...'``, options in any order;
``ALTER EXTERNAL TABLE name REFRESH | SUSPEND | RESUME | SET FOLLOW_LAG = '...' [, COMMENT = '...']``,
``DROP EXTERNAL TABLE [IF EXISTS] name``, ``DESCRIBE | DESC EXTERNAL TABLE name``.
"""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from changelake.dialect.syntax import Syntax
from changelake.errors import InvalidStatementError

CONNECTION_TYPES = ("POSTGRES",)
FILE_TYPES = ("PARQUET", "CSV", "JSON")
SCOPES = ("ALL", "DEPENDENTS")
CONNECTION_OPTIONS = ("KEYS", "SCOPE", "FOLLOW_LAG", "COMMENT")
FILES_OPTIONS = ("FILE_FORMAT", "PATTERN", "FOLLOW_LAG", "COMMENT")
# what ALTER ... SET may change (the others are fixed at CREATE)
SETTABLE = ("FOLLOW_LAG", "COMMENT")

CREATE_CONNECTION = (
    "CREATE [OR REPLACE] CONNECTION [IF NOT EXISTS] name TYPE = POSTGRES"
    " OPTIONS (host => '...', port => 5432, ...)"
)
CREATE_EXTERNAL = (
    "CREATE [OR REPLACE] EXTERNAL TABLE [IF NOT EXISTS] name [(column type, ...)]"
    " FROM CONNECTION conn TABLE 'schema.table' [KEYS (c, ...)] [SCOPE = ALL | DEPENDENTS]"
    " [FOLLOW_LAG = '1 minute'] [COMMENT = '...'], or ... FROM FILES '<directory>'"
    " FILE_FORMAT = (TYPE = PARQUET | CSV | JSON) [PATTERN = '<regex>'] [FOLLOW_LAG = '1 minute']"
    " [COMMENT = '...']"
)
ALTER_EXTERNAL = (
    "ALTER EXTERNAL TABLE name REFRESH | SUSPEND | RESUME | SET FOLLOW_LAG = '1 minute'"
    " [, COMMENT = '...']"
)
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CreateConnectionSyntax(Syntax):
    """``kind``: the TYPE, upper case; ``options``: key (lower case) -> value as text."""

    arg_types = {"this": True, "kind": True, "options": True, "replace": False, "exists": False}


class DropConnectionSyntax(Syntax):
    arg_types = {"this": True, "exists": False}


class CreateExternalTableSyntax(Syntax):
    """``source``: CONNECTION (with ``connection`` and the remote ``table``, both str) or FILES
    (with ``location`` and ``file_format``: option (upper case) -> value as text);
    ``columns``: (name, type as written) pairs; ``keys``: column names; ``options``: SCOPE,
    PATTERN, FOLLOW_LAG, COMMENT (upper case) -> value as text."""

    arg_types = {
        "this": True,
        "columns": False,
        "source": True,
        "connection": False,
        "table": False,
        "location": False,
        "file_format": False,
        "keys": False,
        "options": True,
        "replace": False,
        "exists": False,
    }


class AlterExternalTableSyntax(Syntax):
    """``action``: REFRESH, SUSPEND, RESUME or SET (with ``options``)."""

    arg_types = {"this": True, "action": True, "options": False}


class DropExternalTableSyntax(Syntax):
    arg_types = {"this": True, "exists": False}


class DescribeExternalTableSyntax(Syntax):
    arg_types = {"this": True}


class ExternalTableParser:
    """Parse methods for the statements above; mixed into the dialect's parser."""

    _curr: Any
    _prev: Any
    _tokens: Any
    _index: int
    sql: str
    _peek: Any
    _advance: Any
    _match: Any
    _match_text_seq: Any
    _match_texts: Any
    _parse_id_var: Any
    expression: Any

    def _external_statement(self) -> Any:
        for words, parse in (
            (("CREATE", "CONNECTION"), self._parse_create_connection),
            (("CREATE", "OR", "REPLACE", "CONNECTION"), self._parse_create_connection),
            (("CREATE", "EXTERNAL", "TABLE"), self._parse_create_external),
            (("CREATE", "OR", "REPLACE", "EXTERNAL", "TABLE"), self._parse_create_external),
            (("ALTER", "EXTERNAL", "TABLE"), self._parse_alter_external),
            (("DROP", "EXTERNAL", "TABLE"), self._parse_drop_external),
            (("DROP", "CONNECTION"), self._parse_drop_connection),
            (("DESCRIBE", "EXTERNAL", "TABLE"), self._parse_describe_external),
            (("DESC", "EXTERNAL", "TABLE"), self._parse_describe_external),
        ):
            if self._peek(*words):
                return parse
        return None

    # -- connections --

    def _parse_create_connection(self) -> exp.Expression:
        self._advance()
        replace = self._match_text_seq("OR", "REPLACE")
        self._advance()  # CONNECTION
        exists = self._match_text_seq("IF", "NOT", "EXISTS")
        name = self._external_name("CREATE CONNECTION", "connection", CREATE_CONNECTION)
        about = f"CREATE CONNECTION {name.name}"
        _not_both(replace, exists, "CONNECTION", name.name)
        if not self._match_text_seq("TYPE") or not self._match(TokenType.EQ):
            raise InvalidStatementError(
                f"{about}: expected TYPE = {' | '.join(CONNECTION_TYPES)} after the name, found"
                f" {self._found()}; write {CREATE_CONNECTION}."
            )
        kind = self._curr.text.upper() if self._curr else ""
        if kind not in CONNECTION_TYPES:
            raise InvalidStatementError(
                f"{about}: TYPE = {self._found()} is not a connection type; the supported types"
                f" are {', '.join(CONNECTION_TYPES)}."
            )
        self._advance()
        options: dict[str, str] = {}
        if self._match_text_seq("OPTIONS"):
            options = self._connection_options(about)
        self._end_of(about, CREATE_CONNECTION)
        return self.expression(
            CreateConnectionSyntax(
                this=name, kind=kind, options=options, replace=replace, exists=exists
            )
        )

    def _connection_options(self, about: str) -> dict[str, str]:
        how = "OPTIONS (key => 'value', ...)"
        if not self._match(TokenType.L_PAREN):
            raise InvalidStatementError(f"{about}: expected {how}, found {self._found()}.")
        options: dict[str, str] = {}
        while not self._match(TokenType.R_PAREN):
            token = self._curr
            if token is None or token.token_type == TokenType.STRING or not _WORD.match(token.text):
                raise InvalidStatementError(
                    f"{about}: expected an option name in {how}, found {self._found()}."
                )
            key = token.text.lower()
            self._advance()
            if key in options:
                raise InvalidStatementError(f"{about}: option {key} is given twice.")
            if not self._match(TokenType.FARROW) and not self._match(TokenType.EQ):
                raise InvalidStatementError(
                    f"{about}: expected {key} => <value> in {how}, found {self._found()}."
                )
            options[key] = self._value(f"{about}: option {key}")
            if not self._match(TokenType.COMMA) and not (
                self._curr and self._curr.token_type == TokenType.R_PAREN
            ):
                raise InvalidStatementError(
                    f"{about}: expected ',' or ')' after option {key}, found {self._found()};"
                    f" write {how}."
                )
        return options

    def _parse_drop_connection(self) -> exp.Expression:
        self._advance(2)
        exists = self._match_text_seq("IF", "EXISTS")
        how = "DROP CONNECTION [IF EXISTS] name"
        name = self._external_name("DROP CONNECTION", "connection", how)
        self._end_of(f"DROP CONNECTION {name.name}", how)
        return self.expression(DropConnectionSyntax(this=name, exists=exists))

    # -- external tables --

    def _parse_create_external(self) -> exp.Expression:
        self._advance()
        replace = self._match_text_seq("OR", "REPLACE")
        self._advance(2)  # EXTERNAL TABLE
        exists = self._match_text_seq("IF", "NOT", "EXISTS")
        name = self._external_name("CREATE EXTERNAL TABLE", "external table", CREATE_EXTERNAL)
        about = f"CREATE EXTERNAL TABLE {name.name}"
        _not_both(replace, exists, "EXTERNAL TABLE", name.name)
        columns = self._column_definitions(about) if self._match(TokenType.L_PAREN) else None
        node = CreateExternalTableSyntax(
            this=name, columns=columns, replace=replace, exists=exists, options={}
        )
        if not self._match(TokenType.FROM) or not self._match_texts(("CONNECTION", "FILES")):
            raise InvalidStatementError(
                f"{about}: expected FROM CONNECTION conn TABLE '<schema>.<table>' or FROM FILES"
                f" '<directory>' after the {'columns' if columns else 'name'}, found"
                f" {self._found()}; write {CREATE_EXTERNAL}."
            )
        source = self._prev.text.upper()
        node.set("source", source)
        if source == "CONNECTION":
            connection = self._external_name(about, "connection", CREATE_EXTERNAL)
            node.set("connection", connection.name)
            if not self._match(TokenType.TABLE) or not self._at(TokenType.STRING):
                raise InvalidStatementError(
                    f"{about}: expected TABLE '<schema>.<table>' after FROM CONNECTION"
                    f" {connection.name} (the table in the source database, quoted), found"
                    f" {self._found()}."
                )
            node.set("table", self._curr.text)
        else:
            if not self._at(TokenType.STRING):
                raise InvalidStatementError(
                    f"{about}: expected FROM FILES '<directory or URI>' (quoted), found"
                    f" {self._found()}."
                )
            node.set("location", self._curr.text)
        self._advance()
        allowed = CONNECTION_OPTIONS if source == "CONNECTION" else FILES_OPTIONS
        while self._curr and self._curr.token_type != TokenType.SEMICOLON:
            self._external_option(node, about, allowed)
            self._match(TokenType.COMMA)
        if source == "FILES" and node.args.get("file_format") is None:
            raise InvalidStatementError(
                f"{about}: FROM FILES needs FILE_FORMAT = (TYPE = {' | '.join(FILE_TYPES)})."
            )
        return self.expression(node)

    def _column_definitions(self, about: str) -> tuple[tuple[str, str], ...]:
        """``(name type, ...)`` after the ``(``; each type is kept as written."""
        how = (
            "list the columns with their types in parentheses, e.g. (id INT, amount DECIMAL(10,2))"
        )
        columns: list[tuple[str, str]] = []
        while True:
            column = self._parse_id_var(any_token=False)
            if column is None:
                raise InvalidStatementError(
                    f"{about}: expected a column name, found {self._found()}; {how}."
                )
            start, depth = self._curr, 0
            while self._curr and self._curr.token_type != TokenType.SEMICOLON:
                kind = self._curr.token_type
                if depth == 0 and kind in (TokenType.COMMA, TokenType.R_PAREN):
                    break
                depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(kind, 0)
                self._advance()
            if self._curr is start:
                raise InvalidStatementError(
                    f"{about}: expected the type of column {column.name}, found"
                    f" {self._found()}; {how}."
                )
            if not self._curr or self._curr.token_type == TokenType.SEMICOLON:
                raise InvalidStatementError(f"{about}: the column list is not closed; {how}.")
            columns.append((column.name, self.sql[start.start : self._prev.end + 1]))
            if self._match(TokenType.R_PAREN):
                return tuple(columns)
            self._advance()  # ,

    def _external_option(
        self, node: CreateExternalTableSyntax, about: str, allowed: tuple[str, ...]
    ) -> None:
        word = self._curr.text.upper()
        source = node.args["source"]
        if word not in allowed:
            other = "FILES" if source == "CONNECTION" else "CONNECTION"
            if word in CONNECTION_OPTIONS + FILES_OPTIONS:
                raise InvalidStatementError(
                    f"{about}: {word} applies to external tables FROM {other}, not FROM {source};"
                    f" FROM {source} takes {', '.join(allowed)}."
                )
            raise InvalidStatementError(
                f"Unexpected text in {about}: {self._curr.text!r}. After FROM {source} come, in"
                f" any order: {', '.join(allowed)}."
            )
        self._advance()
        key = "keys" if word == "KEYS" else "file_format" if word == "FILE_FORMAT" else None
        if (key is not None and node.args.get(key) is not None) or word in node.args["options"]:
            raise InvalidStatementError(f"{about}: {word} is given twice.")
        if word == "KEYS":
            node.set("keys", self._key_columns(about))
            return
        if not self._match(TokenType.EQ):
            raise InvalidStatementError(
                f"{about}: expected {word} = ..., found {self._found()}; write {CREATE_EXTERNAL}."
            )
        if word == "FILE_FORMAT":
            node.set("file_format", self._file_format(about))
        elif word == "SCOPE":
            scope = self._curr.text.upper() if self._curr else ""
            if scope not in SCOPES:
                raise InvalidStatementError(
                    f"{about}: SCOPE takes {' or '.join(SCOPES)}, got {self._found()}."
                )
            self._advance()
            node.args["options"][word] = scope
        else:
            node.args["options"][word] = self._quoted(about, word)

    def _key_columns(self, about: str) -> tuple[str, ...]:
        how = "write KEYS (c, ...) with the columns that identify a row"
        if not self._match(TokenType.L_PAREN):
            raise InvalidStatementError(f"{about}: expected KEYS (, found {self._found()}; {how}.")
        keys: list[str] = []
        while True:
            column = self._parse_id_var(any_token=False)
            if column is None:
                raise InvalidStatementError(
                    f"{about}: expected a column name in KEYS, found {self._found()}; {how}."
                )
            keys.append(column.name)
            if self._match(TokenType.R_PAREN):
                return tuple(keys)
            if not self._match(TokenType.COMMA):
                raise InvalidStatementError(
                    f"{about}: expected ',' or ')' in KEYS, found {self._found()}; {how}."
                )

    def _file_format(self, about: str) -> dict[str, str]:
        how = f"write FILE_FORMAT = (TYPE = {' | '.join(FILE_TYPES)} [, option = value ...])"
        if not self._match(TokenType.L_PAREN):
            raise InvalidStatementError(
                f"{about}: expected FILE_FORMAT = (...), found {self._found()}; {how}."
            )
        options: dict[str, str] = {}
        while not self._match(TokenType.R_PAREN):
            token = self._curr
            if token is None or token.token_type == TokenType.STRING or not _WORD.match(token.text):
                raise InvalidStatementError(
                    f"{about}: expected an option of FILE_FORMAT, found {self._found()}; {how}."
                )
            key = token.text.upper()
            self._advance()
            if key in options:
                raise InvalidStatementError(f"{about}: FILE_FORMAT option {key} is given twice.")
            if not self._match(TokenType.EQ):
                raise InvalidStatementError(
                    f"{about}: expected {key} = <value> in FILE_FORMAT, found {self._found()};"
                    f" {how}."
                )
            options[key] = self._value(f"{about}: FILE_FORMAT option {key}")
            self._match(TokenType.COMMA)
        kind = options.get("TYPE", "").upper()
        if kind not in FILE_TYPES:
            found = f"TYPE = {options['TYPE']!r}" if "TYPE" in options else "no TYPE"
            raise InvalidStatementError(
                f"{about}: FILE_FORMAT needs TYPE = {' | '.join(FILE_TYPES)}, got {found}."
            )
        options["TYPE"] = kind
        return options

    def _parse_alter_external(self) -> exp.Expression:
        self._advance(3)
        name = self._external_name("ALTER EXTERNAL TABLE", "external table", ALTER_EXTERNAL)
        about = f"ALTER EXTERNAL TABLE {name.name}"
        word = self._curr.text.upper() if self._curr else ""
        if word not in ("REFRESH", "SUSPEND", "RESUME", "SET"):
            raise InvalidStatementError(
                f"{about}: expected REFRESH, SUSPEND, RESUME or SET <option> = <value>, found"
                f" {self._found()}; write {ALTER_EXTERNAL}."
            )
        self._advance()
        options: dict[str, str] | None = None
        if word == "SET":
            options = {}
            while self._curr and self._curr.token_type != TokenType.SEMICOLON:
                key = self._curr.text.upper()
                if key not in SETTABLE:
                    raise InvalidStatementError(
                        f"{about} SET: expected {' or '.join(SETTABLE)} = <value>, found"
                        f" {self._found()} (the other options are fixed at CREATE)."
                    )
                self._advance()
                if key in options:
                    raise InvalidStatementError(f"{about} SET: {key} is given twice.")
                if not self._match(TokenType.EQ):
                    raise InvalidStatementError(f"{about} SET: expected {key} = '...'.")
                options[key] = self._quoted(f"{about} SET", key)
                self._match(TokenType.COMMA)
            if not options:
                raise InvalidStatementError(
                    f"{about} SET: expected {' or '.join(SETTABLE)} = <value>."
                )
        self._end_of(about, ALTER_EXTERNAL)
        return self.expression(AlterExternalTableSyntax(this=name, action=word, options=options))

    def _parse_drop_external(self) -> exp.Expression:
        self._advance(3)
        exists = self._match_text_seq("IF", "EXISTS")
        how = "DROP EXTERNAL TABLE [IF EXISTS] name"
        name = self._external_name("DROP EXTERNAL TABLE", "external table", how)
        self._end_of(f"DROP EXTERNAL TABLE {name.name}", how)
        return self.expression(DropExternalTableSyntax(this=name, exists=exists))

    def _parse_describe_external(self) -> exp.Expression:
        self._advance(3)
        how = "DESCRIBE EXTERNAL TABLE name"
        name = self._external_name("DESCRIBE EXTERNAL TABLE", "external table", how)
        self._end_of(f"DESCRIBE EXTERNAL TABLE {name.name}", how)
        return self.expression(DescribeExternalTableSyntax(this=name))

    # -- pieces --

    def _external_name(self, about: str, what: str, how: str) -> exp.Table:
        name = self._parse_id_var(any_token=False)
        if name is None:
            raise InvalidStatementError(
                f"{about}: expected the name of the {what}, found {self._found()}; write {how}."
            )
        return self.expression(exp.Table(this=name))

    def _value(self, about: str) -> str:
        """One value as text: a quoted string (without its quotes), a number or a word."""
        token = self._curr
        sign = ""
        if token is not None and token.token_type == TokenType.DASH:
            self._advance()
            sign, token = "-", self._curr
            if token is None or token.token_type != TokenType.NUMBER:
                raise InvalidStatementError(f"{about}: expected a number after '-'.")
        if token is None or token.token_type in (
            TokenType.L_PAREN,
            TokenType.R_PAREN,
            TokenType.COMMA,
            TokenType.SEMICOLON,
        ):
            raise InvalidStatementError(
                f"{about}: expected one value (a quoted string, a number or a word), found"
                f" {self._found()}."
            )
        self._advance()
        return sign + token.text

    def _quoted(self, about: str, word: str) -> str:
        if not self._at(TokenType.STRING):
            example = "'1 minute'" if word == "FOLLOW_LAG" else "'...'"
            raise InvalidStatementError(
                f"{about}: {word} takes a quoted string, e.g. {word} = {example}; found"
                f" {self._found()}."
            )
        self._advance()
        return self._prev.text

    def _at(self, kind: TokenType) -> bool:
        return self._curr is not None and self._curr.token_type == kind

    def _found(self) -> str:
        return repr(self._curr.text) if self._curr else "the end"

    def _end_of(self, about: str, how: str) -> None:
        if self._curr and self._curr.token_type != TokenType.SEMICOLON:
            raise InvalidStatementError(
                f"Unexpected text in {about}: {self._curr.text!r}; write {how}."
            )


def _not_both(replace: bool, exists: bool, what: str, name: str) -> None:
    if replace and exists:
        raise InvalidStatementError(
            f"CREATE OR REPLACE {what} IF NOT EXISTS {name}: OR REPLACE and IF NOT EXISTS exclude"
            " each other; use one."
        )
