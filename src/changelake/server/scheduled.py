"""The routes every scheduled object has (dynamic tables and tasks): list, detail, history,
suspend and resume; each kind's module adds its own action (refresh, execute). The service hands
in what answers them (``changelake.scheduling.service``); each call runs in a worker thread."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Query
from fastapi.params import Depends
from starlette.concurrency import run_in_threadpool

from changelake.server.models import error_responses


class Scheduled(Protocol):
    def list(self) -> list[dict[str, Any]]: ...

    def detail(self, name: str) -> dict[str, Any]: ...

    def history(self, name: str, limit: int) -> list[dict[str, Any]]: ...

    def set_suspended(self, name: str, suspended: bool) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Summaries:
    """What the API's description says of each route (``detail_fields``: what one object's
    answer holds; ``resume_errors``: the statuses RESUME may answer besides 200)."""

    every: str
    one: str
    detail_fields: str
    history: str
    suspend: str
    resume: str
    resume_errors: tuple[int, ...] = (404,)


def scheduled_routes(
    service: Scheduled, dependencies: Sequence[Depends], *, prefix: str, tag: str, says: Summaries
) -> APIRouter:
    """A router under ``prefix`` with the routes every scheduled object has."""
    api = APIRouter(prefix=prefix, dependencies=list(dependencies), tags=[tag])

    @api.get("", summary=says.every)
    async def every() -> list[dict[str, Any]]:
        return await run_in_threadpool(service.list)

    @api.get(
        "/{name}", summary=says.one, description=says.detail_fields, responses=error_responses(404)
    )
    async def detail(name: str) -> dict[str, Any]:
        return await run_in_threadpool(service.detail, name)

    @api.get("/{name}/history", summary=says.history, responses=error_responses(404))
    async def history(
        name: str, limit: Annotated[int, Query(ge=1, le=10_000)] = 100
    ) -> list[dict[str, Any]]:
        return await run_in_threadpool(service.history, name, limit)

    @api.post("/{name}/suspend", summary=says.suspend, responses=error_responses(404))
    async def suspend(name: str) -> dict[str, Any]:
        return await run_in_threadpool(service.set_suspended, name, True)

    @api.post("/{name}/resume", summary=says.resume, responses=error_responses(*says.resume_errors))
    async def resume(name: str) -> dict[str, Any]:
        return await run_in_threadpool(service.set_suspended, name, False)

    return api
