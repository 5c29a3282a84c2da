"""``/v1/tasks``: list, detail, run history, execute now, suspend and resume; a run executes in a
worker thread, as long as it takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from fastapi import APIRouter
from fastapi.params import Depends
from starlette.concurrency import run_in_threadpool

from changelake.server.models import error_responses
from changelake.server.scheduled import Scheduled, Summaries, scheduled_routes

ROUTE = "/v1/tasks"

SUMMARIES = Summaries(
    every="Every task, as SHOW TASKS",
    one="One task",
    detail_fields="Its state, schedule, predecessors, WHEN condition, statement, next scheduled"
    " time, failures in a row and options.",
    history="Its runs, newest first",
    suspend="Suspend it",
    resume="Resume it (a root: its schedule starts)",
    resume_errors=(400, 404),
)


class Tasks(Scheduled, Protocol):
    def execute(self, name: str) -> list[dict[str, Any]]: ...


def task_routes(service: Tasks, dependencies: Sequence[Depends]) -> APIRouter:
    api = scheduled_routes(service, dependencies, prefix=ROUTE, tag="tasks", says=SUMMARIES)

    @api.post("/{name}/execute", summary="Run its graph now", responses=error_responses(404))
    async def execute(name: str) -> list[dict[str, Any]]:
        """As EXECUTE TASK name: the task, then the tasks after it. Answers the graph run's
        rows once it ended (a failed run is a row with its error, not an HTTP error)."""
        return await run_in_threadpool(service.execute, name)

    return api
