"""Who may ask and who may teach: the bearer token (`serve --token`) and the teach token
(`serve --teach-token`, issue 61), checked once in front of every route.

With `--token`, every request must carry `Authorization: Bearer TOKEN` (401 otherwise). With
`--teach-token`, adding and removing notes, verifying, replacing and undoing need that token
instead (403, one line, nothing stored), while asking and listing need only `--token`; the teach
token is accepted wherever the token is, so a teacher sends one token. Without a teach token,
whoever may ask may teach, as before. The middleware marks each request (`TEACHER` in its ASGI
scope); the teaching routes and MCP tools read the mark (`check_teacher`).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from edge_sql.errors import TeachingRefused
from edge_sql.serve.http_plumbing import error

TEACHER = "edge_sql.teacher"  # the scope key: True when the request may teach
REFUSED = (
    "teaching (adding or removing notes, verifying, replacing, undoing) needs the teach token: send "
    "Authorization: Bearer TEACH_TOKEN (the --teach-token or EDGE_SQL_TEACH_TOKEN the server was started with); "
    "asking and listing need only the token"
)


class BearerTokens:
    """Checks the bearer token (when one is set) and marks whether the request may teach."""

    def __init__(self, app: ASGIApp, token: str | None, teach_token: str | None = None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None
        self.teacher = f"Bearer {teach_token}".encode() if teach_token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        teacher = self.teacher is not None and hmac.compare_digest(given, self.teacher)
        if self.expected is not None and not teacher and not hmac.compare_digest(given, self.expected):
            response = error(
                401,
                "missing or wrong bearer token (send Authorization: Bearer TOKEN)",
                headers={"WWW-Authenticate": 'Bearer realm="edge-sql"'},
            )
            await response(scope, receive, send)
            return
        scope[TEACHER] = teacher or self.teacher is None
        await self.app(scope, receive, send)


def may_teach(scope: Mapping[str, Any] | None) -> bool:  # Any: asgi
    """Whether a request may teach: unmarked (MCP over stdio, an app built without tokens) may."""
    return scope is None or bool(scope.get(TEACHER, True))


def check_teacher(scope: Mapping[str, Any] | None) -> None:  # Any: asgi
    """TeachingRefused (HTTP 403) for a request without the teach token, where one is set."""
    if not may_teach(scope):
        raise TeachingRefused(REFUSED)
