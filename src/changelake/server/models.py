"""The JSON bodies of the HTTP API, as pydantic models (they are also its OpenAPI schemas)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


OnErrorMode = Annotated[Literal["continue", "abort", "skip_batch"], BeforeValidator(_lower)]


class OpenChannelRequest(BaseModel):
    on_error: OnErrorMode = Field(
        "continue",
        description="continue: keep the good rows of a request and report the bad ones;"
        " abort: a bad row rejects the whole request (422); skip_batch: keep nothing of a"
        " request with a bad row, report it, leave the offset token.",
    )
    offset_token: str | None = Field(
        None, description="Set the channel's committed offset token instead of continuing it."
    )
    error_table: str | None = Field(
        None, description="A table (created if missing) that receives every rejected row."
    )


class OpenedChannel(BaseModel):
    table: str
    channel: str
    epoch: int = Field(description="Bumped by every open; older holders can no longer commit.")
    committed_offset_token: str | None = Field(
        description="Resend the rows after this token (null: from the beginning)."
    )


class RowError(BaseModel):
    row_index: int = Field(description="0-based, counting the rows (non-blank lines) sent.")
    column: str | None = Field(description="null for a problem of the row as a whole.")
    value: str | None = Field(description="The value as sent, as text (binary as hex).")
    message: str


class InsertResult(BaseModel):
    rows_inserted: int = Field(description="Rows accepted and buffered; committed by a flush.")
    rows_errored: int
    errors: list[RowError]
    duplicate: bool = Field(
        False,
        description="The request resent the last accepted one (same end_offset_token):"
        " nothing was buffered again.",
    )


class OffsetToken(BaseModel):
    committed_offset_token: str | None


class ClosedChannel(BaseModel):
    table: str
    channel: str
    dropped: bool


class Flushed(BaseModel):
    channels: int = Field(description="Channels open in this service when the flush ran.")


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class ErrorDetail(BaseModel):
    type: str = Field(description="The error class, e.g. ChannelFencedError.")
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses`` in OpenAPI: the error body under 400, 401 and ``statuses``."""
    return {status: {"model": ErrorBody} for status in (400, 401, *statuses)}
