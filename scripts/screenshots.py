"""Screenshots of the dashboard for the README: a small pipeline in a fresh warehouse, served by
`changelake serve`, photographed by headless Chromium (Debian's chromium and chromium-driver).

Usage: .venv/bin/python scripts/screenshots.py [OUT_DIR]   (default: docs/images)
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver

import changelake

PIPELINE = [
    "CREATE TABLE orders (id INT, cust INT, amount INT)",
    "CREATE TABLE customers (cust INT, name STRING)",
    "INSERT INTO orders VALUES (1, 1, 10), (2, 2, 3), (3, 2, 50)",
    "INSERT INTO customers VALUES (1, 'Maude'), (2, 'Walter')",
    "CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 5",
    "CREATE DYNAMIC TABLE per_customer TARGET_LAG = '1 minute' AS SELECT o.cust, name,"
    " sum(amount) AS total FROM big_orders o JOIN customers c ON o.cust = c.cust"
    " GROUP BY o.cust, name",
    "CREATE STREAM orders_stream ON TABLE orders",
    "CREATE TABLE orders_archive (id INT, cust INT, amount INT)",
    "CREATE TASK archive_orders SCHEDULE = '1 minute' AS INSERT INTO orders_archive"
    " SELECT id, cust, amount FROM orders_stream WHERE METADATA$ACTION = 'INSERT'",
]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    warehouse = Path(tempfile.mkdtemp(prefix="changelake-shots-")) / "wh"
    session = changelake.connect(str(warehouse))
    for statement in PIPELINE:
        session.sql(statement)
    for i in range(4):
        session.sql(f"INSERT INTO orders VALUES ({10 + i}, {1 + i % 2}, {20 * i + 7})")
        session.sql("ALTER DYNAMIC TABLE per_customer REFRESH")
    session.close()
    serve = subprocess.Popen(
        [sys.executable, "-m", "changelake.cli", "serve", str(warehouse), "--port", "0",
         "--no-scheduler"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        announced = warehouse / "_serve.json"
        deadline = time.monotonic() + 120
        while not announced.exists():
            if serve.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("changelake serve did not start")
            time.sleep(0.1)
        url = json.loads(announced.read_text())["url"]
        options = webdriver.ChromeOptions()
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
            options.add_argument(flag)
        options.binary_location = shutil.which("chromium") or "chromium"
        driver = webdriver.Chrome(
            options=options,
            service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")),
        )
        try:
            driver.set_window_size(1300, 1100)
            for page, name in (
                ("/", "dashboard.png"),
                ("/ui/dynamic-tables/per_customer", "dashboard-dynamic-table.png"),
            ):
                driver.get(url + page)
                time.sleep(2)  # the chart draws
                driver.save_screenshot(str(out / name))
                print(f"wrote {out / name}")
        finally:
            driver.quit()
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=120)
        shutil.rmtree(warehouse.parent, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images"))
