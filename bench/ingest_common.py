"""What the streaming-ingest benchmarks (issue 9) share: the 4-column table, its rows as Arrow
batches, Python dicts and JSON lines, and a clock of this Python process only.

The ingest SDK is a client: it runs in this Python process and starts no Spark job, so its CPU time
is ``time.process_time()`` (every thread of the process, the background flusher included), not the
JVM's. The harness's CpuClock adds the idle Spark JVM's CPU; these benchmarks leave it out.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness import Context, Sample

COLUMNS = "id BIGINT, name STRING, amount DOUBLE, ts TIMESTAMP"
EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds
UTC = dt.timezone.utc
_EPOCH = dt.datetime(2026, 1, 1, tzinfo=UTC)


class ProcessClock:
    """Wall time and CPU time of this Python process (all its threads) for one action; with
    ``pids``, the CPU time of those processes (e.g. a server started for the benchmark) too."""

    def __init__(self, pids: tuple[int, ...] = ()):
        self._pids = pids
        self._tick = os.sysconf("SC_CLK_TCK")

    def other_cpu(self) -> float:
        total = 0.0
        for pid in self._pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / self._tick
        return total

    def measure(self, action: Callable[[], object]) -> Sample:
        other0, cpu0, wall0 = self.other_cpu(), time.process_time(), time.perf_counter()
        action()
        wall = time.perf_counter() - wall0
        return Sample(wall, time.process_time() - cpu0 + self.other_cpu() - other0)


def python_only(ctx: Context, pids: tuple[int, ...] = ()) -> Context:
    """``ctx`` timing with a ProcessClock (so harness.alternate leaves the JVM out)."""
    return replace(ctx, clock=ProcessClock(pids))  # type: ignore[arg-type]


def create_table(ctx: Context, name: str) -> str:
    """(Re)create ``name`` with the benchmark's 4 columns through Spark, outside any timing."""
    ctx.session.sql(f"CREATE OR REPLACE TABLE {name} ({COLUMNS})")
    return name


def arrow_batch(lo: int, n: int) -> pa.RecordBatch:
    """Rows ``lo .. lo + n - 1`` as an Arrow batch: id, name, amount, ts (UTC)."""
    ids = np.arange(lo, lo + n, dtype=np.int64)
    names = np.char.add("customer-", (ids % 100_000).astype(str))
    return pa.record_batch(
        {
            "id": pa.array(ids),
            "name": pa.array(names, pa.string()),
            "amount": pa.array(ids * 0.25 + 0.01),
            "ts": pa.array(EPOCH_US + ids * 1_000, pa.timestamp("us", tz="UTC")),
        }
    )


def dict_rows(lo: int, n: int) -> list[dict[str, Any]]:
    """The same rows as Python dicts, timestamps as aware datetimes."""
    step = dt.timedelta(milliseconds=1)
    return [
        {
            "id": i,
            "name": f"customer-{i % 100_000}",
            "amount": i * 0.25 + 0.01,
            "ts": _EPOCH + i * step,
        }
        for i in range(lo, lo + n)
    ]


def json_lines(rows: list[dict[str, Any]]) -> bytes:
    """``rows`` as a JSON-lines body, timestamps in ISO 8601 with their offset."""
    return "".join(json.dumps({**row, "ts": row["ts"].isoformat()}) + "\n" for row in rows).encode()


def rate(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("inf")


def per_second(value: float) -> str:
    """``1234567.0`` -> ``1.23M``; ``123456.0`` -> ``123k``."""
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    return f"{value / 1e3:.0f}k"
