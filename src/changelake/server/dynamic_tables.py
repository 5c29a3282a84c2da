"""``/v1/dynamic-tables``: list, detail, refresh history, refresh now, suspend and resume. The
service hands in what answers them (``changelake.scheduling.service``); refreshes run in a worker
thread, as long as they take."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Query
from fastapi.params import Depends
from starlette.concurrency import run_in_threadpool

from changelake.server.models import error_responses

ROUTE = "/v1/dynamic-tables"


class DynamicTables(Protocol):
    def list(self) -> list[dict[str, Any]]: ...

    def detail(self, name: str) -> dict[str, Any]: ...

    def history(self, name: str, limit: int) -> list[dict[str, Any]]: ...

    def refresh(self, name: str) -> dict[str, Any]: ...

    def set_suspended(self, name: str, suspended: bool) -> dict[str, Any]: ...


def dynamic_table_routes(service: DynamicTables, dependencies: Sequence[Depends]) -> APIRouter:
    api = APIRouter(prefix=ROUTE, dependencies=list(dependencies), tags=["dynamic tables"])

    @api.get("", summary="Every dynamic table, as SHOW DYNAMIC TABLES")
    async def list_tables() -> list[dict[str, Any]]:
        return await run_in_threadpool(service.list)

    @api.get("/{name}", summary="One dynamic table", responses=error_responses(404))
    async def detail(name: str) -> dict[str, Any]:
        """Its lag, modes (the effective one and why), scheduling state, data timestamp,
        current lag and last refresh."""
        return await run_in_threadpool(service.detail, name)

    @api.get(
        "/{name}/history", summary="Its refreshes, newest first", responses=error_responses(404)
    )
    async def history(
        name: str, limit: Annotated[int, Query(ge=1, le=10_000)] = 100
    ) -> list[dict[str, Any]]:
        return await run_in_threadpool(service.history, name, limit)

    @api.post("/{name}/refresh", summary="Refresh it now", responses=error_responses(404, 409))
    async def refresh(name: str) -> dict[str, Any]:
        """As ALTER DYNAMIC TABLE name REFRESH: upstreams first, at one data timestamp. Answers
        the refresh's history row once it committed; 409 if another refresh won the race."""
        return await run_in_threadpool(service.refresh, name)

    @api.post(
        "/{name}/suspend", summary="Suspend its scheduled refreshes", responses=error_responses(404)
    )
    async def suspend(name: str) -> dict[str, Any]:
        return await run_in_threadpool(service.set_suspended, name, True)

    @api.post(
        "/{name}/resume", summary="Resume its scheduled refreshes", responses=error_responses(404)
    )
    async def resume(name: str) -> dict[str, Any]:
        return await run_in_threadpool(service.set_suspended, name, False)

    return api
