"""A writer process for the schema-race tests: ``python schema_worker.py WAREHOUSE GO_DIR``.

Runs an INSERT, a MERGE and an APPLY CHANGES into table ``t``. Each writes its files, prints
``HOLD <name>`` and waits before its catalog commit until ``GO_DIR/<name>`` exists (the test
alters the table meanwhile), then prints ``RESULT <name> committed`` or ``RESULT <name> conflict
<message>``; a refused statement is run again, planned afresh, and prints ``RETRY <name> ...``
the same way.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import changelake
from changelake.errors import ConflictError

STATEMENTS = {
    "insert": "INSERT INTO t (id, name) VALUES (100, 'inserted')",
    "merge": "MERGE INTO t USING (SELECT 1 AS id, 'merged' AS name) s ON t.id = s.id"
    " WHEN MATCHED THEN UPDATE SET name = s.name",
    "apply": "APPLY CHANGES INTO t FROM (SELECT 200 AS id, 'applied' AS name, 1 AS seq)"
    " KEYS (id) SEQUENCE BY seq COLUMNS (id, name)",
}


def main(warehouse: str, go_dir: str) -> None:
    session = changelake.connect(warehouse)
    real_commit = session.catalog.commit
    holding: list[str] = []

    def commit(*args: Any, **kwargs: Any) -> Any:
        if holding:
            name = holding.pop()
            print(f"HOLD {name}", flush=True)
            while not os.path.exists(os.path.join(go_dir, name)):
                time.sleep(0.02)
        return real_commit(*args, **kwargs)

    session.catalog.commit = commit  # type: ignore[method-assign]
    for name, statement in STATEMENTS.items():
        for label in ("RESULT", "RETRY"):
            holding[:] = [name] if label == "RESULT" else []
            try:
                session.sql(statement)
            except ConflictError as e:
                print(f"{label} {name} conflict {e}", flush=True)
            else:
                print(f"{label} {name} committed", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
