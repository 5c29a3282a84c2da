"""The one place where errors raised by Spark jobs become changelake errors.

A user's expression can fail only once Spark runs it, inside a job (``1/0``, an overflow, a value
that does not fit its column). Spark reports such failures with a condition name, message
parameters and the SQL fragment that failed; this module turns them into a one-line changelake
error naming the statement, the expression, what happened and the fix, without internal column
names or Java text. Anything else is not the user's doing and is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import AnalysisException, ParseException, PySparkException, QueryContextType
from pyspark.errors.exceptions.captured import UnknownException, convert_exception
from pyspark.sql import Column
from pyspark.sql import functions as F

from changelake.errors import (
    ChangelakeError,
    ColumnNotFoundError,
    ExpressionError,
    InvalidStatementError,
    MissingFileError,
    NotNullViolationError,
    SqlSyntaxError,
    TableNotFoundError,
    TypeMismatchError,
    did_you_mean,
)

_NOT_NULL_MARK = "CL_NOT_NULL_VIOLATION"
_INVALID_MARK = "CL_INVALID_INPUT:"
_NO_NAMES: Mapping[str, str] = {}
_MAX_CAUSES = 8
# A read of a file the warehouse lost (a SparkException from inside the job, which PySpark
# does not convert)
_FILE_NOT_EXIST = "FAILED_READ_FILE.FILE_NOT_EXIST"

# The statement of the innermost spark_errors block, so storage code deep inside a statement
# names it without every caller passing it down.
_statement: ContextVar[str | None] = ContextVar("changelake_statement", default=None)

_INTERNAL_NAME = re.compile(r"(?:`?\w+`?\.)?`?\b_cl_\w+`?(?:,\s*)?")
_PLACEHOLDER = re.compile(r"`?__cl_ref_\d+__`?")


@dataclass(frozen=True)
class _Failure:
    """What went wrong in an expression, and how to avoid it."""

    error: type[ChangelakeError]
    what: str
    fix: str


_DIVISION = _Failure(
    ExpressionError,
    "division by zero",
    "Use try_divide(a, b) or a / NULLIF(b, 0) to get NULL instead.",
)
_REMAINDER = _Failure(
    ExpressionError,
    "remainder by zero",
    "Use try_mod(a, b) or a % NULLIF(b, 0) to get NULL instead.",
)
_OVERFLOW = _Failure(
    ExpressionError,
    "arithmetic overflow",
    "Cast to a wider type such as BIGINT or DECIMAL(38, s), or use {try_function} to get NULL"
    " instead.",
)
_ARRAY_INDEX = _Failure(
    ExpressionError,
    "array index out of bounds",
    "Use try_element_at(array, index) or get(array, index) to get NULL instead.",
)
_ARITHMETIC: Mapping[str, _Failure] = {
    "DIVIDE_BY_ZERO": _DIVISION,
    "INTERVAL_DIVIDED_BY_ZERO": _DIVISION,
    "REMAINDER_BY_ZERO": _REMAINDER,
    "ARITHMETIC_OVERFLOW": _OVERFLOW,
    "BINARY_ARITHMETIC_OVERFLOW": _OVERFLOW,
    "INTERVAL_ARITHMETIC_OVERFLOW": _OVERFLOW,
    "DATETIME_OVERFLOW": _OVERFLOW,
    "INVALID_ARRAY_INDEX": _ARRAY_INDEX,
    "INVALID_ARRAY_INDEX_IN_ELEMENT_AT": _ARRAY_INDEX,
    "INVALID_INDEX_OF_ZERO": _ARRAY_INDEX,
}
_CASTS = ("CAST_INVALID_INPUT", "CAST_OVERFLOW", "NUMERIC_VALUE_OUT_OF_RANGE")


def not_null_marker(column: str) -> str:
    """The text a write job raises (``raise_error``) when ``column`` (``table.column``) would
    get a NULL; ``translate`` turns it into a NotNullViolationError."""
    return f"{_NOT_NULL_MARK}[{column}]"


def invalid_input(message: Column) -> Column:
    """An expression that fails its Spark job with ``message`` (a string column: what is wrong
    with the row, and the fix); ``translate`` makes it an InvalidStatementError. Checks the rows
    inside the job that reads them, instead of a query of its own."""
    return F.raise_error(F.concat(F.lit(_INVALID_MARK), message))


def current_statement() -> str | None:
    """The statement named by the innermost enclosing ``spark_errors`` block, if any."""
    return _statement.get()


@contextmanager
def spark_errors(statement: str, *, names: Mapping[str, str] = _NO_NAMES) -> Iterator[None]:
    """Re-raise errors of user expressions raised by Spark inside the block as changelake errors.

    ``statement`` names the statement in messages ("UPDATE people"); ``names`` maps placeholders
    in the SQL Spark ran to what the user wrote. Other Spark errors propagate unchanged.
    """
    token = _statement.set(statement)
    try:
        yield
    except PySparkException as e:
        translated = translate(e, statement=statement, names=names)
        if translated is None:
            raise
        raise translated from e
    except Py4JJavaError as e:
        missing = _missing_file(e)
        if missing is not None:
            raise MissingFileError(
                f"{statement}: a file of the warehouse is missing: {missing}; nothing was"
                " changed. changelake deletes a table's files only by VACUUM, once no version"
                " within retention reads them: restore the file from a backup, or connect to"
                " where the warehouse's files are now if they were moved."
            ) from e
        wrapped = _wrapped_spark_error(e)
        translated = (
            None if wrapped is None else translate(wrapped, statement=statement, names=names)
        )
        if translated is None:
            raise
        raise translated from wrapped
    finally:
        _statement.reset(token)


def _missing_file(e: Py4JJavaError) -> str | None:
    """The path of the file whose read failed ``e``'s job because it does not exist, if that
    is what failed it (a ``SparkException`` PySpark does not convert)."""
    cause, depth = e.java_exception, 0
    while cause is not None and depth < _MAX_CAUSES:
        try:
            if cause.getCondition() == _FILE_NOT_EXIST:
                return str(cause.getMessageParameters().get("path"))
        except Py4JError:  # not a Spark error (no condition), or the JVM is gone
            pass
        try:
            cause, depth = cause.getCause(), depth + 1
        except Py4JError:
            return None
    return None


def _wrapped_spark_error(e: Py4JJavaError) -> PySparkException | None:
    """The Spark error inside a Java exception PySpark does not convert: when a job that builds
    a broadcast fails (in another thread), the query sees its error wrapped in an
    ``ExecutionException``."""
    try:
        cause, depth = e.java_exception, 0
        while cause is not None and depth < _MAX_CAUSES:
            converted = convert_exception(cause)
            if not isinstance(converted, UnknownException) and converted.getCondition():
                return converted
            cause, depth = cause.getCause(), depth + 1
    except Py4JError:  # the JVM is gone: the original error says more
        return None
    return None


def translate(
    e: PySparkException, *, statement: str, names: Mapping[str, str] = _NO_NAMES
) -> ChangelakeError | None:
    """The changelake error for a runtime error of a user's expression; None for other errors."""
    condition = (e.getCondition() or "").split(".")[0]
    params = e.getMessageParameters() or {}
    text = params.get("errorMessage") or str(e)
    if _INVALID_MARK in text:
        return InvalidStatementError(text.split(_INVALID_MARK, 1)[1].strip())
    marked = _not_null_column(e, params)
    if marked is not None:
        return NotNullViolationError(
            f"{statement}: NULL value for NOT NULL column {_clean(marked, names)}; nothing was"
            " changed. Provide a value (e.g. COALESCE(value, default)) or make the column"
            " nullable."
        )
    where = _where(e, names)
    failure = _ARITHMETIC.get(condition)
    if failure is not None:
        fix = failure.fix.format(try_function=_try_function(params))
        return failure.error(f"{statement}: {failure.what}{where}; nothing was changed. {fix}")
    if condition in _CASTS:
        return TypeMismatchError(
            f"{statement}: type mismatch: {_cast_failure(e, condition, params, names)}{where};"
            " nothing was changed. Fix the value, cast it explicitly, or use try_cast to get NULL"
            " instead."
        )
    return None


