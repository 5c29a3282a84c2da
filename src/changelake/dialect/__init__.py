"""The changelake SQL dialect: Spark SQL plus Snowflake's CHANGES, AT|BEFORE, TS and ``$`` names.

Strings follow Snowflake (``'it''s'`` is one string with a quote), identifiers may contain ``$``
(``METADATA$ACTION``), and ``$ACTION`` is short for ``METADATA$ACTION`` as in the paper.
"""

from __future__ import annotations

import functools
import re
from typing import ClassVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from changelake.dialect.apply import ApplyChangesParser
from changelake.dialect.dynamic import DynamicTableParser
from changelake.dialect.external import ExternalTableParser
from changelake.dialect.streams import CreateStreamSyntax as CreateStreamSyntax
from changelake.dialect.streams import DescribeStreamSyntax as DescribeStreamSyntax
from changelake.dialect.streams import DropStreamSyntax as DropStreamSyntax
from changelake.dialect.streams import StreamParser
from changelake.dialect.syntax import Syntax
from changelake.dialect.tasks import is_task_statement, parse_task, statement_end
from changelake.errors import InvalidStatementError, SqlSyntaxError

METADATA_COLUMNS = ("ACTION", "ISUPDATE", "ROW_ID", "COMMIT_VERSION", "COMMIT_TIMESTAMP")


# -- statements Spark SQL does not have -----------------------------------------------------------


class OptimizeSyntax(Syntax):
    """``OPTIMIZE [TABLE] name``"""

    arg_types = {"this": True}


class VacuumSyntax(Syntax):
    """``VACUUM [TABLE] name``"""

    arg_types = {"this": True}


class ShowObjectsSyntax(Syntax):
    """``SHOW [TERSE] TABLES | VIEWS | STREAMS | CHANNELS [IN [TABLE] t]``, ``SHOW INTERNAL
    TABLES [IN [TABLE] t]``, ``SHOW TASKS | CONNECTIONS | DYNAMIC TABLES | EXTERNAL TABLES``;
    ``kind`` is the plural ("INTERNAL TABLES"), upper case."""

    arg_types = {"kind": True, "terse": False, "this": False}


class ChangesClauseSyntax(Syntax, exp.Changes):
    """``CHANGES ([INFORMATION => DEFAULT | APPEND_ONLY | REDO] [, FORMAT => f]
    [, KEYS => (c1, ...)])`` followed by ``AT | BEFORE (...) [END (...)]``; options in any
    order."""

    arg_types = {
        "information": False,
        "at_before": False,
        "end": False,
        "format": False,
        "keys": False,
    }


class ExplainSyntax(Syntax):
    """``EXPLAIN statement``"""

    arg_types = {"this": True}


