"""Commit throughput with the warehouse-wide commit order, against the code before it.

Four processes each append one row per commit to a table of their own, through the ingest
client (PyArrow writes the file, no JVM), for a fixed number of commits; throughput is all
commits over the time the slowest process took. The baseline is the same workload run by the
changelake before the commit order (git commit ``BEFORE``, unpacked from this repository's
history into a scratch directory), alternating with the current code, on a fresh catalog each
time: SQLite (inside the warehouse) and PostgreSQL (a server started for the run). The same
current-code run on SQLite with ``synchronous=normal`` gives the cost of ``synchronous=FULL``.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import textwrap
import time
import uuid
from contextlib import ExitStack
from io import BytesIO
from pathlib import Path

from bench.harness import Context, Result, median_of

NAME = "commit_throughput"
BEFORE = "84284c2"  # main before the commit order (issue 22)
PROCESSES = 4
COMMITS = 200  # per process at scale 1
TARGET = 0.8
REPO = Path(__file__).resolve().parents[1]

_SETUP = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from changelake.catalog import Catalog
    from changelake.catalog.requests import CommitRequest, CreateTable
    from changelake.clock import SystemClock
    from changelake.schema import Column, TableSchema
    catalog = Catalog(sys.argv[2])
    schema = TableSchema((Column(1, "id", "bigint"),))
    for name in sys.argv[3:]:
        request = [CommitRequest(name, "CREATE TABLE", (CreateTable(name, schema),))]
        try:
            catalog.commit(request, clock=SystemClock())
        except TypeError:  # before the commit order: the caller stamped the commit
            catalog.commit(request, now=time.time())
    """
)

_APPEND = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from changelake.ingest import Client
    warehouse, url, table, commits, start = sys.argv[2:7]
    with Client(warehouse, catalog=url, max_client_lag=3600, compact_after_files=None) as client:
        channel = client.open_channel(table, table=table)
        time.sleep(max(0.0, float(start) - time.time()))
        began = time.perf_counter()
        for i in range(int(commits)):
            channel.insert_rows([{"id": i}], end_offset_token=str(i))
            client.flush()
        print(time.perf_counter() - began)
    """
)


def _unpack_before(scratch: Path) -> Path:
    """``src/`` of commit BEFORE, from this repository's history."""
    target = scratch / f"changelake-{BEFORE}"
    if not (target / "src" / "changelake").exists():
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", BEFORE, "src"], check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(target, filter="data")
    return target / "src"


def _throughput(src: Path, warehouse: Path, url: str, commits: int) -> float:
    """Commits per second of PROCESSES appenders, each on its own table."""
    tables = [f"t{i}" for i in range(PROCESSES)]
    subprocess.run([sys.executable, "-c", _SETUP, str(src), url, *tables], check=True)
    start = time.time() + 2.0  # after every interpreter has started
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _APPEND, str(src), str(warehouse), url, t, str(commits)]
            + [str(start)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for t in tables
    ]
    took = []
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"an appender failed (exit {p.returncode})")
        took.append(float(out.strip()))
    return PROCESSES * commits / max(took)


def run(ctx: Context) -> Result:
    sys.path.insert(0, str(REPO / "tests"))
    from support.postgres import create_database, running_postgres

    commits = ctx.count(COMMITS)
    before, now = _unpack_before(ctx.scratch), REPO / "src"
    rates: dict[str, list[float]] = {}
    with ExitStack() as stack:
        server = stack.enter_context(running_postgres())

        def once(label: str, src: Path, kind: str) -> None:
            warehouse = ctx.scratch / f"wh-{uuid.uuid4().hex[:8]}"
            warehouse.mkdir()
            url = {
                "sqlite": f"sqlite:///{warehouse}/catalog.db",
                "sqlite_normal": f"sqlite:///{warehouse}/catalog.db?synchronous=normal",
                "postgresql": "",
            }[kind] or create_database(server, "b_" + uuid.uuid4().hex[:12])
            rates.setdefault(f"{label}_{kind}", []).append(
                _throughput(src, warehouse, url, commits)
            )

        for _ in range(max(1, ctx.repeat)):
            for kind in ("sqlite", "postgresql"):
                once("before", before, kind)
                once("now", now, kind)
            once("now", now, "sqlite_normal")
    med = {k: median_of(v) for k, v in rates.items()}
    ratios = {k: med[f"now_{k}"] / med[f"before_{k}"] for k in ("sqlite", "postgresql")}
    worst = min(ratios, key=ratios.__getitem__)
    full_cost = med["now_sqlite"] / med["now_sqlite_normal"]
    return Result(
        name=NAME,
        description=(
            f"{PROCESSES} processes appending 1 row per commit ({commits} commits each) to"
            " their own tables, through the ingest client"
        ),
        changelake_s=1.0 / med[f"now_{worst}"],
        baseline_s=1.0 / med[f"before_{worst}"],
        baseline=f"the same workload on changelake {BEFORE} (before the commit order)",
        ratio=ratios[worst],
        ratio_meaning=f"throughput now / before, the worse catalog ({worst})",
        target=f">= {TARGET}x on SQLite and PostgreSQL",
        met=all(r >= TARGET for r in ratios.values()),
        rows=PROCESSES * commits,
        notes=(
            f"commits/s before -> now: SQLite {med['before_sqlite']:.0f} ->"
            f" {med['now_sqlite']:.0f} ({ratios['sqlite']:.2f}x), PostgreSQL"
            f" {med['before_postgresql']:.0f} -> {med['now_postgresql']:.0f}"
            f" ({ratios['postgresql']:.2f}x); SQLite synchronous=NORMAL"
            f" {med['now_sqlite_normal']:.0f}/s: FULL (the default) keeps {full_cost:.2f}x of it"
        ),
        extra={
            **{f"{k}_commits_per_s": v for k, v in med.items()},
            "sqlite_full_over_normal": full_cost,
        },
    )
