"""Statement dispatch: parse one statement, run it, return a DataFrame."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.errors import InvalidStatementError, UnsupportedError
from changelake.sql import ddl, show
from changelake.sql.dialect import parse_one
from changelake.sql.resolve import Resolver
from changelake.sql.results import StatementResult
from changelake.storage.spark_errors import spark_errors

if TYPE_CHECKING:
    from changelake.session import Session

_IDENT = r"([A-Za-z_][\w$]*)"
_COMMANDS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"^OPTIMIZE\s+(?:TABLE\s+)?{_IDENT}$", re.I), "optimize"),
    (re.compile(rf"^VACUUM\s+(?:TABLE\s+)?{_IDENT}$", re.I), "vacuum"),
    (re.compile(r"^SHOW\s+(?:TERSE\s+)?TABLES$", re.I), "show_tables"),
    (re.compile(r"^SHOW\s+VIEWS$", re.I), "show_views"),
    (re.compile(r"^EXPLAIN\s+(.+)$", re.I | re.S), "explain"),
]


def execute(session: Session, text: str) -> DataFrame:
    session.begin_statement()
    stripped = text.strip().rstrip(";").strip()
    for pattern, name in _COMMANDS:
        found = pattern.match(stripped)
        if found:
            return _COMMAND_HANDLERS[name](session, found)
    from changelake.streams.sql import stream_command

    handled = stream_command(session, stripped)
    if handled is not None:
        return handled
    tree = parse_one(text)
    statement_id = _new_id()
    if isinstance(tree, exp.Query):
        return Resolver(session).query(tree)
    handler = _HANDLERS.get(type(tree))
    if handler is None:
        raise UnsupportedError(
            f"Unsupported statement: {stripped.split()[0].upper()} ... ({type(tree).__name__})."
        )
    with spark_errors(_label(stripped, tree)):
        result = handler(session, tree, statement_id)
    if isinstance(result, DataFrame):
        return result
    return result.to_dataframe(session.spark)


def _label(text: str, tree: exp.Expression) -> str:
    """How errors name a statement: its text up to its table ("UPDATE people", "INSERT INTO t")."""
    table = tree.find(exp.Table)
    found = re.search(rf"\b{re.escape(table.name)}\b", text, re.I) if table else None
    return " ".join(text[: found.end()].split()) if found else text.split()[0].upper()


def _new_id() -> str:
    from changelake.session import new_statement_id

    return new_statement_id()


def _insert(session: Session, tree: exp.Expression, sid: str) -> StatementResult:
    from changelake.dml.insert import insert

    return insert(session, tree, sid)  # type: ignore[arg-type]


def _update(session: Session, tree: exp.Expression, sid: str) -> StatementResult:
    from changelake.dml.modify import update

    return update(session, tree, sid)  # type: ignore[arg-type]


def _delete(session: Session, tree: exp.Expression, sid: str) -> StatementResult:
    from changelake.dml.modify import delete

    return delete(session, tree, sid)  # type: ignore[arg-type]


def _merge(session: Session, tree: exp.Expression, sid: str) -> StatementResult:
    from changelake.dml.merge import merge

    return merge(session, tree, sid)  # type: ignore[arg-type]


def _describe(session: Session, tree: exp.Expression, sid: str) -> DataFrame:
    style = str(tree.args.get("style") or "").upper()
    kind = str(tree.args.get("kind") or "TABLE").upper()
    if style == "HISTORY":
        return show.describe_history(session, tree.this.name)
    if kind == "TABLE" and isinstance(tree.this, exp.Table):
        return show.describe_table(session, tree.this.name)
    raise UnsupportedError(f"Unsupported DESCRIBE: {tree.sql()}.")


def _begin(session: Session, tree: exp.Expression, sid: str) -> StatementResult:
    session.begin()
    return StatementResult(sid, "BEGIN", "", message="Transaction started.")


def _commit(session: Session, tree: exp.Expression, sid: str) -> StatementResult:
    versions = session.end(commit=True)
    made = ", ".join(f"table {t} -> version {v[-1]}" for t, v in versions.items())
    return StatementResult(sid, "COMMIT", "", message=f"Committed. {made}".strip())


def _rollback(session: Session, tree: exp.Expression, sid: str) -> StatementResult:
    session.end(commit=False)
    return StatementResult(sid, "ROLLBACK", "", message="Rolled back.")


_HANDLERS: dict[type, Callable[[Session, exp.Expression, str], StatementResult | DataFrame]] = {
    exp.Insert: _insert,
    exp.Update: _update,
    exp.Delete: _delete,
    exp.Merge: _merge,
    exp.Create: ddl.create,  # type: ignore[dict-item]
    exp.Drop: ddl.drop,  # type: ignore[dict-item]
    exp.Alter: ddl.alter,  # type: ignore[dict-item]
    exp.TruncateTable: ddl.truncate,  # type: ignore[dict-item]
    exp.Describe: _describe,
    exp.Transaction: _begin,
    exp.Commit: _commit,
    exp.Rollback: _rollback,
}


def _optimize(session: Session, found: re.Match[str]) -> DataFrame:
    from changelake.storage.maintenance import optimize

    session.require_no_transaction("OPTIMIZE")
    sid = _new_id()
    done = optimize(session, found.group(1), statement_id=sid)
    message = (
        f"Compacted {done.files_removed} file(s) into {done.files_added}."
        if done.version is not None
        else "Nothing to compact."
    )
    return StatementResult(
        sid, "OPTIMIZE", found.group(1).lower(), done.version, message=message
    ).to_dataframe(session.spark)


def _vacuum(session: Session, found: re.Match[str]) -> DataFrame:
    from changelake.streams.retention import vacuum_table

    session.require_no_transaction("VACUUM")
    done = vacuum_table(session, found.group(1))
    return StatementResult(
        _new_id(),
        "VACUUM",
        found.group(1).lower(),
        message=f"Removed {done.files_removed} expired file(s) and {done.orphans_removed} orphan"
        f" file(s); readable from version {done.readable_from_version}.",
    ).to_dataframe(session.spark)


def _explain(session: Session, found: re.Match[str]) -> DataFrame:
    from changelake.changes.explain import explain

    return explain(session, found.group(1))


_COMMAND_HANDLERS: dict[str, Callable[[Session, re.Match[str]], DataFrame]] = {
    "optimize": _optimize,
    "vacuum": _vacuum,
    "show_tables": lambda session, _: show.show_tables(session),
    "show_views": lambda session, _: show.show_views(session),
    "explain": _explain,
}

__all__ = ["InvalidStatementError", "execute"]
