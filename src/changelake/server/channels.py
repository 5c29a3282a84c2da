"""The channels a service has opened, by table and name."""

from __future__ import annotations

import threading
import time

from changelake.errors import ChannelNotFoundError, did_you_mean
from changelake.ingest import Channel


class OpenChannels:
    """Channel handles by (table, channel name). Table names match case-insensitively, as in
    SQL; channel names exactly. When two opens of one channel race, the later epoch stays."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple[str, str], Channel] = {}
        self._opened: dict[tuple[str, str], float] = {}  # monotonic seconds

    def add(self, channel: Channel) -> None:
        key = (channel.table.lower(), channel.name)
        with self._lock:
            held = self._by_key.get(key)
            if held is None or channel.epoch >= held.epoch:
                self._by_key[key] = channel
                self._opened[key] = time.monotonic()

    def rates(self) -> dict[tuple[str, str], dict[str, float | int | None]]:
        """Per open channel (lower-case table, name): rows inserted, buffered and per second
        since it was opened in this service, and the wall-clock time of its last commit."""
        with self._lock:
            held = [(k, c, self._opened[k]) for k, c in self._by_key.items()]
        now = time.monotonic()
        found: dict[tuple[str, str], dict[str, float | int | None]] = {}
        for key, channel, opened in held:
            status = channel.status()
            found[key] = {
                "rows_inserted": status.rows_inserted,
                "rows_buffered": status.rows_buffered,
                "rows_per_second": status.rows_inserted / max(now - opened, 1e-3),
                "last_commit_at": status.last_commit_at,
            }
        return found

    def remove(self, channel: Channel) -> None:
        key = (channel.table.lower(), channel.name)
        with self._lock:
            if self._by_key.get(key) is channel:
                del self._by_key[key]
                del self._opened[key]

    def find(self, table: str, name: str) -> Channel | None:
        with self._lock:
            return self._by_key.get((table.lower(), name))

    def get(self, table: str, name: str) -> Channel:
        """The open channel, or ChannelNotFoundError saying how to open it."""
        found = self.find(table, name)
        if found is not None:
            return found
        with self._lock:
            names = [n for t, n in self._by_key if t == table.lower()]
        raise ChannelNotFoundError(
            f"Channel {name!r} on table {table} is not open in this service; open it with"
            f" PUT /v1/tables/{table}/channels/{name}.{did_you_mean(name, names)}"
        )

    def all(self) -> list[Channel]:
        with self._lock:
            return list(self._by_key.values())
