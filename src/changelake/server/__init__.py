"""``changelake serve``: the ingest channels of a warehouse over HTTP, for producers that are not
Python processes on this machine. See ``app`` for the API and ``run`` for the server.

>>> from changelake.server import serve
>>> serve("./wh", port=8787)   # doctest: +SKIP
"""

from changelake.server.app import DEFAULT_MAX_REQUEST_BYTES, create_app
from changelake.server.auth import TOKEN_ENV
from changelake.server.run import DEFAULT_HOST, DEFAULT_PORT, serve

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_PORT",
    "TOKEN_ENV",
    "create_app",
    "serve",
]
