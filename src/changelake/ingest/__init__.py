"""Streaming ingest: a client opens named channels on tables, inserts rows (validated on the
client, buffered in order), and a background flush commits them as Parquet files with each
channel's offset token, exactly once.

>>> from changelake.ingest import Client
>>> with Client("./wh") as client:                                   # doctest: +SKIP
...     channel = client.open_channel("orders-0", table="orders")
...     channel.insert_rows(rows, end_offset_token="41")
...     channel.wait_for_commit("41", timeout=10)
"""

from changelake.ingest.channel import Channel, ChannelStatus, InsertResponse, OnError
from changelake.ingest.client import Client
from changelake.ingest.tokens import TokenOrder, default_order
from changelake.ingest.validate import InsertError

__all__ = [
    "Channel",
    "ChannelStatus",
    "Client",
    "InsertError",
    "InsertResponse",
    "OnError",
    "TokenOrder",
    "default_order",
]
