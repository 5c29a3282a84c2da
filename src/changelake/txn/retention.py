"""The one retention policy: which versions a table can still be read at, and when a stream that
holds history back goes stale (paper section 2.3)."""

from __future__ import annotations

import datetime as dt

from changelake.catalog import Catalog
from changelake.catalog.model import StreamInfo, TableInfo
from changelake.errors import StaleStreamError, TimeTravelError

DAY = 86400.0


def format_time(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).isoformat(sep=" ", timespec="milliseconds")


def retention_horizon(info: TableInfo, *, now: float) -> float:
    """Versions superseded before this time are beyond the table's retention."""
    return now - info.retention_days() * DAY


def check_readable(
    catalog: Catalog, info: TableInfo, version: int, *, latest: int, now: float
) -> None:
    """Raise TimeTravelError unless ``version`` of ``info`` exists and is within retention."""
    if version < 0:
        raise TimeTravelError(
            f"Table {info.name} did not exist at that point: it was created at"
            f" {format_time(info.created_at)} (version 0). Choose a later point."
        )
    if version > latest:
        raise TimeTravelError(
            f"Table {info.name} has no version {version}; its latest version is {latest}."
        )
    if version == latest:
        return
    successor = catalog.version_info(info.table_id, version + 1)
    if version < info.vacuumed_before_version or (
        successor is not None and successor.committed_at < retention_horizon(info, now=now)
    ):
        raise TimeTravelError(
            f"Version {version} of table {info.name} is beyond its retention period"
            f" (DATA_RETENTION_TIME_IN_DAYS = {info.retention_days():g}); its data may have been"
            " removed. Choose a more recent point, or raise the retention for the future."
        )


def extended_retention_days(info: TableInfo) -> float:
    """How long a stream keeps its table's history readable: retention, extended up to the max."""
    return max(info.retention_days(), info.max_extension_days())


def stale_after(catalog: Catalog, stream: StreamInfo, info: TableInfo) -> float | None:
    """When the stream's changes on ``info`` expire (the stream goes stale); None if nothing on
    it is pending to expire."""
    successor = catalog.version_info(info.table_id, stream.frontier(info.table_id) + 1)
    if successor is None:
        return None
    return successor.committed_at + extended_retention_days(info) * DAY


def table_replaced(catalog: Catalog, info: TableInfo) -> bool:
    """Whether the stream's table was replaced (CREATE OR REPLACE TABLE) since it was created."""
    current = catalog.find_table(info.name)
    return current is None or current.table_id != info.table_id


def is_stale(catalog: Catalog, stream: StreamInfo, info: TableInfo, *, now: float) -> bool:
    """Whether the stream is stale on its (base) table ``info``."""
    if stream.frontier(info.table_id) < info.vacuumed_before_version or table_replaced(
        catalog, info
    ):
        return True
    deadline = stale_after(catalog, stream, info)
    return deadline is not None and deadline < now


def recreate_hint(stream: StreamInfo, source: str) -> str:
    return (
        f" Recreate it with CREATE OR REPLACE STREAM {stream.name} ON {stream.source} {source}"
        f" (add SHOW_INITIAL_ROWS = TRUE to start from the {stream.source.lower()}'s current rows)."
    )


def check_not_stale(catalog: Catalog, stream: StreamInfo, info: TableInfo, *, now: float) -> None:
    """StaleStreamError if the stream is stale on its (base) table ``info``."""
    recreate = recreate_hint(stream, stream.view or info.name)
    if table_replaced(catalog, info):
        raise StaleStreamError(
            f"Stream {stream.name} is stale: table {info.name} was replaced after the stream was"
            f" created, so its changes no longer follow from the stream's position.{recreate}"
        )
    if is_stale(catalog, stream, info, now=now):
        raise StaleStreamError(
            f"Stream {stream.name} is stale: its unconsumed changes on table {info.name} fell out"
            f" of retention (DATA_RETENTION_TIME_IN_DAYS = {info.retention_days():g}, extended up"
            f" to MAX_DATA_EXTENSION_TIME_IN_DAYS = {info.max_extension_days():g}).{recreate}"
        )


def stream_floor(catalog: Catalog, info: TableInfo, *, now: float) -> int | None:
    """The oldest frontier on the table of a live (not stale) stream on it or on a view over it:
    VACUUM keeps every version after it until the stream goes stale. None when no stream holds
    history back."""
    live = [
        s.frontier(info.table_id)
        for s in catalog.list_streams(table_id=info.table_id)
        if not is_stale(catalog, s, info, now=now)
    ]
    return min(live) if live else None
