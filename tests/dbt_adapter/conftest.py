"""dbt on changelake: dbt's own adapter tests (dbt-tests-adapter) and ours, each run in both
connection modes: in this process (``warehouse``, on the suite's Spark) and through one
``changelake serve`` the tests start (``server``: a real service process on 127.0.0.1)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbt.tests.fixtures.project import *  # noqa: F403  (dbt's fixtures: project, unique_schema...)

TOKEN = "dbt-tests-token"
MODES = ("in-process", "server")


@pytest.fixture(scope="session")
def dbt_warehouse(tmp_path_factory, spark) -> str:
    """The warehouse the in-process mode writes (each test class in a schema of its own)."""
    return str(tmp_path_factory.mktemp("dbt") / "wh")


@pytest.fixture(scope="session")
def server_profile(tmp_path_factory) -> Iterator[dict]:
    """A ``changelake serve`` process on a warehouse of its own; the profile that reaches it."""
    root = tmp_path_factory.mktemp("dbt-serve")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(root / "serve.log", "w")  # noqa: SIM115  (closed below)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "changelake.cli",
            "serve",
            str(root / "wh"),
            "--port",
            str(port),
            "--token",
            TOKEN,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "CHANGELAKE_SPARK_MASTER": "local[2]"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, process, root / "serve.log")
        yield {"type": "changelake", "server": url, "token": TOKEN, "threads": 2}
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _wait_until_up(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"changelake serve exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/v1/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"changelake serve did not start in 180 s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="class")
def logs_dir(tmp_path_factory, prefix) -> str:
    """dbt's logs of a test class: under the run's temporary directory, not the repository."""
    return str(tmp_path_factory.mktemp("dbt-logs") / prefix)


@pytest.fixture(scope="class", params=MODES)
def dbt_profile_target(request) -> dict:
    """The profile of dbt's test projects: every test class runs once per connection mode."""
    if request.param == "server":
        return request.getfixturevalue("server_profile")
    return {
        "type": "changelake",
        "warehouse": request.getfixturevalue("dbt_warehouse"),
        "threads": 2,
    }


# The server mode sends the SQL the in-process mode runs: the default run takes it through the
# basic classes that cover every statement kind (models, seeds, snapshots, incremental runs,
# debug), one incremental strategy class, the dynamic tables and test_models; the other classes
# run in it with the nightly set (they send the same statements over the same transport).
_SERVER_BY_DEFAULT = (
    "TestSimpleMaterializations",
    "TestIncremental",
    "TestSnapshotTimestamp",
    "TestValidateConnection",
    "TestIncrementalUniqueKeyMerge",
)
_SERVER_NIGHTLY_MODULES = ("test_adapter_basic", "test_adapter_incremental")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if (
            callspec is not None
            and callspec.params.get("dbt_profile_target") == "server"
            and item.module is not None
            and item.module.__name__.rsplit(".", 1)[-1] in _SERVER_NIGHTLY_MODULES
            and item.cls is not None
            and item.cls.__name__ not in _SERVER_BY_DEFAULT
        ):
            item.add_marker(pytest.mark.nightly)


@pytest.fixture
def fresh_models(project, models) -> None:
    """The class's models as its fixture gives them: a test that rewrites a model does not
    leave it rewritten for the other connection mode (the project directory is the class's)."""
    directory = Path(project.project_root) / "models"
    for path in directory.glob("*.sql"):
        path.unlink()
    for name, text in models.items():
        (directory / name).write_text(text, encoding="utf-8")