class Changelake(Spark):
    class Tokenizer(Spark.Tokenizer):
        VAR_SINGLE_TOKENS = {"$"}
        STRING_ESCAPES = ["\\", "'"]
        # These start statements the parser below reads word by word, instead of the rest of
        # the text becoming one opaque command string.
        KEYWORDS = {
            k: v
            for k, v in Spark.Tokenizer.KEYWORDS.items()
            if k not in ("EXPLAIN", "OPTIMIZE", "VACUUM", "SHOW")
        }
        COMMANDS = Spark.Tokenizer.COMMANDS - {TokenType.SHOW, TokenType.EXECUTE}

    class Generator(Spark.Generator):
        # Spark 3+ reads a WITH inside a subquery; sqlglot's Hive heritage moves every nested
        # WITH to the top, where two reads of one view (whose query has a WITH) clash.
        EXPRESSIONS_WITHOUT_NESTED_CTES: ClassVar[set[type[exp.Expression]]] = set()

    class Parser(
        StreamParser, DynamicTableParser, ExternalTableParser, ApplyChangesParser, Spark.Parser
    ):
        HISTORICAL_DATA_KIND = Spark.Parser.HISTORICAL_DATA_KIND | {"TS"}

        def _parse_statement(self) -> exp.Expression | None:
            parse = self._own_statement()
            return parse() if parse is not None else super()._parse_statement()

        def _peek(self, *words: str) -> bool:
            """Whether the next tokens are ``words`` (without consuming them)."""
            tokens = self._tokens[self._index : self._index + len(words)]
            return len(tokens) == len(words) and all(
                t.text.upper() == w for t, w in zip(tokens, words, strict=True)
            )

        def _own_statement(self):  # noqa: ANN202 - a bound parse method or None
            dynamic = self._dynamic_statement()
            if dynamic is not None:
                return dynamic
            external = self._external_statement()
            if external is not None:
                return external
            if self._peek("CREATE", "STREAM") or self._peek("CREATE", "OR", "REPLACE", "STREAM"):
                return self._parse_create_stream
            for words, parse in (
                (("DROP", "STREAM"), self._parse_drop_stream),
                (("DESCRIBE", "STREAM"), self._parse_describe_stream),
                (("DESC", "STREAM"), self._parse_describe_stream),
                (("SHOW",), self._parse_show_objects),
                (("OPTIMIZE",), lambda: self._parse_maintenance(OptimizeSyntax)),
                (("VACUUM",), lambda: self._parse_maintenance(VacuumSyntax)),
                (("EXPLAIN",), self._parse_explain),
                (("APPLY", "CHANGES"), self._parse_apply_changes),
            ):
                if self._peek(*words):
                    return parse
            return None

        def _parse_changes(self) -> exp.Changes | None:
            if not self._match_text_seq("CHANGES", "("):
                return None
            options: dict[str, exp.Expression] = {}
            while True:
                word = self._curr.text.upper() if self._curr else ""
                if word not in ("INFORMATION", "FORMAT", "KEYS") or word.lower() in options:
                    self.raise_error(
                        "Expected INFORMATION => ..., FORMAT => ... or KEYS => (...) in CHANGES"
                    )
                self._advance()
                if not self._match(TokenType.FARROW):
                    self.raise_error(f"Expected => after {word}")
                if word == "KEYS":
                    options["keys"] = exp.Tuple(
                        expressions=self._parse_wrapped_csv(self._parse_id_var)
                    )
                else:
                    options[word.lower()] = self._parse_var(any_token=True)
                if not self._match(TokenType.COMMA):
                    break
            self._match_r_paren()
            return self.expression(
                ChangesClauseSyntax(
                    **options,
                    at_before=self._parse_historical_data(),
                    end=self._parse_historical_data(),
                )
            )

        def _object_name(self, what: str) -> exp.Table:
            name = self._parse_id_var(any_token=False)
            if name is None:
                self.raise_error(f"Expected the name of the {what}")
            return self.expression(exp.Table(this=name))

        def _parse_maintenance(self, node: type[exp.Expression]) -> exp.Expression:
            self._advance()
            self._match(TokenType.TABLE)
            return self.expression(node(this=self._object_name("table")))

        def _parse_show_objects(self) -> exp.Expression:
            self._advance()
            terse = self._match_text_seq("TERSE")
            if self._match_text_seq("INTERNAL", "TABLES"):
                kind = "INTERNAL TABLES"
            elif self._match_text_seq("DYNAMIC", "TABLES"):
                kind = "DYNAMIC TABLES"
            elif self._match_text_seq("EXTERNAL", "TABLES"):
                kind = "EXTERNAL TABLES"
            else:
                if not self._match_texts(
                    ("TABLES", "VIEWS", "STREAMS", "CHANNELS", "TASKS", "CONNECTIONS")
                ):
                    self.raise_error(
                        "Expected SHOW TABLES, VIEWS, STREAMS, CHANNELS, TASKS, DYNAMIC TABLES or"
                        " INTERNAL TABLES; or SHOW EXTERNAL TABLES or CONNECTIONS"
                    )
                kind = self._prev.text.upper()
            table = None
            if kind in ("CHANNELS", "INTERNAL TABLES") and self._match(TokenType.IN):
                self._match(TokenType.TABLE)
                table = self._object_name("table")
            return self.expression(ShowObjectsSyntax(kind=kind, terse=terse, this=table))

        def _parse_explain(self) -> exp.Expression:
            self._advance()
            inner = self._parse_statement()
            if inner is None:
                self.raise_error("Expected a statement after EXPLAIN")
            return self.expression(ExplainSyntax(this=inner))


def parse_one(text: str) -> exp.Expression:
    """Parse exactly one statement, raising SqlSyntaxError with line and column on failure."""
    return _parsed(text).copy()  # a tree of its own: callers may change it


# The same texts come back (a dynamic table's query at every refresh, a task's body at every
# run); a copy of a kept tree costs a fifth of parsing it again.
@functools.lru_cache(maxsize=512)
def _parsed(text: str) -> exp.Expression:
    tokens = _tokens(text)
    if tokens and is_task_statement(tokens):
        return _task(text, tokens)
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


def _tokens(text: str) -> list[Token]:
    try:
        return Changelake().tokenize(text)
    except TokenError:
        return []  # parsing reports it, with its place


def _task(text: str, tokens: list[Token]) -> exp.Expression:
    """A task statement; its body's statements must each parse (and not be a BEGIN, COMMIT
    or another task statement)."""
    tree = parse_task(text, tokens)
    for statement in tree.args.get("body") or ():
        try:
            inner = parse_one(statement)
        except SqlSyntaxError as e:
            raise SqlSyntaxError(f"In the task's body, {statement!r}: {e}") from None
        if isinstance(inner, exp.Transaction | exp.Commit | exp.Rollback) or is_task_statement(
            _tokens(statement)
        ):
            raise InvalidStatementError(
                f"A task's body cannot hold {statement.split()[0].upper()} ...: it runs DML,"
                " queries and DDL (several statements: BEGIN stmt; ...; COMMIT)."
            )
    return tree


def split_statements(text: str) -> list[str]:
    """The statements of ``text`` separated by ``;``, in order, without empty ones. A ``;``
    inside a string, a quoted identifier or a comment does not separate statements, nor one
    inside a task's BEGIN ... COMMIT body."""
    try:
        tokens = Changelake().tokenize(text)
    except TokenError as e:
        raise SqlSyntaxError(f"could not split the input into statements: {e}") from e
    statements, i = [], 0
    while i < len(tokens):
        if tokens[i].token_type == TokenType.SEMICOLON:
            i += 1
            continue
        end = statement_end(text, tokens, i)
        last = end - 1
        while last > i and tokens[last].token_type == TokenType.SEMICOLON:
            last -= 1
        statements.append(text[tokens[i].start : tokens[last].end + 1])
        i = end + 1
    return statements


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
