"""The error table: rows an insert rejected, kept in a changelake table the user names, so nothing
is silently lost. Rejects are committed in the same catalog transaction as the channel's good rows
and its offset token, so they too are recorded exactly once."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from changelake.arrow_types import arrow_type
from changelake.catalog import Catalog
from changelake.catalog.internal import check_user_name
from changelake.catalog.model import TableInfo
from changelake.catalog.requests import CommitRequest, CreateTable, IfExists
from changelake.clock import Clock
from changelake.errors import ConfigurationError
from changelake.ingest.validate import InsertError
from changelake.schema import Column, TableSchema

ERROR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("table_name", "string"),
    ("channel", "string"),
    ("start_offset_token", "string"),
    ("end_offset_token", "string"),
    ("row_index", "bigint"),
    ("column_name", "string"),
    ("value", "string"),
    ("message", "string"),
    ("payload", "string"),
    ("rejected_at", "timestamp"),
)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value if isinstance(value, str) else repr(value)


def _payload(row: Any) -> str | None:
    if row is None:
        return None
    if isinstance(row, dict):
        return json.dumps({str(k): _text(v) for k, v in row.items()})
    return json.dumps(_text(row))


class Rejects:
    """Where one channel's rejected rows go: the error table ``info`` with ``schema``."""

    def __init__(self, info: TableInfo, schema: TableSchema, *, source_table: str):
        self.table = info.name
        self.table_id = info.table_id
        self.info = info
        # the columns its rows hold: what the commit requires the table still to have
        self.columns = tuple(schema.column(name, table=info.name) for name, _ in ERROR_COLUMNS)
        self._source = source_table
        self._schema = pa.schema(
            [
                pa.field(schema.column(name, table=info.name).physical, arrow_type(kind))
                for name, kind in ERROR_COLUMNS
            ]
        )

    def records(
        self,
        channel: str,
        errors: Iterable[InsertError],
        start: str | None,
        end: str | None,
    ) -> list[dict[str, Any]]:
        at = dt.datetime.now(dt.timezone.utc)
        return [
            {
                "table_name": self._source,
                "channel": channel,
                "start_offset_token": start,
                "end_offset_token": end,
                "row_index": e.row_index,
                "column_name": e.column,
                "value": _text(e.value),
                "message": e.message,
                "payload": _payload(e.row),
                "rejected_at": at,
            }
            for e in errors
        ]

    def to_arrow(self, records: list[dict[str, Any]]) -> pa.Table:
        columns = [
            pa.array([r[name] for r in records], type=field.type)
            for (name, _), field in zip(ERROR_COLUMNS, self._schema, strict=True)
        ]
        return pa.Table.from_arrays(columns, schema=self._schema)


def error_table(catalog: Catalog, name: str, *, source_table: str, clock: Clock) -> Rejects:
    """The error table ``name``, created if it does not exist; an existing table must have the
    error columns (any extra columns stay NULL)."""
    check_user_name(name, kind="TABLE")
    schema = TableSchema(
        tuple(Column(i + 1, col, kind) for i, (col, kind) in enumerate(ERROR_COLUMNS))
    )
    result = catalog.commit(
        [
            CommitRequest(
                f"ingest-errors-{uuid.uuid4().hex}",
                "CREATE TABLE",
                updates=(CreateTable(name, schema, if_exists=IfExists.KEEP),),
            )
        ],
        clock=clock,
    )
    info = result.tables.get(name.lower()) or catalog.table(name)
    found = catalog.schema_at(info.table_id, info.current_version)
    wrong = [
        f"{col} {kind.upper()}"
        for col, kind in ERROR_COLUMNS
        if found.find(col) is None or found.column(col, table=info.name).type != kind
    ]
    if wrong:
        raise ConfigurationError(
            f"Table {info.name} cannot be the error table of a channel: it lacks the columns"
            f" {', '.join(wrong)}. Name a new table (it is created) or add those columns."
        )
    return Rejects(info, found, source_table=source_table)
