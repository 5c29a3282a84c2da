"""A stream consumer process for the race tests.

``python stream_worker.py WAREHOUSE CATALOG STREAM TARGET BARRIER_DIR WORKER``

Opens the warehouse (CATALOG is a catalog URL, or ``-`` for the default SQLite one) with its own
local[1] Spark (CHANGELAKE_SPARK_MASTER), then inside BEGIN ... COMMIT consumes STREAM into TARGET
with ``INSERT INTO TARGET SELECT id, name, METADATA$ACTION, WORKER FROM STREAM``. Before COMMIT it
waits at a barrier (creates ``BARRIER_DIR/WORKER``, waits until the directory holds two entries), so
both racers have read the stream before either commits. Prints one line ``OUTCOME <json>``: status
``committed`` or ``consumed`` (StreamConsumedError, with its message), plus how many changes the
worker read.
"""

from __future__ import annotations

import json
import os
import sys
import time

import changelake
from changelake.errors import StreamConsumedError

BARRIER_TIMEOUT_SECONDS = 240.0


def _barrier(directory: str, worker: str, parties: int = 2) -> None:
    with open(os.path.join(directory, worker), "w"):
        pass
    deadline = time.monotonic() + BARRIER_TIMEOUT_SECONDS
    while len(os.listdir(directory)) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {directory}: the other worker never arrived")
        time.sleep(0.01)


def main(
    warehouse: str, catalog: str, stream: str, target: str, barrier_dir: str, worker: str
) -> None:
    session = changelake.connect(warehouse, catalog=None if catalog == "-" else catalog)
    session.sql("BEGIN")
    session.sql(
        f"INSERT INTO {target} SELECT id, name, METADATA$ACTION, {int(worker)} FROM {stream}"
    )
    read = session.sql(f"SELECT COUNT(*) FROM {stream}").first()[0]
    _barrier(barrier_dir, worker)
    try:
        session.sql("COMMIT")
    except StreamConsumedError as e:
        outcome = {"status": "consumed", "message": str(e), "read": read}
    else:
        outcome = {"status": "committed", "read": read}
    session.close()
    print("OUTCOME " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
