"""An ingest producer process for the crash, concurrency and fencing tests.

``python ingest_worker.py WAREHOUSE CATALOG TABLE CHANNEL TOTAL [--batch N] [--kill-at POINT:K]
[--pause-after-buffer] [--lag S]``

Opens CHANNEL on TABLE (CATALOG is a catalog URL, or ``-`` for the warehouse's SQLite one), reads
its committed offset token (the last id committed, or none), and sends the ids after it up to
TOTAL - 1 in batches, each batch's end offset token being its last id; then closes the client.
Prints ``RESUMED <token>`` at start and ``DONE`` at the end.

``--kill-at POINT:K`` makes the process SIGKILL itself at the K-th time it reaches POINT:
``write`` (before a flush writes a file), ``commit`` (files written, before the catalog commit),
``committed`` (after the commit, before the client learns of it). ``--pause-after-buffer``
buffers one batch, prints ``BUFFERED`` and waits for a line on stdin before flushing (the zombie
test stops the process there and reopens the channel elsewhere); it prints ``FENCED <message>``
if the flush is refused.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time

from changelake.catalog import Catalog
from changelake.errors import ChannelFencedError
from changelake.ingest import Client
from changelake.ingest import flush as flush_module


def _kill_at(point: str, k: int) -> None:
    calls = {"n": 0}

    def due() -> None:
        calls["n"] += 1
        if calls["n"] == k:
            os.kill(os.getpid(), signal.SIGKILL)

    if point == "write":
        real_write = flush_module.write_file

        def write_file(*args, **kwargs):
            due()
            return real_write(*args, **kwargs)

        flush_module.write_file = write_file
    else:
        real_commit = Catalog.commit

        def commit(self, requests, *, clock):
            ingest = any(r.operation == "INGEST" for r in requests)
            if ingest and point == "commit":
                due()
            result = real_commit(self, requests, clock=clock)
            if ingest and point == "committed":
                due()
            return result

        Catalog.commit = commit


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("warehouse", "catalog", "table", "channel"):
        parser.add_argument(name)
    parser.add_argument("total", type=int)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--kill-at")
    parser.add_argument("--pause-after-buffer", action="store_true")
    parser.add_argument("--lag", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.kill_at:
        point, k = args.kill_at.split(":")
        _kill_at(point, int(k))
    rng = random.Random(args.seed)
    catalog = None if args.catalog == "-" else args.catalog
    with Client(args.warehouse, catalog=catalog, max_client_lag=args.lag) as client:
        channel = client.open_channel(args.channel, table=args.table, on_error="abort")
        token = channel.latest_committed_offset_token()
        print(f"RESUMED {token}", flush=True)
        if args.pause_after_buffer:
            channel.insert_rows([{"id": -1, "producer": args.channel}], end_offset_token="paused")
            print("BUFFERED", flush=True)
            sys.stdin.readline()
            try:
                client.flush()
            except ChannelFencedError as e:
                print(f"FENCED {e}", flush=True)
                return
            print("NOT FENCED", flush=True)
            return
        start = 0 if token is None else int(token) + 1
        for first in range(start, args.total, args.batch):
            last = min(first + args.batch, args.total) - 1
            rows = [{"id": i, "producer": args.channel} for i in range(first, last + 1)]
            channel.insert_rows(rows, start_offset_token=str(first), end_offset_token=str(last))
            time.sleep(rng.random() * 0.02)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
