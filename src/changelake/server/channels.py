"""The channels a service has opened, by table and name."""

from __future__ import annotations

import threading

from changelake.errors import ChannelNotFoundError, did_you_mean
from changelake.ingest import Channel


class OpenChannels:
    """Channel handles by (table, channel name). Table names match case-insensitively, as in
    SQL; channel names exactly. When two opens of one channel race, the later epoch stays."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple[str, str], Channel] = {}

    def add(self, channel: Channel) -> None:
        key = (channel.table.lower(), channel.name)
        with self._lock:
            held = self._by_key.get(key)
            if held is None or channel.epoch >= held.epoch:
                self._by_key[key] = channel

    def remove(self, channel: Channel) -> None:
        key = (channel.table.lower(), channel.name)
        with self._lock:
            if self._by_key.get(key) is channel:
                del self._by_key[key]

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
