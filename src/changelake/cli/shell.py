"""``changelake shell``: an interactive SQL shell over the warehouse (through its service when one
runs it, else with a Spark of its own).

Statements end with ``;`` and may span lines; ``\\timing``, ``\\help`` and ``\\q`` are the shell's
own commands. History is kept across runs, statement keywords and the warehouse's object names
complete with Tab, SQL is highlighted as it is typed, results print as tables. Ctrl-C while a
statement runs cancels it (its Spark jobs stop; nothing is committed) and keeps the shell;
Ctrl-C at the prompt clears the line, Ctrl-D leaves.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import click
from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer, Completion, WordCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.lexers import PygmentsLexer
from pygments.lexers.sql import SqlLexer
from rich.console import Console
from rich.text import Text

from changelake.cli import remote
from changelake.cli.output import Result, print_result
from changelake.cli.runners import runner_for, split
from changelake.cli.target import Target
from changelake.errors import ChangelakeError

HISTORY_ENV = "CHANGELAKE_HISTORY"
MAX_ROWS = 1000
KEYWORDS = (
    "SELECT", "FROM", "WHERE", "GROUP BY", "ORDER BY", "HAVING", "LIMIT", "JOIN", "LEFT JOIN",
    "ON", "AS", "AND", "OR", "NOT", "NULL", "IS", "IN", "DISTINCT", "UNION ALL", "WITH",
    "INSERT INTO", "VALUES", "UPDATE", "SET", "DELETE FROM", "MERGE INTO", "USING",
    "WHEN MATCHED THEN", "WHEN NOT MATCHED THEN", "CREATE TABLE", "CREATE OR REPLACE TABLE",
    "CREATE VIEW", "CREATE STREAM", "CREATE DYNAMIC TABLE", "CREATE TASK", "TARGET_LAG",
    "CREATE EXTERNAL TABLE", "DROP TABLE", "DROP VIEW", "DROP STREAM", "ALTER", "TRUNCATE TABLE",
    "CHANGES", "INFORMATION => DEFAULT", "INFORMATION => APPEND_ONLY", "AT", "BEFORE", "END",
    "VERSION =>", "TIMESTAMP =>", "STATEMENT =>", "OFFSET =>", "METADATA$ACTION",
    "METADATA$ISUPDATE", "METADATA$ROW_ID", "SYSTEM$STREAM_HAS_DATA", "BEGIN", "COMMIT",
    "ROLLBACK", "SHOW TABLES", "SHOW STREAMS", "SHOW VIEWS", "SHOW DYNAMIC TABLES", "SHOW TASKS",
    "SHOW EXTERNAL TABLES", "DESCRIBE TABLE", "DESCRIBE HISTORY", "DESCRIBE STREAM", "EXPLAIN",
    "OPTIMIZE", "VACUUM", "APPLY CHANGES INTO",
)  # fmt: skip
# Statements after which the object names to complete are read again.
_RENAMING = ("CREATE", "DROP", "ALTER")
HELP = r"""Statements end with ';' and may span lines. Tab completes keywords and names.
  \timing [on|off]   print how long each statement took
  \help              this help
  \q                 leave (or Ctrl-D)
Ctrl-C cancels a running statement (nothing is committed) or clears the line."""


class _Names(Completer):
    """Keywords and the warehouse's object names, matched case-insensitively at the cursor."""

    def __init__(self) -> None:
        self.words: list[str] = list(KEYWORDS)

    def get_completions(self, document: Document, complete_event: Any) -> Iterable[Completion]:
        return WordCompleter(self.words, ignore_case=True, sentence=False).get_completions(
            document, complete_event
        )


def _bindings() -> KeyBindings:
    keys = KeyBindings()

    @keys.add("enter")
    def _(event: Any) -> None:
        text = event.current_buffer.text.strip()
        if not text or text.endswith(";") or text.startswith("\\"):
            event.current_buffer.validate_and_handle()
        else:
            event.current_buffer.insert_text("\n")

    return keys


