"""What the HTTP app's routes share, whatever they speak (edge-sql's /v1 API, OpenAI's chat
completions): the one table from errors to statuses, bounded body reading, cancelling a job
when its client goes away, and the event-stream response.

It sits below both route modules (`http_app.py`, `openai_api.py`), so neither imports the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from edge_sql.errors import (
    BadRequest,
    Cancelled,
    EdgeSqlError,
    KnowledgeError,
    QueryError,
    RequestTooLarge,
    RetryLater,
    TeachingRefused,
    UnknownDatabase,
    VerifiedExists,
)
from edge_sql.serve.queue import Finished, Job


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


# The one table from serve's errors to HTTP statuses (a subclass takes its nearest entry; 500 else).
HTTP_STATUS: dict[type[EdgeSqlError], int] = {
    QueryError: 400,  # /v1/query: the SQL failed or was refused
    RequestTooLarge: 413,
    BadRequest: 422,
    KnowledgeError: 422,  # a note or verified answer refused (empty, over its bound, SQL that writes), no such note
    VerifiedExists: 409,  # the question has a verified answer with other SQL: "replace": true replaces it
    TeachingRefused: 403,  # teaching without the --teach-token
    UnknownDatabase: 404,
    RetryLater: 503,
    Cancelled: 499,  # nobody reads it: the client is gone
}


def http_status(exc: EdgeSqlError | None) -> tuple[int, dict[str, str] | None]:
    """The status and extra headers for an error (503 comes with Retry-After)."""
    status = next((HTTP_STATUS[kind] for kind in type(exc).__mro__ if kind in HTTP_STATUS), 500)
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, RetryLater) else None
    return status, headers


def error_response(exc: EdgeSqlError | None) -> JSONResponse:
    status, headers = http_status(exc)
    return error(status, str(exc), headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than `limit` bytes whether or not Content-Length says so."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(f"the request body has {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"the request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def outcome_or_cancel(request: Request, job: Job) -> Finished:
    """The job's outcome; the job is cancelled when the client goes away first (or this waiting
    is cancelled), so nobody's episode runs on for a reader who left."""
    watcher = asyncio.ensure_future(cancel_on_disconnect(request.receive, job))
    try:
        return await job.wait()
    finally:
        watcher.cancel()
        if not job.finished:
            job.cancel()


async def cancel_on_disconnect(receive: Receive, job: Job) -> None:
    """Wait for the client to go away (the body is already read), then cancel the job."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            job.cancel()
            return


class EventStream(Response):
    """A text/event-stream response of `chunks` (the job's events, already encoded) that cancels
    the job as soon as the client disconnects."""

    def __init__(self, job: Job, chunks: AsyncIterator[bytes]) -> None:
        self.job = job
        self.chunks = chunks
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.ensure_future(cancel_on_disconnect(receive, self.job))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in self.chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client is gone; the watcher has cancelled the job
            pass
        finally:
            watcher.cancel()
            if not self.job.finished:
                self.job.cancel()
