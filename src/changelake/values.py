"""Values of query results as JSON: what ``POST /v1/sql`` answers and ``changelake sql --format
json`` prints (a module of the bottom layer, so the command line's fast path imports no Spark).
Numbers, strings, booleans and null as themselves; DECIMAL, DATE, TIMESTAMP as
strings (a JSON number would lose a decimal's digits); BINARY as base64; structs as objects,
arrays as arrays, maps as objects with string keys."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
from typing import Any


def jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value).replace("inf", "Infinity")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, decimal.Decimal | dt.date | dt.time):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if hasattr(value, "asDict"):  # a Spark Row: a struct
        return {k: jsonable(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)
