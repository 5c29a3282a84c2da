"""The demo (``scripts/demo.sh``): a fresh warehouse, DML, time travel, history, CHANGES and a
STREAM, then a small pipeline (an ingest channel, dynamic tables, a triggered task), printed as
tables; ``--serve`` then serves the warehouse (scheduler, dashboard).

Run it with ``python -m changelake.demo [WAREHOUSE]``; the warehouse (default ``./demo-warehouse``)
is removed first, so every run starts from nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame
from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

import changelake
from changelake.errors import ChangelakeError
from changelake.ingest import Client
from changelake.spark.setup import default_spark

DEFAULT_WAREHOUSE = "demo-warehouse"


class Demo:
    """Runs statements against one session and prints what each did."""

    def __init__(self, session: changelake.Session, console: Console):
        self.session = session
        self.console = console

    def section(self, title: str) -> None:
        self.console.print(Rule(Text(title, style="bold")))

    def run(self, statement: str) -> DataFrame:
        """Run a write or DDL statement and print its one-line outcome."""
        self.console.print(Text(f"> {statement}", style="cyan"))
        df = self.session.sql(statement)
        result = df.first()
        if result is not None and "statement_id" in df.columns:
            counts = ", ".join(
                f"{getattr(result, f'rows_{kind}')} {kind}"
                for kind in ("inserted", "updated", "deleted")
                if getattr(result, f"rows_{kind}")
            )
            version = "" if result.version is None else f"version {result.version}"
            done = "; ".join(part for part in (version, counts, result.message) if part)
            self.console.print(Text(f"  {result.operation}: {done}", style="dim"))
        return df

    def show(
        self, statement: str, *, columns: Sequence[str] = (), limit: int | None = None
    ) -> list:
        """Run a query and print its rows (only ``columns`` and ``limit`` rows, if given)."""
        self.console.print(Text(f"> {statement}", style="cyan"))
        df = self.session.sql(statement)
        if columns:
            df = df.select(*columns)
        rows = df.limit(limit).collect() if limit is not None else df.collect()
        self.console.print(_table(df.columns, rows))
        return rows


def _table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> Table:
    table = Table()
    for name in columns:
        table.add_column(Text(name), overflow="fold")
    for row in rows:
        table.add_row(*(Text("NULL", style="dim") if v is None else Text(str(v)) for v in row))
    return table


def tables_and_time_travel(demo: Demo) -> None:
    demo.section("A table and its versions")
    demo.run("CREATE TABLE people (id INT, name STRING)")
    demo.run("INSERT INTO people VALUES (1, 'Jeff'), (2, 'Donny')")
    demo.run("INSERT INTO people VALUES (3, 'Walter'), (4, 'Maud'), (5, 'Uli')")
    demo.run("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    demo.run("DELETE FROM people WHERE id IN (2, 5)")
    demo.show("SELECT * FROM people ORDER BY id")

    demo.section("Time travel")
    demo.show("SELECT * FROM people AT (VERSION => 1) ORDER BY id")
    demo.show("SELECT * FROM people BEFORE (VERSION => 4) ORDER BY id")

    demo.section("History")
    demo.show(
        "DESCRIBE HISTORY people",
        columns=(
            "version",
            "operation",
            "rows_inserted",
            "rows_updated",
            "rows_deleted",
            "files_added",
            "files_removed",
        ),
    )


def changes_and_streams(demo: Demo) -> None:
    """CHANGES queries and STREAM objects over the table built above."""
    demo.section("What changed since version 1 (minimum delta, paired by row identity)")
    demo.show(
        "SELECT * FROM people CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)"
        " ORDER BY METADATA$ROW_ID, METADATA$ACTION"
    )
    demo.section("Only what was inserted (append-only), and the full per-version history (redo)")
    demo.show("SELECT * FROM people CHANGES (INFORMATION => APPEND_ONLY) AT (VERSION => 1)")
    demo.show(
        "SELECT id, name, METADATA$ACTION, METADATA$ISUPDATE, METADATA$COMMIT_VERSION"
        " FROM people CHANGES (INFORMATION => REDO) AT (VERSION => 1)"
    )
    demo.show(
        "EXPLAIN SELECT * FROM people CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)", limit=1
    )

    demo.section("A stream, consumed exactly once by a DML statement")
    demo.run("CREATE STREAM people_stream ON TABLE people")
    demo.run("CREATE TABLE people_log (id INT, name STRING, action STRING, is_update BOOLEAN)")
    demo.run("UPDATE people SET name = 'Maude' WHERE id = 4")
    demo.run("INSERT INTO people VALUES (6, 'Bunny')")
    demo.show("SELECT SYSTEM$STREAM_HAS_DATA('people_stream') AS has_data")
    demo.run(
        "INSERT INTO people_log SELECT id, name, METADATA$ACTION, METADATA$ISUPDATE"
        " FROM people_stream"
    )
    demo.show("SELECT * FROM people_log ORDER BY id, action")
    demo.show("SELECT SYSTEM$STREAM_HAS_DATA('people_stream') AS has_data")
    demo.show("SHOW STREAMS", columns=("name", "table_name", "mode", "frontier_version", "stale"))


def pipeline(demo: Demo) -> None:
    """What changelake is for: rows streamed in through a channel, dynamic tables that keep a
    join and a GROUP BY up to date incrementally, a stream and a task that runs when it has
    data."""
    s = demo.session
    demo.section("A pipeline: ingest -> table -> dynamic tables, a stream and a triggered task")
    demo.run("CREATE TABLE regions (region_id INT, region STRING)")
    demo.run("INSERT INTO regions VALUES (1, 'north'), (2, 'south')")
    demo.run("CREATE TABLE orders (order_id INT, region_id INT, amount DOUBLE)")
    with Client(s.warehouse.root, max_client_lag=0.2) as client:
        channel = client.open_channel("shop-0", table="orders")
        demo.console.print(
            Text("> channel shop-0: insert_rows(3 rows, offsets 1..3)", style="cyan")
        )
        rows = [{"order_id": i, "region_id": 1 + i % 2, "amount": 10.0 * i} for i in (1, 2, 3)]
        channel.insert_rows(rows, start_offset_token="1", end_offset_token="3")
        channel.wait_for_commit("3", timeout=60)
        demo.console.print(Text("  committed through offset token 3", style="dim"))
    demo.run(
        "CREATE DYNAMIC TABLE order_regions TARGET_LAG = DOWNSTREAM AS SELECT o.order_id,"
        " r.region, o.amount FROM orders o JOIN regions r ON o.region_id = r.region_id"
    )
    demo.run(
        "CREATE DYNAMIC TABLE revenue TARGET_LAG = '1 minute' AS SELECT region,"
        " count(*) AS orders, sum(amount) AS revenue FROM order_regions GROUP BY region"
    )
    demo.run("CREATE STREAM big_orders ON TABLE orders")
    demo.run("CREATE TABLE alerts (order_id INT, amount DOUBLE)")
    demo.run(
        "CREATE TASK alert WHEN SYSTEM$STREAM_HAS_DATA('big_orders') AS INSERT INTO alerts"
        " SELECT order_id, amount FROM big_orders WHERE METADATA$ACTION = 'INSERT'"
        " AND amount > 100"
    )
    demo.run("ALTER TASK alert RESUME")  # changelake serve runs it when the stream has data
    demo.run("INSERT INTO orders VALUES (4, 2, 250.0), (5, 1, 5.0)")
    demo.run("UPDATE orders SET amount = 15.0 WHERE order_id = 1")
    demo.run("ALTER DYNAMIC TABLE revenue REFRESH")
    demo.show("SELECT * FROM revenue ORDER BY region")
    demo.show(
        "SELECT name, refresh_action, refresh_trigger, state FROM"
        " TABLE(DYNAMIC_TABLE_REFRESH_HISTORY()) ORDER BY refresh_start_time"
    )
    demo.show("EXECUTE TASK alert", columns=("name", "state"))
    demo.show("SELECT * FROM alerts")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m changelake.demo", description=__doc__)
    parser.add_argument("warehouse", nargs="?", default=DEFAULT_WAREHOUSE)
    parser.add_argument(
        "--serve",
        action="store_true",
        help="then run changelake serve on the warehouse: its scheduler and dashboard",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show Spark's own output (else in _logs/spark.log)"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    warehouse = Path(args.warehouse)
    console = Console()
    shutil.rmtree(warehouse, ignore_errors=True)
    try:
        with console.status("Starting Spark…"):
            log = None if args.verbose else str(warehouse.resolve() / "_logs" / "spark.log")
            session = changelake.connect(str(warehouse), spark=default_spark(log=log))
        try:
            demo = Demo(session, console)
            tables_and_time_travel(demo)
            changes_and_streams(demo)
            pipeline(demo)
        finally:
            session.close()
    except ChangelakeError as e:
        console.print(Text(f"error: {e}", style="red"))
        return 1
    console.print(Text(f"Done. The warehouse is in {warehouse.resolve()}.", style="green"))
    serve = [sys.executable, "-m", "changelake.cli", "serve", str(warehouse)]
    if not args.serve:
        console.print(
            f"Keep the pipeline fresh and watch it: changelake serve {warehouse}"
            " (or scripts/demo.sh --serve), then open http://127.0.0.1:8787"
        )
        return 0
    console.print("Serving the warehouse: the dashboard is at http://127.0.0.1:8787 (Ctrl-C ends)")
    os.execv(sys.executable, serve)


if __name__ == "__main__":
    sys.exit(main())
