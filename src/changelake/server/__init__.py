"""``changelake serve``: one warehouse over HTTP, for clients that are not Python processes on
this machine: ingest channels (rows streamed into tables, committed with offset tokens), SQL
(``POST /v1/sql``, with sessions that hold a transaction across requests), dynamic tables and
tasks (list, refresh or execute, suspend, resume) and a read-only web dashboard at ``/``; beside
them it hosts background work: the scheduler of dynamic tables, tasks and external tables. See
``app`` for the API and ``run`` for the server.

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
