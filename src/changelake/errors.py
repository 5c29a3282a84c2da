"""The one exception tree of changelake.

Every error a user can cause is a ``ChangelakeError``; subclasses also inherit the matching builtin
so callers may catch either. Messages say what was wrong, where, and what to do.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import Enum
from typing import TypeVar

E = TypeVar("E", bound=Enum)


class ChangelakeError(Exception):
    """Base of every changelake error."""


class JavaNotFoundError(ChangelakeError, RuntimeError):
    """Java 17+ is missing, so Spark cannot start."""


class SparkStartError(ChangelakeError, RuntimeError):
    """Spark's JVM did not start (its output is in the log the error names)."""


class StatementCancelledError(ChangelakeError, RuntimeError):
    """The statement was cancelled while it ran (its Spark jobs stopped, nothing committed)."""


class ConfigurationError(ChangelakeError, ValueError):
    """changelake was set up with arguments that cannot work together (e.g. a remote warehouse
    without a catalog URL)."""


class CatalogVersionError(ChangelakeError, RuntimeError):
    """The catalog database was written by a newer changelake than this one."""


class SqlSyntaxError(ChangelakeError, ValueError):
    """The SQL text could not be parsed."""

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None):
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(f"{message}{where}")
        self.line = line
        self.column = column


class UnsupportedError(ChangelakeError, NotImplementedError):
    """A statement or clause changelake does not support."""


class ObjectNotFoundError(ChangelakeError, KeyError):
    """A table, view, column or stream that does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TableNotFoundError(ObjectNotFoundError):
    """No table or view of that name."""


class ColumnNotFoundError(ObjectNotFoundError):
    """No column of that name."""


class StreamNotFoundError(ObjectNotFoundError):
    """No stream of that name."""


class ObjectExistsError(ChangelakeError, ValueError):
    """An object of that name already exists."""


class TypeMismatchError(ChangelakeError, TypeError):
    """A value does not fit the type of the column it goes into."""


class NotNullViolationError(ChangelakeError, ValueError):
    """A NULL went into a NOT NULL column."""


class InvalidStatementError(ChangelakeError, ValueError):
    """A statement that parses but cannot run as written (wrong arity, bad option, ...)."""


class DuplicateTargetRowError(InvalidStatementError):
    """A MERGE or UPDATE ... FROM matched one target row with several source rows, so the result
    would depend on row order."""


class InternalTableError(InvalidStatementError):
    """A user statement would write, alter or drop a table changelake keeps for itself, or give
    an object a name reserved for those tables."""


class DynamicTableError(InvalidStatementError):
    """A statement that would write, alter or drop a dynamic table as if it were a table."""


class ExternalTableError(InvalidStatementError):
    """A statement an external table refuses: writing it, or reading rows outside its scope."""


class SourceError(ChangelakeError, RuntimeError):
    """The source of an external table cannot be reached or read as its definition says (the
    server, a permission, ``wal_level``, a key, a changed or dropped table, a file)."""


class SourceChangedError(SourceError):
    """The source no longer matches the external table (a dropped table or slot, changed
    columns, a bad file): following it again needs a person, not a retry."""


class TimeTravelError(ChangelakeError, ValueError):
    """A point in time outside the table's readable history."""


class ConflictError(ChangelakeError, RuntimeError):
    """A concurrent writer committed a change this statement conflicts with."""


class DependencyError(ChangelakeError, ValueError):
    """An object cannot be dropped or changed because another depends on it."""


class TransactionError(ChangelakeError, RuntimeError):
    """BEGIN / COMMIT / ROLLBACK used out of order, or a statement not allowed in a transaction."""


class ExpressionError(ChangelakeError, ArithmeticError):
    """A user's expression failed while a statement ran (division by zero, overflow, ...)."""


class StaleStreamError(ChangelakeError, RuntimeError):
    """A stream whose frontier fell out of its table's retention."""


class StreamConsumedError(ConflictError):
    """A stream was consumed by another transaction first."""


class ChannelNotFoundError(ObjectNotFoundError):
    """An ingest channel that does not exist (or was dropped)."""


class ChannelFencedError(ConflictError):
    """An ingest channel was reopened (or dropped) elsewhere: this holder may no longer commit."""


class ChannelClosedError(ChangelakeError, RuntimeError):
    """An ingest channel used after ``close()``, or invalidated by a failed commit."""


class BackpressureError(ChangelakeError, RuntimeError):
    """The ingest client's buffers are full; retry the insert after a flush catches up."""


class IngestTimeoutError(ChangelakeError, TimeoutError):
    """An offset token was not committed within the time given."""


class InsertRejectedError(ChangelakeError, ValueError):
    """An insert into an ingest channel with ON_ERROR=ABORT had a bad row: nothing of the call
    was buffered. ``errors`` lists every bad value found (row index, column, value, message)."""

    def __init__(self, message: str, errors: tuple = ()):
        super().__init__(message)
        self.errors = errors


class MissingFileError(ChangelakeError, FileNotFoundError):
    """A file the catalog says a table holds is not in the warehouse (deleted or moved by hand)."""


class ExportError(ChangelakeError, OSError):
    """An export could not write its files (a bad location, no permission, ...)."""


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``name``, or None when nothing is close."""
    found = difflib.get_close_matches(
        name.lower(), [c.lower() for c in candidates], n=1, cutoff=0.6
    )
    if not found:
        return None
    by_lower = {c.lower(): c for c in candidates}
    return by_lower[found[0]]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """' Did you mean X?' or '' — to append to a not-found message."""
    match = closest(name, list(candidates))
    return f" Did you mean {match}?" if match else ""


def member_named(kind: type[E], text: str, what: str) -> E:
    """The member of ``kind`` that ``text`` names (any case, blanks around ignored), else an
    ``InvalidStatementError`` naming ``what`` was asked for, the choices and the closest one."""
    name = text.strip().upper()
    try:
        return kind[name]
    except KeyError:
        names = list(kind.__members__)
        choices = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
        raise InvalidStatementError(
            f"Unknown {what} {text!r}; use {choices}.{did_you_mean(name, names)}"
        ) from None


class IngestValidationError(ChangelakeError, ValueError):
    """An insert call whose data does not fit the table as a whole (unknown or missing columns,
    a column type that can never convert), so no row of it was accepted."""