def _not_null_column(e: PySparkException, params: Mapping[str, str]) -> str | None:
    text = params.get("errorMessage") or str(e)
    found = re.search(re.escape(_NOT_NULL_MARK) + r"\[([^\]]+)\]", text)
    return found.group(1) if found else None


def _where(e: PySparkException, names: Mapping[str, str]) -> str:
    """' in "<fragment>"' for the SQL fragment that failed, or '' when Spark gives none the user
    would recognize (a DataFrame call site, or SQL changelake added around the user's)."""
    try:
        contexts = e.getQueryContext()
        fragments = [c.fragment() for c in contexts if c.contextType() == QueryContextType.SQL]
    except (PySparkException, Py4JError):
        return ""
    for fragment in fragments:
        text = _PLACEHOLDER.sub(lambda m: names.get(m.group(0).strip("`"), m.group(0)), fragment)
        text = " ".join(text.split())
        if text and not _INTERNAL_NAME.search(text) and not _PLACEHOLDER.search(text):
            return f' in "{text}"'
    return ""


def _try_function(params: Mapping[str, str]) -> str:
    named = re.search(r"'(try_\w+)'", params.get("alternative", ""))
    return f"{named.group(1)}(a, b)" if named else "try_add / try_subtract / try_multiply"


def _cast_failure(
    e: PySparkException, condition: str, params: Mapping[str, str], names: Mapping[str, str]
) -> str:
    if condition == "NUMERIC_VALUE_OUT_OF_RANGE" and "precision" in params:
        value = params.get("value", "a value")
        target = f"Decimal({params['precision']}, {params.get('scale', '0')})"
    elif "targetType" in params:
        value = _literal(params.get("expression") or params.get("value") or "a value")
        target = params["targetType"].strip('"')
    else:  # an older message layout: read the text
        found = re.search(
            r"The value (.+?) of the type .+? cannot be cast to (.+?) (?:because|due to)", str(e)
        ) or re.search(r"\s(\S+) cannot be represented as (\w+\([\d, ]+\))", str(e))
        if not found:
            return "a value does not fit its type"
        value, target = found.group(1), found.group(2).strip('"')
    return f"value {_clean(value, names)} cannot be converted to {target}"


