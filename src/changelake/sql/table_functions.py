"""Table functions in FROM: ``TABLE(DYNAMIC_TABLE_REFRESH_HISTORY([NAME => 'dt']))``,
``TABLE(TASK_HISTORY([TASK_NAME => 't'] [, RESULT_LIMIT => n]))``. Each is
evaluated from catalog metadata into a small DataFrame, which the query reads like a table."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.errors import InvalidStatementError, UnsupportedError
from changelake.plan.bind import Binder
from changelake.runtime.env import Context
from changelake.sql import tasks
from changelake.sql.dynamic import HISTORY_COLUMNS, history_rows


def _refresh_history(ctx: Context, args: dict[str, str]) -> DataFrame:
    return ctx.spark.createDataFrame(history_rows(ctx, args.get("NAME")), HISTORY_COLUMNS)


def _task_history(ctx: Context, args: dict[str, str]) -> DataFrame:
    limit = args.get("RESULT_LIMIT")
    if limit is not None and not limit.isdigit():
        raise InvalidStatementError(f"TASK_HISTORY: RESULT_LIMIT is a whole number, not {limit!r}.")
    rows = tasks.history_rows(ctx, args.get("TASK_NAME"), None if limit is None else int(limit))
    return ctx.spark.createDataFrame(rows, tasks.HISTORY_COLUMNS)


_FUNCTIONS: dict[str, tuple[tuple[str, ...], Callable[..., DataFrame]]] = {
    "DYNAMIC_TABLE_REFRESH_HISTORY": (("NAME",), _refresh_history),
    "TASK_HISTORY": (("TASK_NAME", "RESULT_LIMIT"), _task_history),
}


def expand_table_functions(binder: Binder, tree: exp.Expression) -> exp.Expression:
    """``tree`` with every ``TABLE(f(...))`` in FROM bound to f's rows."""
    for table in list(tree.find_all(exp.Table)):
        call = table.this
        if not (
            isinstance(call, exp.Anonymous)
            and call.name.upper() == "TABLE"
            and len(call.expressions) == 1
            and isinstance(call.expressions[0], exp.Anonymous | exp.Func)
        ):
            continue
        inner = call.expressions[0]
        name = inner.name.upper() if isinstance(inner, exp.Anonymous) else inner.sql_name()
        known = _FUNCTIONS.get(name)
        if known is None:
            raise UnsupportedError(
                f"Unknown table function {name}; known: {', '.join(sorted(_FUNCTIONS))}."
            )
        allowed, evaluate = known
        args = {}
        for arg in inner.expressions:
            if not isinstance(arg, exp.Kwarg) or not isinstance(arg.expression, exp.Literal):
                raise InvalidStatementError(
                    f"{name} takes named constant arguments, e.g. {name}(NAME => 'x');"
                    f" got {arg.sql()}."
                )
            key = arg.this.name.upper()
            if key not in allowed:
                raise InvalidStatementError(
                    f"{name} has no argument {key}; its arguments: {', '.join(allowed)}."
                )
            args[key] = arg.expression.name
        df = evaluate(binder.ctx, args)
        table.set("this", exp.to_identifier(binder.bind_dataframe(df, name)))
    return tree
