"""Task statements of the changelake dialect, read from the statement's tokens.

``CREATE [OR REPLACE] TASK [IF NOT EXISTS] name [option = value ...] [AFTER a [, b ...]]
[WHEN condition] AS statement | BEGIN statement; ... COMMIT`` (or ``... END``), ``ALTER TASK [IF EXISTS] name
RESUME | SUSPEND | SET option = value [, ...] | UNSET option [, ...] | ADD AFTER a [, ...] |
REMOVE AFTER a [, ...] | MODIFY AS body | MODIFY WHEN condition | REMOVE WHEN``,
``EXECUTE TASK name``, ``DROP TASK [IF EXISTS] name``, ``DESCRIBE TASK name``.

A task's body may hold several statements separated by ``;`` (BEGIN ... COMMIT), which the
statement parser never sees together: it splits its input at ``;`` first. So these statements
are read here, from tokens, before it; the body and the condition are kept as text (and parsed
on their own by ``changelake.dialect.parse_one``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from changelake.dialect.syntax import Syntax
from changelake.errors import InvalidStatementError

OPTIONS = (
    "SCHEDULE",
    "SUSPEND_TASK_AFTER_NUM_FAILURES",
    "TASK_AUTO_RETRY_ATTEMPTS",
    "ALLOW_OVERLAPPING_EXECUTION",
    "USER_TASK_TIMEOUT_MS",
    "USER_TASK_MINIMUM_TRIGGER_INTERVAL_IN_SECONDS",
    "COMMENT",
    "WAREHOUSE",  # accepted for Snowflake scripts, and ignored: Spark runs every task
    "USER_TASK_MANAGED_INITIAL_WAREHOUSE_SIZE",  # the same
)
ACTIONS = ("RESUME", "SUSPEND", "SET", "UNSET", "ADD", "REMOVE", "MODIFY")


class CreateTaskSyntax(Syntax):
    """``options``: name (upper case) -> value as written; ``after``: task names; ``body``: the
    statements' texts; ``transaction``: written as BEGIN ... COMMIT."""

    arg_types = {
        "this": True,
        "options": True,
        "after": True,
        "condition": False,
        "body": True,
        "text": True,
        "transaction": False,
        "replace": False,
        "exists": False,
    }


class AlterTaskSyntax(Syntax):
    """``action``: RESUME, SUSPEND, SET, UNSET, ADD AFTER, REMOVE AFTER, MODIFY AS, MODIFY WHEN
    or REMOVE WHEN, with ``options`` / ``names`` / ``body`` / ``condition`` as it needs."""

    arg_types = {
        "this": True,
        "action": True,
        "options": False,
        "names": False,
        "body": False,
        "text": False,
        "transaction": False,
        "condition": False,
        "exists": False,
    }


class ExecuteTaskSyntax(Syntax):
    arg_types = {"this": True}


class DropTaskSyntax(Syntax):
    arg_types = {"this": True, "exists": False}


class DescribeTaskSyntax(Syntax):
    arg_types = {"this": True}


def is_task_statement(tokens: Sequence[Token]) -> bool:
    words = [t.text.upper() for t in tokens[:5]]
    if words[:1] == ["CREATE"]:
        rest = words[3:4] if words[1:3] == ["OR", "REPLACE"] else words[1:2]
        return rest == ["TASK"]
    return words[:2] in (["ALTER", "TASK"], ["EXECUTE", "TASK"], ["DROP", "TASK"]) or words[:2] in (
        ["DESCRIBE", "TASK"],
        ["DESC", "TASK"],
    )


def statement_end(text: str, tokens: Sequence[Token], first: int) -> int:
    """Index of the token ending the statement starting at ``tokens[first]`` (exclusive): the
    next ``;``, except that a task body written BEGIN ... COMMIT runs to its COMMIT."""
    i = first
    if is_task_statement(tokens[first:]):
        body = _find_as(tokens, first)
        if body is not None and body < len(tokens) and tokens[body].text.upper() == "BEGIN":
            while i < len(tokens) and not (
                tokens[i].text.upper() in ("COMMIT", "END")
                and tokens[i - 1].token_type == TokenType.SEMICOLON
            ):
                i += 1
            return min(i + 1, len(tokens))
    while i < len(tokens) and tokens[i].token_type != TokenType.SEMICOLON:
        i += 1
    return i


