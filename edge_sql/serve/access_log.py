"""One line per HTTP request on the server's log (stderr): method, path, status, milliseconds.

Written when the response ends (for a stream: when it closes), so the time is the whole
request's. A client gone before any answer is logged as 499, as nginx does. `--quiet` leaves
this layer out.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class AccessLog:
    """Logs `GET /health 200 1.3 ms` for every http request that passes through."""

    def __init__(self, app: ASGIApp, log: Callable[[str], None]) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 499

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except Exception:
            status = 500 if status == 499 else status  # uvicorn answers 500 for an unhandled error
            raise
        finally:
            ms = (time.perf_counter() - started) * 1000
            self.log(f"{scope['method']} {scope['path']} {status} {ms:.1f} ms")
