"""The web dashboard of ``changelake serve``: its pages over real HTTP, and in headless Chromium."""

from __future__ import annotations

import re
import shutil
import time
import urllib.request

import pytest
from fastapi import FastAPI
from test_http import Http, _serve

from changelake.ingest import Client
from changelake.runtime.env import Env
from changelake.server import create_app
from changelake.server.dashboard import dashboard_routes
from changelake.sql.dashboard import SECTIONS, DashboardData


@pytest.fixture
def pipeline(session) -> None:
    """Sources -> a view -> a dynamic table (refreshed twice) -> a task, and a stream."""
    session.sql("CREATE TABLE orders (id INT, cust INT, amount INT)")
    session.sql("CREATE TABLE customers (cust INT, name STRING)")
    session.sql("INSERT INTO orders VALUES (1, 1, 10), (2, 2, 3)")
    session.sql("INSERT INTO customers VALUES (1, 'Maude'), (2, 'Walter')")
    session.sql("CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 5")
    session.sql(
        "CREATE DYNAMIC TABLE per_cust TARGET_LAG = '1 minute' AS SELECT o.cust, name,"
        " sum(amount) AS total FROM big_orders o JOIN customers c ON o.cust = c.cust"
        " GROUP BY o.cust, name"
    )
    session.sql("INSERT INTO orders VALUES (3, 2, 50)")
    session.sql("ALTER DYNAMIC TABLE per_cust REFRESH")
    session.sql("CREATE STREAM orders_s ON TABLE orders")
    session.sql(
        "CREATE TASK archive SCHEDULE = '1 minute' AS INSERT INTO customers"
        " SELECT cust, 'x' FROM orders_s"
    )


@pytest.fixture
def dashboard(session):
    started = []

    def start(*, token: str | None = None) -> Http:
        def env() -> Env:
            s = session
            return Env.of(s.catalog, s.clock, s.spark, s.warehouse)

        client = Client(session.warehouse.root, max_client_lag=60.0)
        app = create_app(client, token=token, dashboard=DashboardData(env))
        serving = _serve(app)
        started.append(serving)
        return Http(next(serving), token)

    yield start
    for serving in started:
        next(serving, None)