def _history_file(target: Target) -> str:
    path = os.environ.get(HISTORY_ENV) or os.path.join(
        os.environ.get("XDG_STATE_HOME", os.path.expanduser("~/.local/state")),
        "changelake",
        "history",
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


class _Shell:
    def __init__(self, target: Target, runner: Any, out: Console, err: Console):
        self.target, self.runner, self.out, self.err = target, runner, out, err
        self.timing = False
        self.names = _Names()

    def refresh_names(self) -> None:
        """Read the names of the warehouse's objects for completion (best effort)."""
        names: set[str] = set()
        for statement in ("SHOW TABLES", "SHOW STREAMS"):
            try:
                result = self.runner.run(statement, max_rows=10_000)
            except (ChangelakeError, remote.ServiceError):
                continue
            if "name" in result.columns:
                at = list(result.columns).index("name")
                names.update(str(row[at]) for row in result.rows)
        self.names.words = sorted(names) + list(KEYWORDS)

    def meta(self, command: str) -> bool:
        """Run a backslash command; False to leave the shell."""
        word, _, argument = command.strip().rstrip(";").partition(" ")
        if word in ("\\q", "\\quit"):
            return False
        if word == "\\timing":
            self.timing = {"on": True, "off": False}.get(argument.strip().lower(), not self.timing)
            self.err.print(Text(f"Timing is {'on' if self.timing else 'off'}.", style="dim"))
        elif word in ("\\help", "\\?", "\\h"):
            self.err.print(Text(HELP))
        else:
            self.err.print(Text(f"Unknown command {word}; \\help lists them.", style="red"))
        return True

    def run(self, statement: str) -> bool:
        """Run one statement in a worker thread; Ctrl-C cancels it. False when it failed or was
        cancelled (the rest of the input is not run)."""
        request = uuid.uuid4().hex
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                outcome["result"] = self.runner.run(statement, max_rows=MAX_ROWS, request=request)
            except BaseException as e:  # noqa: BLE001 - handed to the shell's thread
                outcome["error"] = e
            finally:
                done.set()

        began = time.perf_counter()
        # An Event, not Thread.join: Ctrl-C inside join() can leave the thread looking finished.
        threading.Thread(target=work, name="changelake-shell-statement", daemon=True).start()
        try:
            while not done.wait(0.05):
                pass
        except KeyboardInterrupt:
            self.err.print(Text("Cancelling…", style="yellow"))
            try:
                self.runner.cancel(request)
            except (ChangelakeError, remote.ServiceError):
                pass  # it ended meanwhile
            done.wait()
        took = time.perf_counter() - began
        error = outcome.get("error")
        if isinstance(error, ChangelakeError | remote.ServiceError):
            self.err.print(Text(f"error: {error}", style="red"))
        elif error is not None:  # not the user's mistake: say so, and keep the shell
            self.err.print(Text(f"internal error: {type(error).__name__}: {error}", style="red"))
        else:
            result: Result = outcome["result"]
            print_result(self.out, self.err, result, fmt="table")
            if statement.split(maxsplit=1)[0].upper() in _RENAMING:
                self.refresh_names()
        if self.timing:
            self.err.print(Text(f"Time: {took * 1000:.0f} ms", style="dim"))
        return error is None


@click.command()
@click.pass_obj
def shell(target: Target) -> None:
    r"""An interactive SQL shell: statements end with ';', Tab completes, \help for more."""
    out, err = Console(), Console(stderr=True, soft_wrap=True)
    runner = runner_for(target)
    with contextlib.ExitStack() as stack:
        if isinstance(runner, remote.Service):
            try:  # a session for the shell's life: BEGIN ... COMMIT spans its statements
                stack.enter_context(runner.session())
            except remote.ServiceError as e:
                err.print(Text(f"error: {e}", style="red"))
                raise click.exceptions.Exit(1) from e
        else:
            with err.status("Starting Spark…"):
                runner.start()
        _loop(target, runner, out, err)


def _loop(target: Target, runner: Any, out: Console, err: Console) -> None:
    """Read, run and print statements until Ctrl-D or \\q."""
    where = "its service" if isinstance(runner, remote.Service) else "this process's Spark"
    err.print(Text(f"changelake shell on {target.warehouse} ({where}); \\help for help."))
    state = _Shell(target, runner, out, err)
    state.refresh_names()
    prompt: PromptSession[str] = PromptSession(
        history=FileHistory(_history_file(target)),
        lexer=PygmentsLexer(SqlLexer),
        completer=state.names,
        complete_while_typing=False,
        multiline=True,
        key_bindings=_bindings(),
        prompt_continuation=lambda width, line, wrap: "...> ".rjust(width),
    )
    try:
        while True:
            try:
                text = prompt.prompt("changelake> ")
            except KeyboardInterrupt:
                continue
            except EOFError:
                break
            text = text.strip()
            if not text:
                continue
            if text.startswith("\\"):
                if not state.meta(text):
                    break
                continue
            try:
                statements = split(text)
            except ChangelakeError as e:
                err.print(Text(f"error: {e}", style="red"))
                continue
            for statement in statements:
                if not state.run(statement):
                    break
    finally:
        runner.close()
