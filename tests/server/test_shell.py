"""``changelake shell`` driven through a pseudo-terminal, against a service over real HTTP."""

from __future__ import annotations

import io
import os
import re
import sys
import time
from pathlib import Path

import pexpect
from test_sql_http import service  # noqa: F401 - the fixture

PROMPT = "changelake>"


def _spawn(url: str, warehouse: str, history: Path, columns: int = 100) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if k != "CHANGELAKE_SERVE_TOKEN"}
    env.update({"CHANGELAKE_HISTORY": str(history), "COLUMNS": str(columns), "TERM": "xterm"})
    env.update({"NO_COLOR": "1", "PROMPT_TOOLKIT_NO_CPR": "1"})
    child = pexpect.spawn(
        sys.executable,
        ["-m", "changelake.cli", "-w", warehouse, "--server", url, "shell"],
        env=env,
        encoding="utf-8",
        timeout=120,
        dimensions=(40, columns),
    )
    child.expect_exact(PROMPT)
    return child


def test_statements_span_lines_complete_time_and_survive_errors(service, session, tmp_path):  # noqa: F811
    http = service()
    history = tmp_path / "history"
    child = _spawn(http.base, session.warehouse.root, history)
    try:
        child.send("CREATE TABLE zebra_facts (id INT, s STRING)\r")  # no ';' yet: a second line
        child.expect_exact("...>")
        child.send(";\r")
        child.expect_exact("CREATE TABLE zebra_facts: version 0")
        child.expect_exact(PROMPT)
        child.send("INSERT INTO zebra_facts VALUES (1, 'a'), (2, 'b');\r")
        child.expect_exact("INSERT zebra_facts: version 1, 2 inserted")
        child.expect_exact(PROMPT)
        child.send("\\timing\r")
        child.expect_exact("Timing is on.")
        child.expect_exact(PROMPT)
        child.send("SELECT count(*) AS n FROM zeb\t")  # Tab completes the table's name
        time.sleep(0.5)
        child.send(";\r")
        child.expect(r"│ 2 +│")
        child.expect(r"Time: \d+ ms")
        child.expect_exact(PROMPT)
        child.send("BEGIN; INSERT INTO zebra_facts VALUES (3, 'c');\r")  # a transaction
        child.expect_exact("staged in the open transaction")
        child.expect_exact(PROMPT)
        child.send("ROLLBACK;\r")
        child.expect_exact("Rolled back")
        child.expect_exact(PROMPT)
        child.send("SELECT * FROM nope;\r")
        child.expect_exact("error: Table, view or stream 'nope' does not exist")
        child.expect_exact(PROMPT)
        child.send("\\q\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert "SELECT count(*) AS n FROM zebra_facts;" in history.read_text()


def test_ctrl_c_cancels_the_running_statement_and_keeps_the_shell(service, session, tmp_path):  # noqa: F811
    session.sql("CREATE TABLE big (id BIGINT)")
    http = service()
    child = _spawn(http.base, session.warehouse.root, tmp_path / "history")
    try:
        child.send("INSERT INTO big SELECT id FROM range(0, 100000000000);\r")
        time.sleep(3)  # its Spark job runs
        child.sendintr()
        child.expect_exact("error: INSERT was cancelled; nothing was committed.")
        child.expect_exact(PROMPT)
        child.send("SELECT 41 + 1 AS alive;\r")
        child.expect(r"│ 42 +│")
        child.expect_exact(PROMPT)
        child.sendintr()  # at the prompt: clears the line, keeps the shell
        child.expect_exact(PROMPT)
        # The prompt matched may be the interrupted one's last drawing, which can swallow a
        # Ctrl-D sent before the new prompt reads: at the new one, Ctrl-D ends the shell
        for _ in range(3):
            child.sendeof()
            if child.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=10) == 0:
                break
        else:
            raise AssertionError("Ctrl-D at the prompt did not end the shell")
    finally:
        child.close(force=True)
    assert session.sql("SELECT count(*) FROM big").first()[0] == 0
    assert session.catalog.table("big").current_version == 0


def test_the_shell_runs_its_own_spark_without_a_service(tmp_path):
    """No service runs the warehouse: the shell starts Spark (a real JVM), quietly."""
    env = {k: v for k, v in os.environ.items() if k != "CHANGELAKE_SERVE_TOKEN"}
    env.update(
        {
            "CHANGELAKE_HISTORY": str(tmp_path / "history"),
            "NO_COLOR": "1",
            "PROMPT_TOOLKIT_NO_CPR": "1",
            "CHANGELAKE_SPARK_MASTER": "local[2]",
        }
    )
    child = pexpect.spawn(
        sys.executable,
        ["-m", "changelake.cli", "-w", str(tmp_path / "wh"), "shell"],
        env=env,
        encoding="utf-8",
        timeout=180,
        dimensions=(40, 100),
    )
    seen = io.StringIO()
    child.logfile_read = seen
    try:
        child.expect_exact("(this process's Spark)")
        child.expect_exact(PROMPT)
        child.send("SELECT count(*) AS n FROM range(0, 1000000000000);\r")
        time.sleep(5)
        child.sendintr()
        child.expect_exact("error: SELECT was cancelled; nothing was committed.")
        child.expect_exact(PROMPT)
        child.send("SELECT 6 * 7 AS answer;\r")
        child.expect(r"│ 42 +│")
        child.expect_exact(PROMPT)
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    # Spark's own lines went to the warehouse's log, not to the terminal
    assert "log4j" not in seen.getvalue() and " WARN " not in seen.getvalue()
    assert "log4j" in (tmp_path / "wh" / "_logs" / "spark.log").read_text()


def test_a_result_wider_than_80_columns_prints_as_records(service, session, tmp_path):  # noqa: F811
    session.sql("CREATE TABLE sales (region STRING, amount INT)")
    session.sql(
        "CREATE DYNAMIC TABLE totals TARGET_LAG = '1 minute'"
        " AS SELECT region, sum(amount) AS total FROM sales GROUP BY region"
    )
    http = service()
    child = _spawn(http.base, session.warehouse.root, tmp_path / "history", columns=80)
    try:
        child.send("SHOW DYNAMIC TABLES;\r")
        child.expect_exact("record 1")
        child.expect_exact(PROMPT)
        shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before)  # without the styles
        assert re.search(r"target_lag +1 minute", shown), shown
        assert re.search(r"scheduling_state +ACTIVE", shown), shown
        assert "…" not in shown
        assert all(len(line.rstrip()) <= 80 for line in shown.splitlines()), shown
    finally:
        child.sendeof()
        child.expect(pexpect.EOF)
