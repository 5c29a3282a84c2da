"""``/v1/dynamic-tables``: list, detail, refresh history, refresh now, suspend and resume; a
refresh runs in a worker thread, as long as it takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from fastapi import APIRouter
from fastapi.params import Depends
from starlette.concurrency import run_in_threadpool

from changelake.server.models import error_responses
from changelake.server.scheduled import Scheduled, Summaries, scheduled_routes

ROUTE = "/v1/dynamic-tables"

SUMMARIES = Summaries(
    every="Every dynamic table, as SHOW DYNAMIC TABLES",
    one="One dynamic table",
    detail_fields="Its lag, modes (the effective one and why), scheduling state, data timestamp,"
    " current lag and last refresh.",
    history="Its refreshes, newest first",
    suspend="Suspend its scheduled refreshes",
    resume="Resume its scheduled refreshes",
)


class DynamicTables(Scheduled, Protocol):
    def refresh(self, name: str) -> dict[str, Any]: ...


def dynamic_table_routes(service: DynamicTables, dependencies: Sequence[Depends]) -> APIRouter:
    api = scheduled_routes(
        service, dependencies, prefix=ROUTE, tag="dynamic tables", says=SUMMARIES
    )

    @api.post("/{name}/refresh", summary="Refresh it now", responses=error_responses(404, 409))
    async def refresh(name: str) -> dict[str, Any]:
        """As ALTER DYNAMIC TABLE name REFRESH: upstreams first, at one data timestamp. Answers
        the refresh's history row once it committed; 409 if another refresh won the race."""
        return await run_in_threadpool(service.refresh, name)

    return api
