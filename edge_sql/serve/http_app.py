"""The HTTP interface: a small Starlette app, plus the MCP streamable HTTP endpoint at /mcp.

    POST /v1/ask        {question, database, evidence?, seed?, vote?, abstain_below?, follow_up?, fresh?}
                        -> the JSON of `edge-sql run --json` (with `given`: the notes, verified answers
                        and follow-up the model was given; `chart`: the result's Vega-Lite spec or null);
                        with `Accept: text/event-stream`: events queued, running, round, tokens, call,
                        forced, then answer (that same JSON) or error
    GET  /v1/databases  names and tables
    GET  /health        model, variant, queue; `teaching`: "open", or "teach token" when teaching needs
                        `--teach-token`, and `teacher`: whether this request may teach (the page's buttons)
    POST /v1/query      {database, sql} -> columns, rows, truncated, checks, chart: the client's own read-only SQL
                        (the web page's "Run"), run as the tools run an answer
    GET  /              the web page (web.py), served without the token; its API calls carry it
    GET  /metrics       Prometheus text format (metrics.py)
    GET  /v1/models, POST /v1/chat/completions: OpenAI-compatible (openai_api.py)
    /v1/notes, /v1/verify: notes and verified answers per database (knowledge_routes.py); with
                        `--teach-token`, teaching needs it (tokens.py: 403), asking only the token

Every request first passes the guard (guard.py: Host 421, Origin 403, a POST body not JSON 415)
and, with `access_log`, is logged as one line when its response ends.

Errors are JSON `{"error": message}`: 400 for SQL that fails or is refused (/v1/query, with the
tools' message), 401 without the bearer token (when one is set), 403 teaching without the teach
token (tokens.py), 404 for an unknown database, 409 verifying a question that has a verified
answer with other SQL without "replace", 413 for a body over the limit, 422 for a malformed body
or a broken limit, 503 with Retry-After when the queue is full or a request waited too long. A
client that disconnects cancels its episode.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Lifespan

from edge_sql.agent.events import CallRan, EpisodeEvent, Forced, RoundStarted, Thought, Tokens
from edge_sql.agent.result import json_value
from edge_sql.charts import chart_for
from edge_sql.errors import EdgeSqlError
from edge_sql.serve.access_log import AccessLog
from edge_sql.serve.guard import AllowList, Guard
from edge_sql.serve.http_plumbing import (
    EventStream,
    error,
    error_response,
    http_status,
    outcome_or_cancel,
    read_body,
)
from edge_sql.serve.knowledge_routes import knowledge_routes
from edge_sql.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from edge_sql.serve.openai_api import openai_routes
from edge_sql.serve.queue import Finished, Job, Position
from edge_sql.serve.request import AskRequest, QueryRequest
from edge_sql.serve.service import Service
from edge_sql.serve.tokens import BearerTokens, may_teach
from edge_sql.serve.web import PageInFront


def build_app(
    service: Service,
    *,
    token: str | None = None,
    teach_token: str | None = None,
    mcp_app: Starlette | None = None,
    mcp_lifespan: Lifespan[Starlette] | None = None,
    allow: AllowList | None = None,
    access_log: Callable[[str], None] | None = None,
) -> ASGIApp:
    """The ASGI app; `mcp_app` (the SDK's streamable HTTP app) adds its /mcp route and lifespan.

    `allow` is what the guard lets in (default: loopback only); `access_log` gets one line per request;
    with `teach_token`, teaching needs it and asking only `token` (tokens.py).
    """

    async def ask_endpoint(request: Request) -> Response:
        return await ask(service, request)

    async def databases_endpoint(request: Request) -> Response:
        return JSONResponse({"databases": service.list_databases()})

    async def health_endpoint(request: Request) -> Response:
        teaching = {"teaching": "teach token" if teach_token else "open", "teacher": may_teach(request.scope)}
        return JSONResponse(service.health() | teaching)

    async def query_endpoint(request: Request) -> Response:
        return await query(service, request)

    async def metrics_endpoint(request: Request) -> Response:
        return Response(service.metrics.exposition(), media_type=METRICS_CONTENT_TYPE)

    routes: list[BaseRoute] = [
        Route("/v1/ask", ask_endpoint, methods=["POST"]),
        Route("/v1/databases", databases_endpoint, methods=["GET"]),
        Route("/health", health_endpoint, methods=["GET"]),
        Route("/v1/query", query_endpoint, methods=["POST"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
    ]
    routes.extend(knowledge_routes(service))
    routes.extend(openai_routes(service))
    if mcp_app is not None:
        routes.extend(mcp_app.routes)
    app = Starlette(routes=routes, lifespan=mcp_lifespan, exception_handlers={HTTPException: _http_error})
    guarded: ASGIApp = Guard(
        PageInFront(BearerTokens(app, token, teach_token) if token or teach_token else app),
        allow if allow is not None else AllowList.build("127.0.0.1"),
    )
    return AccessLog(guarded, access_log) if access_log is not None else guarded


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown path 404, wrong method 405) as JSON too."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers) if exc.headers else None
    return error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", headers=headers)


# ---- POST /v1/query --------------------------------------------------------------------------


async def query(service: Service, request: Request) -> Response:
    try:
        body = await read_body(request, service.limits.max_body_bytes)
        sql = QueryRequest.from_json(body)
        result = await asyncio.to_thread(service.query, sql.database, sql.sql)
        checks = await asyncio.to_thread(service.check_query, sql.database, sql.sql, result)
    except EdgeSqlError as exc:
        return error_response(exc)
    return JSONResponse(
        {
            "database": sql.database,
            "sql": sql.sql,
            "columns": result.columns,
            "rows": [[json_value(v) for v in row] for row in result.rows],
            "truncated": result.truncated,
            "checks": checks.to_json(),
            "chart": chart_for(result.columns, result.rows, truncated=result.truncated),
        }
    )


# ---- POST /v1/ask ----------------------------------------------------------------------------


async def ask(service: Service, request: Request) -> Response:
    try:
        body = await read_body(request, service.limits.max_body_bytes)
        job = service.submit(AskRequest.from_json(body))
    except EdgeSqlError as exc:
        return error_response(exc)
    if "text/event-stream" in request.headers.get("accept", ""):
        return EventStream(job, job_events(job))
    outcome = await outcome_or_cancel(request, job)
    if outcome.result is not None:
        return JSONResponse(outcome.result.to_json(transcript=False))
    return error_response(outcome.error)


# ---- Server-sent events ----------------------------------------------------------------------


def sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def job_events(job: Job) -> AsyncIterator[bytes]:
    """One SSE event per queue move, round, call and forced answer, then `answer` or `error`;
    while the model writes, `tokens` events (at most two a second) with the episode's generated
    tokens, their rate and the text written since the last one.

    Every event but `answer` (which is exactly the JSON of `run --json`) carries `elapsed_s`:
    seconds from the request's arrival to the moment the server produced the event.
    """
    async for item in job.updates():
        elapsed = {"elapsed_s": round(job.update_elapsed_s, 4)}
        if isinstance(item, Position):
            yield (
                sse("running", elapsed) if item.position == 0 else sse("queued", {"position": item.position, **elapsed})
            )
        elif isinstance(item, Finished):
            if item.result is not None:
                yield sse("answer", item.result.to_json(transcript=False))
            else:
                status, _ = http_status(item.error)
                yield sse("error", {"error": str(item.error), "status": status, **elapsed})
        else:
            data = event_data(item)
            if data is not None:
                yield sse(data[0], {**data[1], **elapsed})


def event_data(event: EpisodeEvent) -> tuple[str, dict[str, object]] | None:
    """An episode event's SSE name and fields (None: `Answered`, which the `answer` event follows)."""
    match event:
        case RoundStarted(round=index):
            return "round", {"round": index}
        case Tokens(round=index, tokens=tokens, tok_s=tok_s, text=text):
            return "tokens", {"round": index, "tokens": tokens, "tok_s": tok_s, "text": text}
        case Thought(round=index, text=text):
            return "think", {"round": index, "think": text}
        case CallRan(round=index, call=call):
            return "call", {"round": index, **call.to_json()}
        case Forced(round=index, reason=reason):
            return "forced", {"round": index, "reason": reason}
    return None
