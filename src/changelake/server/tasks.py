"""``/v1/tasks``: list, detail, run history, execute now, suspend and resume. The service hands
in what answers them (``changelake.scheduling.service``); a run executes in a worker thread, as
long as it takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Query
from fastapi.params import Depends
from starlette.concurrency import run_in_threadpool

from changelake.server.models import error_responses

ROUTE = "/v1/tasks"


class Tasks(Protocol):
    def list(self) -> list[dict[str, Any]]: ...

    def detail(self, name: str) -> dict[str, Any]: ...

    def history(self, name: str, limit: int) -> list[dict[str, Any]]: ...

    def execute(self, name: str) -> list[dict[str, Any]]: ...

    def set_suspended(self, name: str, suspended: bool) -> dict[str, Any]: ...


def task_routes(service: Tasks, dependencies: Sequence[Depends]) -> APIRouter:
    api = APIRouter(prefix=ROUTE, dependencies=list(dependencies), tags=["tasks"])

    @api.get("", summary="Every task, as SHOW TASKS")
    async def list_tasks() -> list[dict[str, Any]]:
        return await run_in_threadpool(service.list)

    @api.get("/{name}", summary="One task", responses=error_responses(404))
    async def detail(name: str) -> dict[str, Any]:
        """Its state, schedule, predecessors, WHEN condition, statement, next scheduled time,
        failures in a row and options."""
        return await run_in_threadpool(service.detail, name)

    @api.get("/{name}/history", summary="Its runs, newest first", responses=error_responses(404))
    async def history(
        name: str, limit: Annotated[int, Query(ge=1, le=10_000)] = 100
    ) -> list[dict[str, Any]]:
        return await run_in_threadpool(service.history, name, limit)

    @api.post("/{name}/execute", summary="Run its graph now", responses=error_responses(404))
    async def execute(name: str) -> list[dict[str, Any]]:
        """As EXECUTE TASK name: the task, then the tasks after it. Answers the graph run's
        rows once it ended (a failed run is a row with its error, not an HTTP error)."""
        return await run_in_threadpool(service.execute, name)

    @api.post("/{name}/suspend", summary="Suspend it", responses=error_responses(404))
    async def suspend(name: str) -> dict[str, Any]:
        return await run_in_threadpool(service.set_suspended, name, True)

    @api.post(
        "/{name}/resume",
        summary="Resume it (a root: its schedule starts)",
        responses=error_responses(400, 404),
    )
    async def resume(name: str) -> dict[str, Any]:
        return await run_in_threadpool(service.set_suspended, name, False)

    return api
