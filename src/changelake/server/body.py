"""Request bodies of inserts: read within a size limit, then parsed as JSON lines or as an Arrow
IPC stream."""

from __future__ import annotations

import json
from decimal import Decimal
from enum import Enum
from typing import Any

import pyarrow as pa
from fastapi import Request

from changelake.errors import IngestValidationError
from changelake.server.problems import HttpProblem


class RowFormat(Enum):
    """How the rows of an insert are encoded, by the media type that names each."""

    JSON_LINES = "application/x-ndjson"
    ARROW_STREAM = "application/vnd.apache.arrow.stream"


# Other names producers use for the same formats.
_ALIASES = {"application/jsonl": RowFormat.JSON_LINES}


def row_format(request: Request) -> RowFormat:
    """The format named by the request's Content-Type; 415 for any other."""
    given = request.headers.get("content-type", "")
    media = given.split(";", 1)[0].strip().lower()
    found = _ALIASES.get(media) or next((f for f in RowFormat if f.value == media), None)
    if found is None:
        raise HttpProblem(
            415,
            "UnsupportedMediaType",
            f"Content-Type {given or '(none)'!r} is not a format of rows; send"
            f" {RowFormat.JSON_LINES.value} (one JSON object per line) or"
            f" {RowFormat.ARROW_STREAM.value} (an Arrow IPC stream).",
        )
    return found


def _too_large(limit: int) -> HttpProblem:
    return HttpProblem(
        413,
        "PayloadTooLarge",
        f"The request body is larger than this service's limit of {limit} bytes; nothing of it"
        " was inserted. Send the rows in smaller requests (or raise --max-request-bytes).",
        {"Connection": "close"},
    )


async def read_body(request: Request, *, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it passes ``limit`` bytes, whether or not it
    declared its length."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def json_rows(body: bytes) -> list[Any]:
    """The rows of a JSON-lines body, one value per non-blank line. Numbers with a fraction or an
    exponent become ``Decimal``, so DECIMAL columns get exactly the digits sent."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        line = body.count(b"\n", 0, e.start) + 1
        raise IngestValidationError(
            f"Line {line} of the body is not valid UTF-8 (byte {e.start}); nothing of this"
            " request was inserted."
        ) from e
    decode = json.JSONDecoder(parse_float=Decimal).decode
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line or line.isspace():
            continue
        try:
            rows.append(decode(line))
        except json.JSONDecodeError as e:
            raise IngestValidationError(
                f"Line {number} of the body is not valid JSON: {e.msg} (column {e.colno});"
                " nothing of this request was inserted. Send one JSON object per line."
            ) from e
        except RecursionError as e:
            raise IngestValidationError(
                f"Line {number} of the body nests too deeply; nothing of this request was inserted."
            ) from e
    return rows


def arrow_table(body: bytes) -> pa.Table:
    """The record batches of an Arrow IPC stream, as one table."""
    if not body:
        raise IngestValidationError(
            "The body is empty; an Arrow IPC stream starts with its schema message."
        )
    try:
        return pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    except (pa.ArrowException, OSError, ValueError) as e:
        raise IngestValidationError(
            f"The body is not a readable Arrow IPC stream: {e}. Write it with"
            " pyarrow.ipc.new_stream (the stream format, not the file format)."
        ) from e
