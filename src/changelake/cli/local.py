"""Running statements with a Spark of the command's own (no service runs the warehouse). Loaded
only then: it brings PySpark."""

from __future__ import annotations

import changelake
from changelake.cli.output import Result
from changelake.cli.target import Target
from changelake.session import Session
from changelake.spark.cancel import Cancellable
from changelake.spark.setup import default_spark


def connect(target: Target, *, warehouse: str | None = None, catalog: str | None = None) -> Session:
    """A session on the target's warehouse (or ``warehouse``), its Spark quiet unless verbose."""
    spark = None if target.verbose else default_spark(log=target.log)
    return changelake.connect(
        warehouse or target.warehouse, catalog=catalog or target.catalog, spark=spark
    )


class Local:
    """Statements run in this process, on one session started at the first statement."""

    def __init__(self, target: Target):
        self._target = target
        self._session: Session | None = None
        self._running: dict[str | None, Cancellable] = {}

    def start(self) -> None:
        if self._session is None:
            self._session = connect(self._target)

    def run(self, statement: str, *, max_rows: int, request: str | None = None) -> Result:
        """Run ``statement``; ``request`` is an id ``cancel`` (from another thread) can name."""
        self.start()
        assert self._session is not None
        label = statement.split(maxsplit=1)[0].upper() if statement.strip() else "SQL"
        run = Cancellable(label)
        if request is not None:
            self._running[request] = run
        try:
            with run.running(self._session.spark):
                fetched = self._session.fetch(statement, max_rows=max_rows)
        finally:
            run.finish()
            self._running.pop(request, None)
        return Result([name for name, _ in fetched.columns], fetched.rows, fetched.total)

    def cancel(self, request: str) -> None:
        """Cancel the statement running under ``request``; returns once it ended."""
        run = self._running.get(request)
        if run is not None:
            run.cancel()

    def close(self) -> None:
        """Nothing to release: the session's Spark ends with the process."""