def _find_as(tokens: Sequence[Token], first: int) -> int | None:
    """The index just after the AS that starts a task's body (None: there is none)."""
    for i in range(first, len(tokens)):
        if tokens[i].token_type == TokenType.SEMICOLON:
            return None
        if tokens[i].token_type == TokenType.ALIAS:
            return i + 1
    return None


class _Reader:
    """A cursor over one task statement's tokens."""

    def __init__(self, text: str, tokens: Sequence[Token]):
        found = list(tokens)
        while found and found[-1].token_type == TokenType.SEMICOLON:
            found.pop()  # the statement's own terminator
        self.text, self.tokens, self.i = text, found, 0

    @property
    def word(self) -> str:
        return self.tokens[self.i].text.upper() if self.i < len(self.tokens) else ""

    def take(self, *words: str) -> bool:
        found = [t.text.upper() for t in self.tokens[self.i : self.i + len(words)]]
        if found == list(words):
            self.i += len(words)
            return True
        return False

    def name(self, about: str) -> str:
        if (
            self.i >= len(self.tokens)
            or self.tokens[self.i].token_type
            not in (
                TokenType.VAR,
                TokenType.IDENTIFIER,
            )
            and not self.tokens[self.i].text.isidentifier()
        ):
            raise InvalidStatementError(f"{about}: expected a task name, found {self._found()}.")
        self.i += 1
        return self.tokens[self.i - 1].text

    def names(self, about: str) -> list[str]:
        found = [self.name(about)]
        while self.i < len(self.tokens) and self.tokens[self.i].token_type == TokenType.COMMA:
            self.i += 1
            found.append(self.name(about))
        return found

    def options(self, about: str, *, allowed: Sequence[str] = OPTIONS) -> dict[str, str]:
        found: dict[str, str] = {}
        while self.word in allowed:
            word = self.word
            self.i += 1
            if word in found:
                raise InvalidStatementError(f"{about}: {word} is given twice.")
            if not self.take("=") or self.i >= len(self.tokens):
                raise InvalidStatementError(f"{about}: expected {word} = <value>.")
            found[word] = self.tokens[self.i].text
            self.i += 1
            if self.i < len(self.tokens) and self.tokens[self.i].token_type == TokenType.COMMA:
                self.i += 1
        return found

    def condition(self) -> str:
        """The text of a WHEN condition: up to AS (or the end)."""
        start = self.i
        while self.i < len(self.tokens) and self.tokens[self.i].token_type != TokenType.ALIAS:
            self.i += 1
        if start == self.i:
            raise InvalidStatementError(
                "WHEN: expected a condition, e.g. SYSTEM$STREAM_HAS_DATA('s')."
            )
        return self.text[self.tokens[start].start : self.tokens[self.i - 1].end + 1]

    def body(self, about: str) -> tuple[list[str], str, bool]:
        """The statements after AS, the body's text, and whether it is a BEGIN ... COMMIT."""
        if self.i >= len(self.tokens):
            raise InvalidStatementError(f"{about}: expected a statement after AS.")
        text = self.text[self.tokens[self.i].start : self.tokens[-1].end + 1]
        statements, first = [], self.i
        for i in range(self.i, len(self.tokens) + 1):
            if i == len(self.tokens) or self.tokens[i].token_type == TokenType.SEMICOLON:
                if first < i:
                    statements.append(
                        self.text[self.tokens[first].start : self.tokens[i - 1].end + 1]
                    )
                first = i + 1
        self.i = len(self.tokens)
        if not statements:
            raise InvalidStatementError(f"{about}: expected a statement after AS.")
        opening = statements[0].split(maxsplit=1)
        if opening[0].upper() == "BEGIN":
            if statements[-1].strip().upper() not in ("COMMIT", "END"):
                raise InvalidStatementError(
                    f"{about}: a body that starts with BEGIN ends with COMMIT (or END):"
                    " AS BEGIN INSERT ...; DELETE ...; COMMIT."
                )
            inner = statements[:-1]
            rest = opening[1] if len(opening) > 1 else ""
            if rest.strip().upper() in ("", "TRANSACTION", "WORK"):
                inner = inner[1:]
            else:
                inner[0] = rest
            if not inner:
                raise InvalidStatementError(f"{about}: BEGIN ... COMMIT holds no statement.")
            return inner, text, True
        if len(statements) > 1:
            raise InvalidStatementError(
                f"{about}: a body of several statements is written BEGIN stmt; stmt; COMMIT."
            )
        return statements, text, False

    def end(self, about: str) -> None:
        if self.i < len(self.tokens):
            raise InvalidStatementError(f"{about}: unexpected {self._found()}.")

    def _found(self) -> str:
        return repr(self.tokens[self.i].text) if self.i < len(self.tokens) else "the end"


