"""The ``changelake`` command line: run SQL against a warehouse and print the results.

Results go to stdout; progress, notes and errors go to stderr, so the output can be piped.
Spark's own lines (log4j, JVM warnings) go to a log file in the warehouse unless ``--verbose``.
Statements run through the ``changelake serve`` of the warehouse when one runs it (``remote``),
else with a Spark of the command's own (``local``). This module and the ones it imports load no
Spark, so that a command answered by a service takes a fraction of a second.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

import click
from rich.console import Console
from rich.text import Text

from changelake.cli import remote
from changelake.cli.output import FORMATS, print_result
from changelake.cli.runners import runner_for, split
from changelake.cli.target import Target
from changelake.errors import ChangelakeError

DEFAULT_MAX_ROWS = 100
TOKEN_ENV = "CHANGELAKE_SERVE_TOKEN"  # the service's (server/auth.py)
_Command = TypeVar("_Command", bound=Callable[..., Any])


class _Commands(click.Group):
    """The commands, of which ``serve`` (Spark and the web framework) and ``shell`` (the line
    editor) load only when they run; ``--help`` lists them by the short help given here."""

    _LAZY = {
        "serve": (
            "changelake.cli.serving",
            "Serve WAREHOUSE over HTTP: ingest, SQL, the dashboard, the scheduler.",
        ),
        "shell": ("changelake.cli.shell", "An interactive SQL shell on the warehouse."),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self._LAZY])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._LAZY:
            command = getattr(importlib.import_module(self._LAZY[name][0]), name)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = {name: self.commands[name].get_short_help_str() for name in self.commands}
        rows.update({name: short for name, (_, short) in self._LAZY.items()})
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows.items()))


def _max_rows_option(command: _Command) -> _Command:
    return click.option(
        "--max-rows",
        type=click.IntRange(min=0),
        default=DEFAULT_MAX_ROWS,
        show_default=True,
        help="Print at most this many rows of each result.",
    )(command)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--warehouse",
    "-w",
    envvar="CHANGELAKE_WAREHOUSE",
    default="./wh",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Warehouse directory (or URI). Env: CHANGELAKE_WAREHOUSE.",
)
@click.option(
    "--catalog",
    default=None,
    help="Catalog database URL, e.g. postgresql+psycopg://host/db (default: SQLite in warehouse).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Show Spark's own output (log4j lines, JVM warnings); by default it goes to"
    " _logs/spark.log in the warehouse.",
)
@click.option(
    "--server",
    default=None,
    metavar="URL",
    help="Run statements through the changelake serve at URL (default: the one running the"
    " warehouse, if any, else Spark starts in this process).",
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    default=None,
    help=f"The service's bearer token. Env: {TOKEN_ENV}.",
)
@click.version_option(package_name="changelake")
@click.pass_context
def main(
    ctx: click.Context,
    warehouse: str,
    catalog: str | None,
    verbose: bool,
    server: str | None,
    token: str | None,
) -> None:
    """Change-tracked tables on Apache Spark and Parquet."""
    ctx.obj = Target(warehouse, catalog, verbose=verbose, server=server, token=token)


@main.command()
@click.argument("statement", required=False)
@click.option(
    "--file",
    "-f",
    "sql_file",
    type=click.File("r"),
    help="Run the ';'-separated statements of this file, one at a time.",
)
@_max_rows_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table: fits the terminal, a write's result as one line; csv; json: one object per"
    " line; markdown.",
)
@click.pass_obj
def sql(
    target: Target, statement: str | None, sql_file: TextIO | None, max_rows: int, fmt: str
) -> None:
    """Run STATEMENT (or the statements in --file, or on stdin) and print each result."""
    if statement is not None and sql_file is not None:
        raise click.UsageError("give either STATEMENT or --file, not both")
    if statement is not None:
        text = statement
    elif sql_file is not None:
        text = sql_file.read()
    else:
        text = sys.stdin.read()
    _run(target, text, max_rows=max_rows, fmt=fmt)


@main.command()
@_max_rows_option
@click.pass_obj
def tables(target: Target, max_rows: int) -> None:
    """List the tables and views of the warehouse."""
    _run(target, "SHOW TABLES", max_rows=max_rows)


@main.command()
@click.argument("table")
@_max_rows_option
@click.pass_obj
def history(target: Target, table: str, max_rows: int) -> None:
    """Show the versions of TABLE: one row per committed change."""
    _run(target, f"DESCRIBE HISTORY {table}", max_rows=max_rows)


@main.command()
@click.argument("table")
@_max_rows_option
@click.pass_obj
def describe(target: Target, table: str, max_rows: int) -> None:
    """Show the columns of TABLE."""
    _run(target, f"DESCRIBE TABLE {table}", max_rows=max_rows)


def _run(target: Target, text: str, *, max_rows: int, fmt: str = "table") -> None:
    """Run each statement of ``text`` in order, through the warehouse's service if one runs it,
    else with a Spark of this process; the first error stops the run with exit code 1."""
    out, err = Console(), Console(stderr=True, soft_wrap=True)
    where = ""  # which statement failed, when there are several
    try:
        statements = split(text)
        if not statements:
            raise click.UsageError("no SQL statement given")
        runner = runner_for(target)
        with contextlib.ExitStack() as stack:
            if isinstance(runner, remote.Service):
                stack.callback(runner.close)
                if len(statements) > 1:  # a transaction may span them
                    stack.enter_context(runner.session())
            else:
                with err.status("Starting Spark…"):
                    runner.start()
            for number, statement in enumerate(statements, start=1):
                where = f"statement {number}: " if len(statements) > 1 else ""
                with err.status("Running…"):
                    result = runner.run(statement, max_rows=max_rows)
                print_result(out, err, result, fmt=fmt)
    except (ChangelakeError, remote.ServiceError) as e:
        err.print(Text(f"error: {where}{e}", style="red"))
        raise click.exceptions.Exit(1) from e
