"""The one grammar: every statement of the dialect parses into a typed statement value (golden
pairs), and malformed ones fail with a changelake error that says what to write instead."""

from __future__ import annotations

import pytest
from sqlglot import exp

from changelake.dialect import parse_one
from changelake.errors import InvalidStatementError, SqlSyntaxError, UnsupportedError
from changelake.sql import statements as s


def typed(text: str) -> s.Statement:
    return s.statement_of(parse_one(text))


GOLDEN = {
    "OPTIMIZE t": s.Optimize("t"),
    "optimize table T;": s.Optimize("T"),
    "VACUUM t": s.Vacuum("t"),
    "VACUUM TABLE t": s.Vacuum("t"),
    "SHOW TABLES": s.Show("TABLES"),
    "show terse tables": s.Show("TABLES"),
    "SHOW VIEWS;": s.Show("VIEWS"),
    "SHOW STREAMS": s.Show("STREAMS"),
    "DESCRIBE STREAM s": s.DescribeStream("s"),
    "DESC STREAM s": s.DescribeStream("s"),
    "DESCRIBE TABLE t": s.DescribeTable("t"),
    "DESCRIBE HISTORY t": s.DescribeHistory("t"),
    "DROP STREAM s": s.Drop("STREAM", "s", False),
    "DROP STREAM IF EXISTS s": s.Drop("STREAM", "s", True),
    "DROP TABLE IF EXISTS t": s.Drop("TABLE", "t", True),
    "DROP VIEW v": s.Drop("VIEW", "v", False),
    "TRUNCATE TABLE t": s.Truncate("t"),
    "BEGIN": s.Begin(),
    "COMMIT": s.Commit(),
    "ROLLBACK": s.Rollback(),
}


@pytest.mark.parametrize("text", sorted(GOLDEN))
def test_statements_parse_into_their_typed_values(text):
    assert typed(text) == GOLDEN[text]


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "CREATE STREAM s ON TABLE t",
            dict(name="s", on_view=False, table="t", append_only=False, show_initial_rows=False),
        ),
        (
            "CREATE OR REPLACE STREAM s ON TABLE t APPEND_ONLY = TRUE SHOW_INITIAL_ROWS = FALSE",
            dict(replace=True, if_not_exists=False, append_only=True, show_initial_rows=False),
        ),
        (
            "create stream if not exists s on table t show_initial_rows = true append_only = false",
            dict(if_not_exists=True, append_only=False, show_initial_rows=True),
        ),
        (
            # the comment is a string: what looks like options and AT clauses inside it is text
            "CREATE STREAM s ON TABLE t COMMENT = 'APPEND_ONLY = TRUE AT (it''s' APPEND_ONLY = TRUE",
            dict(comment="APPEND_ONLY = TRUE AT (it's", append_only=True),
        ),
        ("CREATE STREAM s ON VIEW v", dict(on_view=True, table="v")),
    ],
)
def test_create_stream_options_in_any_order(text, expected):
    stmt = typed(text)
    assert isinstance(stmt, s.CreateStream)
    for key, value in expected.items():
        assert getattr(stmt, key) == value, key


@pytest.mark.parametrize(
    "clause, edge, kind",
    [
        ("AT (VERSION => 3)", "AT", "VERSION"),
        ("BEFORE (STATEMENT => 'abc')", "BEFORE", "STATEMENT"),
        ("AT (TIMESTAMP => '2024-05-01 12:00:00'::timestamp)", "AT", "TIMESTAMP"),
        ("AT (OFFSET => -3600)", "AT", "OFFSET"),
        ("AT (STREAM => 'other')", "AT", "STREAM"),
    ],
)
def test_create_stream_start_points(clause, edge, kind):
    for text in (
        f"CREATE STREAM s ON TABLE t {clause} APPEND_ONLY = TRUE",
        f"CREATE STREAM s ON TABLE t APPEND_ONLY = TRUE {clause}",
    ):
        stmt = typed(text)
        assert isinstance(stmt.point, exp.HistoricalData)
        assert (stmt.point.this, stmt.point.args["kind"]) == (edge, kind)
        assert stmt.append_only


def test_explain_wraps_any_statement():
    stmt = typed(
        "EXPLAIN SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)"
        " END (VERSION => 3)"
    )
    assert isinstance(stmt, s.Explain)
    (table,) = stmt.tree.find_all(exp.Table)
    assert table.args["changes"].args["information"].name == "DEFAULT"


def test_statement_words_stay_usable_as_names():
    for text in ("SELECT 1 AS explain", "SELECT show, vacuum FROM optimize"):
        assert isinstance(typed(text), s.Query)


@pytest.mark.parametrize(
    "text, error, message",
    [
        ("CREATE STREAM s ON TABLE t FOO = TRUE", InvalidStatementError, "'FOO'. Options are"),
        ("CREATE STREAM s ON TABLE t APPEND_ONLY = maybe", InvalidStatementError, "TRUE or FALSE"),
        (
            "CREATE STREAM s ON TABLE t APPEND_ONLY = TRUE APPEND_ONLY = FALSE",
            InvalidStatementError,
            "APPEND_ONLY is given twice",
        ),
        (
            "CREATE STREAM s ON TABLE t AT (VERSION => 1) BEFORE (VERSION => 2)",
            InvalidStatementError,
            "AT\\|BEFORE is given twice",
        ),
        ("CREATE STREAM s ON TABLE t COMMENT = 3", InvalidStatementError, "quoted string"),
        (
            "CREATE OR REPLACE STREAM IF NOT EXISTS s ON TABLE t",
            InvalidStatementError,
            "exclude each other",
        ),
        ("CREATE STREAM s ON TABLE t AT (VERSION => 1", InvalidStatementError, "parenthes"),
        ("CREATE STREAM s ON TABLE", SqlSyntaxError, "name of the table"),
        ("CREATE STREAM s t", SqlSyntaxError, "ON TABLE"),
        (
            "SHOW FUNCTIONS",
            SqlSyntaxError,
            "SHOW TABLES, VIEWS, STREAMS, CHANNELS, TASKS, DYNAMIC TABLES or INTERNAL TABLES",
        ),
        ("OPTIMIZE", SqlSyntaxError, "name of the table"),
        ("EXPLAIN", SqlSyntaxError, "statement after EXPLAIN"),
        ("GRANT SELECT ON t TO me", UnsupportedError, "Unsupported statement"),
    ],
)
def test_malformed_statements_say_what_to_write(text, error, message):
    with pytest.raises(error, match=message) as caught:
        typed(text)
    assert "sqlglot" not in str(caught.value) and "Token" not in str(caught.value)