class _Stay(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a redirect is answered, not followed
        return None


_OPENER = urllib.request.build_opener(_Stay)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=60) as answer:
            return answer.status, answer.read().decode(), dict(answer.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def test_names_cannot_inject_into_the_graph_or_the_page(dashboard, session):
    hostile = 'x" [URL="javascript:alert(1)"] "y<b>'
    session.sql(f"CREATE TABLE `{hostile}` (id INT)")
    session.sql(f"CREATE VIEW v AS SELECT * FROM `{hostile}`")
    page = _get(dashboard().base + "/")[1]
    assert 'href="javascript' not in page and "<b>" not in page  # shown as text only
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert len(re.findall(r'class="node"', svg)) == 2 and len(re.findall(r'class="edge"', svg)) == 1
    assert "x&quot; [url=&quot;javascript:alert(1)&quot;] &quot;y&lt;b&gt;" in svg.lower()


def test_names_with_markup_are_text_on_every_page(dashboard, session):
    table, dynamic = '<script>alert(1)</script>"', '<img src=x onerror="alert(2)">'
    session.sql(f"CREATE TABLE `{table}` (id INT)")
    session.sql(
        f"CREATE DYNAMIC TABLE `{dynamic}` TARGET_LAG = '1 minute' AS SELECT * FROM `{table}`"
    )
    base = dashboard().base
    overview = _get(base + "/")[1]
    link = re.search(r'<a href="(/ui/dynamic-tables/[^"]+)">', overview)
    assert link is not None and "%3Cimg%20src%3Dx" in link.group(1)  # percent-encoded
    table_page = "/ui/tables/" + link.group(1).rpartition("/")[2]
    answers = [_get(base + path) for path in (link.group(1), table_page)]
    assert [status for status, _, _ in answers] == [200, 200]
    pages = {"/": overview, "dynamic table": answers[0][1], "table": answers[1][1]}
    pages["fragment"] = _get(base + link.group(1) + "?fragment=1")[1]
    for page in pages.values():
        assert "<script>alert" not in page and "<img" not in page
        assert "&lt;img src=x onerror=" in page  # the name, as text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in overview.split("<h2>Tables</h2>")[1]
    assert "SELECT * FROM `&lt;script&gt;alert(1)&lt;/script&gt;" in pages["fragment"]


class _Figures:
    """A dashboard source of fixed figures (no Spark): a table named with markup, read by a view."""

    name = "<script>alert(1)</script>"

    def overview(self) -> dict:
        sections = {key: [] for key in SECTIONS} | {"task_runs": []}
        return sections | {
            "tables": [{"name": self.name, "version": 0, "retention_days": 1}],
            "nodes": [
                {"name": self.name, "kind": "table", "row": {}},
                {"name": "v", "kind": "view", "row": {}},
            ],
            "edges": [{"from": self.name, "to": "v"}],
        }


def test_without_graphviz_the_overview_lists_the_edges_as_text(monkeypatch):
    monkeypatch.setenv("PATH", "")  # no dot
    app = FastAPI()
    app.include_router(dashboard_routes(_Figures(), None, "pipeline"))
    serving = _serve(app)
    try:
        page = _get(next(serving) + "/")[1]
    finally:
        next(serving, None)
    assert "Install Graphviz" in page and "<svg" not in page and "<script>alert" not in page
    assert "<li>&lt;script&gt;alert(1)&lt;/script&gt; → v</li>" in page
    assert '<a href="/ui/tables/%3Cscript%3Ealert%281%29%3C%2Fscript%3E">' in page


def test_the_overview_lists_every_object_and_draws_the_pipeline(pipeline, dashboard):
    http = dashboard()
    status, page, headers = _get(http.base + "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    for name in ("orders", "customers", "big_orders", "per_cust", "orders_s", "archive"):
        assert f">{name}<" in page or f">{name}</a>" in page or f"node:{name}" in page, name
    svg = page[page.index("<svg") : page.index("</svg>")]
    nodes = set(re.findall(r'id="node:([a-z_]+)"', svg))
    assert nodes == {"orders", "customers", "big_orders", "per_cust", "orders_s", "archive"}
    edges = set(re.findall(r'id="edge:([a-z_]+:[a-z_]+)"', svg))
    assert edges == {
        "orders:big_orders",
        "big_orders:per_cust",
        "customers:per_cust",
        "orders:orders_s",
        "orders_s:archive",
        "archive:customers",  # what the task writes
    }
    assert "target 1 minute" in svg  # the dynamic table's lag against its target
    assert 'href="/ui/tables/orders"' in page and 'xlink:href="/ui/tables/orders"' in svg
    assert "No task runs." in page  # the task is suspended
    fragment = _get(http.base + "/?fragment=1")[1]
    assert fragment.startswith("<section>") and "<html" not in fragment


def test_a_dynamic_table_page_has_its_lag_chart_and_refresh_history(pipeline, dashboard):
    http = dashboard()
    status, page, _ = _get(http.base + "/ui/dynamic-tables/per_cust")
    assert status == 200
    assert "within target" in page
    history = page[page.index("Refresh history") :]
    assert history.count("<tr>") == 1 + 2  # the header, the creation's FULL and the refresh
    assert "INCREMENTAL" in history and "FULL" in history
    chart = re.search(r'data-chart="lag-chart">(.*?)</script>', page, re.S)
    assert chart is not None and '"target lag"' in chart.group(1)
    assert _get(http.base + "/ui/dynamic-tables/nope")[0] == 404
    status, script, headers = _get(http.base + "/assets/plotly.min.js")
    assert status == 200 and "plotly" in script[:2000].lower()


def test_a_stream_shows_its_pending_changes(pipeline, dashboard, session):
    http = dashboard()
    streams = _get(http.base + "/")[1].split("<h2>Streams</h2>")[1].split("</table>")[0]
    assert re.search(
        r"<td>orders_s</td><td>orders</td><td>DEFAULT</td><td>\d+</td><td>0</td>", streams
    )
    session.sql("INSERT INTO orders VALUES (7, 1, 1), (8, 1, 2)")
    session.sql("UPDATE orders SET amount = 0 WHERE id = 7")
    streams = _get(http.base + "/")[1].split("<h2>Streams</h2>")[1].split("</table>")[0]
    assert re.search(
        r"<td>orders_s</td><td>orders</td><td>DEFAULT</td><td>\d+</td><td>3</td>", streams
    )


def test_a_table_page_has_its_versions_and_storage(pipeline, dashboard, session):
    session.sql("DELETE FROM orders WHERE id = 2")
    http = dashboard()
    status, page, _ = _get(http.base + "/ui/tables/orders")
    assert status == 200
    versions = page.split("<h2>Versions</h2>")[1]
    assert versions.count("<tr>") == 1 + 4  # CREATE, two INSERTs, the DELETE (newest first)
    assert versions.index("DELETE") < versions.index("CREATE")
    storage = page.split("<h2>Storage now</h2>")[1].split("</table>")[0]
    cells = re.findall(r"<td>([^<]*)</td>", storage)
    header = re.findall(r"<th>([^<]*)</th>", storage)
    found = dict(zip(header, cells, strict=True))
    assert (found["live_rows"], found["deleted_rows"], found["dv_files"]) == ("2", "1", "1")
    assert int(found["dv_bytes"]) > 0 and found["before_images"] == "True"
    assert 'data-chart="versions-chart"' in page
    assert _get(http.base + "/ui/tables/nope")[0] == 404


def test_ingest_channels_show_their_rows_and_rate(dashboard, session):
    session.sql("CREATE TABLE events (id BIGINT)")
    http = dashboard()
    assert http.call("PUT", "/v1/tables/events/channels/web-0", json_body={}).status == 200
    rows = b"".join(b'{"id": %d}\n' % i for i in range(30))
    sent = http.call(
        "POST",
        "/v1/tables/events/channels/web-0/rows?end_offset_token=29",
        data=rows,
        content_type="application/x-ndjson",
    )
    assert sent.status == 200, sent.body
    assert http.call("POST", "/v1/flush").status == 200
    page = _get(http.base + "/")[1]
    channels = page.split("<h2>Ingest channels</h2>")[1].split("</table>")[0]
    header = re.findall(r"<th>([^<]*)</th>", channels)
    found = dict(zip(header, re.findall(r"<td>([^<]*)</td>", channels), strict=True))
    assert (found["name"], found["offset_token"], found["rows_inserted"]) == ("web-0", "29", "30")
    assert found["rows_buffered"] == "0" and float(found["rows_per_second"]) > 0
    assert found["last_commit_at"].startswith("20")


def test_the_dashboard_keeps_the_token_rule(pipeline, dashboard):
    http = dashboard(token="s3cret")
    assert _get(http.base + "/")[0] == 401
    status, _, headers = _get(http.base + "/ui/tables/orders?token=s3cret&fragment=1")
    assert status == 303 and "changelake_token=s3cret" in headers["set-cookie"]
    assert headers["location"].endswith("/ui/tables/orders?fragment=1")  # the token is not kept
    assert _get(http.base + "/", {"Cookie": "changelake_token=s3cret"})[0] == 200
    assert _get(http.base + "/", {"Authorization": "Bearer s3cret"})[0] == 200


def test_every_page_loads_in_a_browser_without_console_errors(pipeline, dashboard, session):
    if shutil.which("chromedriver") is None or shutil.which("chromium") is None:
        pytest.skip("headless Chromium is not installed (scripts/bootstrap.sh installs it)")
    from selenium import webdriver
    from selenium.webdriver.common.by import By

    http = dashboard()
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.set_window_size(1400, 1000)
        driver.get(http.base + "/")
        assert driver.find_element(By.ID, "node:per_cust").is_displayed()
        assert len(driver.find_elements(By.CSS_SELECTOR, "#graph g.edge")) == 6
        assert "Maude" not in driver.page_source  # rows are not shown, objects are
        assert "orders_s" in driver.find_element(By.TAG_NAME, "main").text
        driver.find_element(By.ID, "node:per_cust").find_element(By.TAG_NAME, "a").click()
        deadline = time.monotonic() + 30
        while not driver.find_elements(By.CSS_SELECTOR, "#lag-chart .main-svg"):
            assert time.monotonic() < deadline, "the lag chart was not drawn"
            time.sleep(0.2)
        assert "Refresh history" in driver.find_element(By.TAG_NAME, "main").text
        # the page updates itself: a refresh made while it is open appears
        session.sql("INSERT INTO orders VALUES (4, 1, 70)")
        session.sql("ALTER DYNAMIC TABLE per_cust REFRESH")
        history = "//h2[text()='Refresh history']/following::tbody[1]/tr"
        deadline = time.monotonic() + 30
        while len(driver.find_elements(By.XPATH, history)) != 3:
            assert time.monotonic() < deadline, "the page did not update"
            time.sleep(0.5)
        assert "updated" in driver.find_element(By.ID, "updated").text
        driver.get(http.base + "/ui/tables/orders")
        deadline = time.monotonic() + 30
        while not driver.find_elements(By.CSS_SELECTOR, "#versions-chart .main-svg"):
            assert time.monotonic() < deadline, "the versions chart was not drawn"
            time.sleep(0.2)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
    finally:
        driver.quit()