def parse_task(text: str, tokens: Sequence[Token]) -> exp.Expression:
    """The tree of a task statement (``is_task_statement(tokens)`` holds)."""
    r = _Reader(text, tokens)
    if r.take("CREATE"):
        return _create(r)
    if r.take("ALTER", "TASK"):
        return _alter(r)
    if r.take("EXECUTE", "TASK"):
        tree: exp.Expression = ExecuteTaskSyntax(this=exp.to_identifier(r.name("EXECUTE TASK")))
    elif r.take("DROP", "TASK"):
        exists = r.take("IF", "EXISTS")
        tree = DropTaskSyntax(this=exp.to_identifier(r.name("DROP TASK")), exists=exists)
    else:
        r.i = 2  # DESCRIBE | DESC TASK
        tree = DescribeTaskSyntax(this=exp.to_identifier(r.name("DESCRIBE TASK")))
    r.end(tree.key.upper())
    return tree


def _create(r: _Reader) -> exp.Expression:
    replace = r.take("OR", "REPLACE")
    r.take("TASK")
    exists = r.take("IF", "NOT", "EXISTS")
    name = r.name("CREATE TASK")
    about = f"CREATE TASK {name}"
    if replace and exists:
        raise InvalidStatementError(
            f"CREATE OR REPLACE TASK IF NOT EXISTS {name}: OR REPLACE and IF NOT EXISTS exclude"
            " each other; use one."
        )
    options = r.options(about)
    after = r.names(about) if r.take("AFTER") else []
    options.update(r.options(about))  # Snowflake accepts options on either side of AFTER
    condition = r.condition() if r.take("WHEN") else None
    if not r.take("AS"):
        raise InvalidStatementError(
            f"{about}: expected AS <statement> (found {r._found()}); the clauses are options"
            f" ({', '.join(OPTIONS[:6])}, COMMENT), AFTER <tasks>, WHEN <condition>, in this order."
        )
    body, text, transaction = r.body(about)
    return CreateTaskSyntax(
        this=exp.to_identifier(name),
        options=options,
        after=after,
        condition=condition,
        body=body,
        text=text,
        transaction=transaction,
        replace=replace,
        exists=exists,
    )


def _alter(r: _Reader) -> exp.Expression:
    exists = r.take("IF", "EXISTS")
    name = r.name("ALTER TASK")
    about = f"ALTER TASK {name}"
    args: dict = {"this": exp.to_identifier(name), "exists": exists}
    if r.take("RESUME") or r.take("SUSPEND"):
        args["action"] = r.tokens[r.i - 1].text.upper()
    elif r.take("SET"):
        args["action"], args["options"] = "SET", r.options(about)
        if not args["options"]:
            raise InvalidStatementError(
                f"{about} SET: expected one of {', '.join(OPTIONS)} = <value>."
            )
    elif r.take("UNSET"):
        args["action"], args["names"] = "UNSET", [n.upper() for n in r.names(about)]
    elif r.take("ADD", "AFTER") or r.take("REMOVE", "AFTER"):
        args["action"] = f"{r.tokens[r.i - 2].text.upper()} AFTER"
        args["names"] = r.names(about)
    elif r.take("MODIFY", "AS"):
        args["action"] = "MODIFY AS"
        args["body"], args["text"], args["transaction"] = r.body(about)
    elif r.take("MODIFY", "WHEN"):
        args["action"], args["condition"] = "MODIFY WHEN", r.condition()
    elif r.take("REMOVE", "WHEN"):
        args["action"] = "REMOVE WHEN"
    else:
        raise InvalidStatementError(
            f"{about}: expected RESUME, SUSPEND, SET <option> = <value>, UNSET <option>, ADD AFTER"
            " <tasks>, REMOVE AFTER <tasks>, MODIFY AS <statement>, MODIFY WHEN <condition> or"
            " REMOVE WHEN."
        )
    r.end(about)
    return AlterTaskSyntax(**args)