def _literal(value: str) -> str:
    """A Spark literal as SQL reads it: 3000000000L -> 3000000000."""
    return re.sub(r"^(-?\d+(?:\.\d+)?)(?:L|S|Y|BD|D)$", r"\1", value)


def _clean(text: str, names: Mapping[str, str]) -> str:
    """``text`` with placeholders named as the user wrote them and internal names removed."""
    for placeholder, name in names.items():
        text = text.replace(placeholder, name)
    return _INTERNAL_NAME.sub("", _PLACEHOLDER.sub("", text))


def translate_analysis(
    e: AnalysisException, *, names: Mapping[str, str] = _NO_NAMES
) -> ChangelakeError:
    """The changelake error for a Spark analysis error of a user's query (unknown column, type
    error, ...), with the names the user wrote and without Spark's plan."""
    condition = e.getCondition() or ""
    params = e.getMessageParameters() or {}
    # (a ParseException's text starts with an empty line)
    text = _clean(next((ln for ln in str(e).split("\n") if ln.strip()), ""), names)
    text = re.sub(r"\s*SQLSTATE: \w+;?.*$", "", text)
    if condition.startswith("UNRESOLVED_COLUMN"):
        column = _clean(params.get("objectName", "?"), names).replace("`", "")
        proposal = _clean(params.get("proposal", ""), names).replace("`", "")
        known = [c.strip() for c in proposal.split(",") if c.strip()]
        hint = did_you_mean(column, known) or (
            f" Columns in scope: {', '.join(known)}." if known else ""
        )
        return ColumnNotFoundError(f"Column {column} does not exist.{hint}")
    if condition.startswith("TABLE_OR_VIEW_NOT_FOUND"):
        return TableNotFoundError(text)
    if isinstance(e, ParseException) or "PARSE_SYNTAX_ERROR" in condition:
        return SqlSyntaxError(text)
    return InvalidStatementError(text)
