"""Bearer-token authentication, and the rule that an unauthenticated service only listens on the
local machine."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from changelake.errors import ConfigurationError
from changelake.server.problems import HttpProblem

TOKEN_ENV = "CHANGELAKE_SERVE_TOKEN"
# The Host header of a request to a service without a token (it listens on loopback only).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")

_bearer = HTTPBearer(auto_error=False, description=f"The service's token (--token or {TOKEN_ENV}).")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (localhost, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to serve without a token on an address other machines can reach."""
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"Refusing to listen on {host} without a token: anyone who can reach it could write"
            f" to the warehouse. Pass --token (or set {TOKEN_ENV}), or bind to 127.0.0.1."
        )
    if token is not None and not token.strip():
        raise ConfigurationError(f"The token is empty; pass a non-empty --token or {TOKEN_ENV}.")


def bearer_auth(
    token: str | None,
) -> Callable[[HTTPAuthorizationCredentials | None], Awaitable[None]]:
    """A FastAPI dependency that lets a request through only with ``Authorization: Bearer
    <token>``; with no token configured every request passes."""
    expected = token.encode() if token is not None else None

    async def authenticate(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    ) -> None:
        if expected is None:
            return
        given = credentials.credentials.encode() if credentials is not None else b""
        if credentials is None or not hmac.compare_digest(given, expected):
            raise HttpProblem(
                401,
                "Unauthorized",
                "No token given: send the header 'Authorization: Bearer <token>'."
                if credentials is None
                else "Wrong token in the Authorization header.",
                {"WWW-Authenticate": "Bearer"},
            )

    return authenticate
