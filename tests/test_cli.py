"""The ``changelake`` CLI, run in-process against a real temporary warehouse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from changelake.cli import main, runners
from changelake.dialect import split_statements
from changelake.errors import SqlSyntaxError


def _invoke(warehouse: Path, *args: str, stdin: str | None = None) -> Result:
    # A wide terminal keeps rich from folding values across lines, which would break `in` checks.
    runner = CliRunner(env={"COLUMNS": "250"})
    return runner.invoke(main, ["-w", str(warehouse), *args], input=stdin)


def _ok(result: Result) -> str:
    assert result.exit_code == 0, f"exit {result.exit_code}\n{result.output}\n{result.exception!r}"
    return result.stdout


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT 1", ["SELECT 1"]),
        ("SELECT 1;", ["SELECT 1"]),
        (" SELECT 1 ;\n\n SELECT 2 ; ; ", ["SELECT 1", "SELECT 2"]),
        ("SELECT 'a;b', \"c;d\" FROM t; SELECT 2", ["SELECT 'a;b', \"c;d\" FROM t", "SELECT 2"]),
        ("SELECT `x;y` FROM t /* ; */; SELECT 2", ["SELECT `x;y` FROM t", "SELECT 2"]),
        ("SELECT 1 -- trailing ; comment\n; SELECT 2", ["SELECT 1", "SELECT 2"]),
        ("INSERT INTO t VALUES ('it\\'s; fine')", ["INSERT INTO t VALUES ('it\\'s; fine')"]),
        ("SELECT * FROM t AT (VERSION => 1)", ["SELECT * FROM t AT (VERSION => 1)"]),
        ("  ;; -- nothing\n", []),
    ],
)
def test_split_statements(text: str, expected: list[str]) -> None:
    assert split_statements(text) == expected
    assert runners.split(text) == expected  # the command line's, which skips the parser if it can


def test_split_statements_reports_an_unterminated_string() -> None:
    with pytest.raises(SqlSyntaxError, match="could not split"):
        split_statements("SELECT 'abc")


def test_serve_help_describes_all_the_service_does(tmp_path: Path) -> None:
    shown = " ".join(_ok(_invoke(tmp_path / "wh", "serve", "--help")).split())
    for part in ("ingest", "SQL", "sessions", "dynamic tables", "tasks", "dashboard"):
        assert part in shown, part
    assert "runs tasks and follows external tables" in shown  # the scheduler
    assert "Serve the ingest channels" not in shown


def test_create_insert_select_tables_history_describe(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    _ok(_invoke(wh, "sql", "CREATE TABLE people (id INT, name STRING)"))
    _ok(_invoke(wh, "sql", "INSERT INTO people VALUES (1, 'Jeff'), (2, 'Donny')"))

    selected = _ok(_invoke(wh, "sql", "SELECT id, name FROM people ORDER BY id"))
    assert "name" in selected
    assert selected.index("Jeff") < selected.index("Donny")

    assert "people" in _ok(_invoke(wh, "tables"))

    history = _ok(_invoke(wh, "history", "people")).lower()
    assert "version" in history
    assert "insert" in history

    described = _ok(_invoke(wh, "describe", "people"))
    assert "id" in described
    assert "name" in described


def test_statements_from_a_file_run_in_order(tmp_path: Path) -> None:
    script = tmp_path / "setup.sql"
    script.write_text(
        "CREATE TABLE notes (id INT, body STRING);\n"
        "INSERT INTO notes VALUES (1, 'semi;colon'), (2, 'plain');\n"
        "SELECT body FROM notes WHERE id = 1;\n"
    )
    out = _ok(_invoke(tmp_path / "wh", "sql", "-f", str(script)))
    assert "semi;colon" in out
    assert "plain" not in out


def test_statements_from_stdin(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    _ok(_invoke(wh, "sql", stdin="CREATE TABLE t (x INT); INSERT INTO t VALUES (41), (42);"))
    assert "42" in _ok(_invoke(wh, "sql", stdin="SELECT max(x) AS top FROM t"))


def test_max_rows_truncates_and_says_so(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    _ok(_invoke(wh, "sql", "CREATE TABLE n (x INT)"))
    _ok(_invoke(wh, "sql", "INSERT INTO n VALUES (101), (102), (103), (104), (105)"))
    result = _invoke(wh, "sql", "--max-rows", "2", "SELECT x FROM n ORDER BY x")
    out = _ok(result)
    assert "101" in out and "102" in out
    assert "103" not in out
    assert "--max-rows" in result.stderr


def test_unknown_table_is_a_clean_error(tmp_path: Path) -> None:
    result = _invoke(tmp_path / "wh", "sql", "SELECT * FROM no_such_table")
    assert result.exit_code == 1
    # SystemExit means the CLI handled it; anything else would have printed a traceback.
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "error:" in result.stderr
    assert "no_such_table" in result.stderr
    assert "Traceback" not in result.output
    assert "java" not in result.output.lower()


def test_failing_expression_is_one_error_line(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    _ok(_invoke(wh, "sql", "CREATE TABLE t (id INT, v INT); INSERT INTO t VALUES (1, 2)"))
    result = _invoke(wh, "sql", "UPDATE t SET v = 1/0 WHERE id = 1")
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        'error: UPDATE t: division by zero in "1 / 0"; nothing was changed. Use try_divide(a, b)'
        " or a / NULLIF(b, 0) to get NULL instead."
    ]
    for leak in ("Traceback", "java", "_cl_", "SQLSTATE"):
        assert leak not in result.output
    assert "2" in _ok(_invoke(wh, "sql", "SELECT v FROM t"))


def test_failing_expression_in_a_query_is_one_error_line(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    _ok(_invoke(wh, "sql", "CREATE TABLE t (id INT, v INT); INSERT INTO t VALUES (1, 0)"))
    result = _invoke(wh, "sql", "SELECT id / v AS r FROM t")
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: SELECT: division by zero")
    assert "try_divide" in errors[0]
    for leak in ("Traceback", "java", "_cl_", "__cl_ref", "SQLSTATE"):
        assert leak not in result.output


def test_statement_and_file_together_is_a_usage_error(tmp_path: Path) -> None:
    script = tmp_path / "s.sql"
    script.write_text("SELECT 1")
    result = _invoke(tmp_path / "wh", "sql", "-f", str(script), "SELECT 2")
    assert result.exit_code == 2
    assert "not both" in result.output


def test_a_write_prints_one_line_and_formats_print_rows_for_scripts(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    assert _ok(_invoke(wh, "sql", "CREATE TABLE p (id INT, name STRING, at DATE)")) == (
        "CREATE TABLE p: version 0, Table p created\n"
    )
    inserted = "INSERT INTO p VALUES (1, 'a|b', DATE'2026-01-02'), (2, NULL, NULL)"
    assert _ok(_invoke(wh, "sql", inserted)) == "INSERT p: version 1, 2 inserted\n"
    assert _ok(_invoke(wh, "sql", "UPDATE p SET name = 'x,y' WHERE id = 2")) == (
        "UPDATE p: version 2, 1 updated\n"
    )
    assert _ok(_invoke(wh, "sql", "DELETE FROM p WHERE id = 9")) == "DELETE p: no rows changed\n"

    query = "SELECT id, name, at FROM p ORDER BY id"
    assert _ok(_invoke(wh, "sql", "--format", "csv", query)) == (
        'id,name,at\n1,a|b,2026-01-02\n2,"x,y",\n'
    )
    assert _ok(_invoke(wh, "sql", "--format", "json", query)) == (
        '{"id": 1, "name": "a|b", "at": "2026-01-02"}\n{"id": 2, "name": "x,y", "at": null}\n'
    )
    assert _ok(_invoke(wh, "sql", "--format", "markdown", query)) == (
        "| id | name | at |\n|---|---|---|\n| 1 | a\\|b | 2026-01-02 |\n| 2 | x,y | NULL |\n"
    )
    # in the other formats a write's result is its row, for scripts to read
    deleted = _ok(_invoke(wh, "sql", "--format", "json", "DELETE FROM p WHERE id = 1"))
    assert json.loads(deleted) | {"statement_id": None} == {
        "statement_id": None,
        "operation": "DELETE",
        "object": "p",
        "version": 3,
        "rows_inserted": 0,
        "rows_updated": 0,
        "rows_deleted": 1,
        "message": "committed",
    }


def test_wide_results_fit_the_terminal_and_cut_rows_are_counted(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    _ok(_invoke(wh, "sql", "CREATE TABLE w (id INT, a STRING, b STRING)"))
    _ok(
        _invoke(
            wh,
            "sql",
            "INSERT INTO w SELECT CAST(id AS INT), repeat('x', 200), repeat('y', 200)"
            " FROM range(5)",
        )
    )
    result = CliRunner(env={"COLUMNS": "60"}).invoke(
        main, ["-w", str(wh), "sql", "--max-rows", "3", "SELECT * FROM w ORDER BY id"]
    )
    lines = _ok(result).splitlines()
    assert all(len(line) <= 60 for line in lines), lines
    assert len(lines) == 3 + 4  # three rows, one line each, within the header and borders
    assert "…" in lines[3]
    assert "showing 3 of 5 rows (2 cut); use --max-rows to see more" in result.stderr


def test_results_wider_than_80_columns_print_as_records(tmp_path: Path) -> None:
    """SHOW DYNAMIC TABLES, SHOW TASKS and the refresh history have more columns than 80
    characters hold: each row prints as a record (psql's expanded display), every value whole."""
    wh = tmp_path / "wh"
    _ok(_invoke(wh, "sql", "CREATE TABLE sales (region STRING, amount INT)"))
    _ok(_invoke(wh, "sql", "INSERT INTO sales VALUES ('north', 5), ('south', 7)"))
    query = "SELECT region, sum(amount) AS total FROM sales GROUP BY region"
    _ok(_invoke(wh, "sql", f"CREATE DYNAMIC TABLE totals TARGET_LAG = '1 minute' AS {query}"))
    _ok(_invoke(wh, "sql", "CREATE TASK nightly SCHEDULE = '60 MINUTE' AS DELETE FROM sales"))
    narrow = CliRunner(env={"COLUMNS": "80"})
    history = "SELECT * FROM TABLE(DYNAMIC_TABLE_REFRESH_HISTORY())"
    for statement in ("SHOW DYNAMIC TABLES", "SHOW TASKS", history):
        out = _ok(narrow.invoke(main, ["-w", str(wh), "sql", statement]))
        lines = out.splitlines()
        assert all(len(line) <= 80 for line in lines), (statement, lines)
        assert lines[0].startswith("record 1 ─"), (statement, lines)
        assert "…" not in out, (statement, out)
    shown = _ok(narrow.invoke(main, ["-w", str(wh), "sql", "SHOW DYNAMIC TABLES"]))
    assert "target_lag" in shown and "1 minute" in shown
    assert " ".join(shown.split()).find(query) > 0  # the query whole, wrapped over lines
    # a narrow result stays a table
    table = _ok(narrow.invoke(main, ["-w", str(wh), "sql", "SELECT * FROM totals"]))
    assert "┃ region" in table


def test_no_spark_line_reaches_the_terminal_unless_verbose(tmp_path: Path) -> None:
    """A real `changelake` process (its own JVM): stderr holds only changelake's lines."""
    wh = tmp_path / "wh"
    command = [sys.executable, "-m", "changelake.cli", "-w", str(wh), "sql"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    quiet = subprocess.run(
        [*command, "--format", "csv", "SELECT 41 + 1 AS answer"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "answer\n42\n"
    assert quiet.stderr == ""
    log = (wh / "_logs" / "spark.log").read_text()
    assert "log4j" in log  # what would have reached the terminal is in the warehouse's log

    loud = subprocess.run(
        [*command, "SELECT * FROM missing"], capture_output=True, text=True, env=env, timeout=300
    )
    assert loud.returncode == 1
    assert loud.stderr.splitlines() == [
        "error: Table, view or stream 'missing' does not exist. SHOW TABLES and SHOW STREAMS list"
        " what exists."
    ]
    verbose = subprocess.run(
        [*command[:-1], "--verbose", "sql", "SELECT 1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert verbose.returncode == 0, verbose.stderr
    assert "log4j" in verbose.stderr
