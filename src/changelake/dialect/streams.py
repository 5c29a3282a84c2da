"""Stream statements of the changelake dialect (a parser mixin of ``Changelake``):
``CREATE [OR REPLACE] STREAM [IF NOT EXISTS] name ON [DYNAMIC | EXTERNAL] TABLE | VIEW source
[options]``,
``DROP STREAM [IF EXISTS] name``, ``DESCRIBE STREAM name``."""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from changelake.dialect.syntax import Syntax
from changelake.errors import InvalidStatementError


class DescribeStreamSyntax(Syntax):
    """``DESCRIBE | DESC STREAM name``"""

    arg_types = {"this": True}


class CreateStreamSyntax(Syntax):
    """``CREATE [OR REPLACE] STREAM [IF NOT EXISTS] name ON TABLE | VIEW | EXTERNAL TABLE source
    [AT | BEFORE (...)] [APPEND_ONLY = TRUE | FALSE] [SHOW_INITIAL_ROWS = TRUE | FALSE]
    [COMMENT = '...']``, options in any order; on an external table (``external``) also
    ``INSERT_ONLY = TRUE | FALSE``, Snowflake's name for APPEND_ONLY there."""

    arg_types = {
        "this": True,
        "kind": True,  # TABLE | VIEW
        "on": True,
        "external": False,
        "when": False,
        "append_only": False,
        "insert_only": False,
        "show_initial_rows": False,
        "comment": False,
        "replace": False,
        "exists": False,
    }


class DropStreamSyntax(Syntax):
    """``DROP STREAM [IF EXISTS] name``"""

    arg_types = {"this": True, "exists": False}


_STREAM_OPTIONS = (
    "AT|BEFORE (...), APPEND_ONLY = TRUE|FALSE, SHOW_INITIAL_ROWS = TRUE|FALSE, COMMENT = '...'"
    " (and INSERT_ONLY = TRUE|FALSE on an external table)"
)
_ON = "Expected ON TABLE <name>, ON VIEW <name> or ON EXTERNAL TABLE <name>"


class StreamParser:
    """Parse methods for the statements above; mixed into the dialect's parser."""

    _curr: Any
    _prev: Any
    _tokens: Any
    _index: int

    def _parse_describe_stream(self) -> exp.Expression:
        self._advance(2)
        return self.expression(DescribeStreamSyntax(this=self._object_name("stream")))

    def _parse_drop_stream(self) -> exp.Expression:
        self._advance(2)
        exists = self._match_text_seq("IF", "EXISTS")
        return self.expression(DropStreamSyntax(this=self._object_name("stream"), exists=exists))

    def _parse_create_stream(self) -> exp.Expression:
        self._advance()
        replace = self._match_text_seq("OR", "REPLACE")
        self._advance()  # STREAM
        exists = self._match_text_seq("IF", "NOT", "EXISTS")
        name = self._object_name("stream")
        if replace and exists:
            raise InvalidStatementError(
                f"CREATE OR REPLACE STREAM IF NOT EXISTS {name.name}: OR REPLACE and IF NOT"
                " EXISTS exclude each other; use one."
            )
        if not self._match(TokenType.ON):
            self.raise_error(_ON)
        external = self._match_text_seq("EXTERNAL")
        if external and not self._match(TokenType.TABLE):
            raise InvalidStatementError(
                f"CREATE STREAM {name.name}: expected ON EXTERNAL TABLE <name>, found"
                f" {self._curr.text if self._curr else 'the end'!r}."
            )
        if not external:
            self._match_text_seq("DYNAMIC")  # a dynamic table is a table
            if not self._match_texts(("TABLE", "VIEW")):
                self.raise_error(_ON)
        kind = self._prev.text.upper()
        node = CreateStreamSyntax(
            this=name,
            kind=kind,
            on=self._object_name("external table" if external else kind.lower()),
            external=external,
            replace=replace,
            exists=exists,
        )
        while self._curr and self._curr.token_type != TokenType.SEMICOLON:
            self._stream_option(node)
        return self.expression(node)

    def _stream_option(self, node: CreateStreamSyntax) -> None:
        stream = node.this.name
        word = self._curr.text.upper()
        if word in ("AT", "BEFORE"):
            key, value = "when", self._stream_point(stream)
        elif word in ("APPEND_ONLY", "INSERT_ONLY", "SHOW_INITIAL_ROWS", "COMMENT"):
            if word == "INSERT_ONLY" and not node.args.get("external"):
                raise InvalidStatementError(
                    f"CREATE STREAM {stream}: INSERT_ONLY applies to streams on external tables;"
                    " use APPEND_ONLY = TRUE."
                )
            other = {"APPEND_ONLY": "insert_only", "INSERT_ONLY": "append_only"}.get(word)
            if other is not None and node.args.get(other) is not None:
                raise InvalidStatementError(
                    f"CREATE STREAM {stream}: APPEND_ONLY and INSERT_ONLY say the same on an"
                    " external table; give one."
                )
            self._advance()
            if not self._match(TokenType.EQ):
                raise InvalidStatementError(
                    f"CREATE STREAM {stream}: expected {word} = ...; options are {_STREAM_OPTIONS}."
                )
            key, value = word.lower(), self._stream_option_value(stream, word)
        else:
            raise InvalidStatementError(
                f"Unexpected text in CREATE STREAM {stream}: {self._curr.text!r}. Options are"
                f" {_STREAM_OPTIONS}."
            )
        if node.args.get(key) is not None:
            raise InvalidStatementError(
                f"CREATE STREAM {stream}: {'AT|BEFORE' if key == 'when' else word} is given twice."
            )
        node.set(key, value)

    def _stream_option_value(self, stream: str, word: str) -> object:
        token = self._curr
        if word == "COMMENT":
            if token is None or token.token_type != TokenType.STRING:
                raise InvalidStatementError(
                    f"CREATE STREAM {stream}: COMMENT takes a quoted string, e.g."
                    " COMMENT = 'what it is for'."
                )
            self._advance()
            return token.text
        if token is None or token.text.upper() not in ("TRUE", "FALSE"):
            found = token.text if token else "nothing"
            raise InvalidStatementError(
                f"CREATE STREAM {stream}: {word} takes TRUE or FALSE, got {found!r}. Options"
                f" are {_STREAM_OPTIONS}."
            )
        self._advance()
        return token.text.upper() == "TRUE"

    def _stream_point(self, stream: str) -> exp.HistoricalData:
        start = self._index
        prefix = self._curr.text.upper()
        self._advance()
        if not self._match(TokenType.L_PAREN):
            raise InvalidStatementError(
                f"CREATE STREAM {stream}: {prefix} needs a point in parentheses, e.g."
                f" {prefix} (VERSION => 3)."
            )
        depth = 1
        for token in self._tokens[self._index :]:
            depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
            if depth == 0:
                break
        if depth:
            raise InvalidStatementError(
                f"Unbalanced parentheses in the {prefix} (...) clause of CREATE STREAM"
                f" {stream}: close it with ')'."
            )
        self._retreat(start)
        point = self._parse_historical_data()
        if point is None:
            self.raise_error(
                f"Expected {prefix} (VERSION | TIMESTAMP | OFFSET | STATEMENT | STREAM => ...)"
            )
        return point
