"""The OpenAI-compatible face of `serve`, for the chat tools people already run (Open WebUI,
LibreChat, the `llm` CLI, Continue, agents built on the `openai` client).

    GET  /v1/models            one model per served database: `edge-sql/NAME`
    POST /v1/chat/completions  the last user message is the question for the model's database;
                               the reply is Markdown (the answer's confidence and how it came
                               about, the SQL fenced, the first rows as a table, the row count,
                               the stats line), the same as structured data in the completion's
                               `edge_sql` field (`sql`, `stop`, `doubt`), the agent's rounds in
                               `reasoning_content` (what reasoning-aware clients fold away);
                               `stream: true` sends them as chat-completion chunks as they happen

The episode is the same one `/v1/ask` runs (same queue, limits, seed); of the conversation's
earlier turns, the last reply that answered with SQL and the question before it go with the new
question as its follow-up (what the model was given is in `edge_sql.given` and the reply's text). Errors have OpenAI's shape, `{"error": {"message", "type", "param",
"code"}}`. A client that closes the connection (or the stream) cancels the episode.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from edge_sql.agent.display import call_line, stats_line
from edge_sql.agent.doubt import doubt_line, doubt_of
from edge_sql.agent.events import CallRan, EpisodeEvent, Forced, RoundStarted, Thought
from edge_sql.agent.how import forced_reason
from edge_sql.agent.result import EpisodeResult, RoundRecord
from edge_sql.errors import BadRequest, EdgeSqlError, UnknownDatabase
from edge_sql.knowledge.answers import given_lines
from edge_sql.serve.http_plumbing import EventStream, http_status, outcome_or_cancel, read_body
from edge_sql.serve.queue import Finished, Job
from edge_sql.serve.request import AskRequest
from edge_sql.serve.service import Service

MODEL_PREFIX = "edge-sql/"
SQL_FENCE = re.compile(r"^(`{3,})sql\n(.*?)\n\1$", re.DOTALL | re.MULTILINE)  # as `fence` writes it
TABLE_ROWS = 20  # rows of the answer shown in the reply's table
CELL_CHARS = 60  # longer cells are cut in the table (the whole value is in /v1/ask's JSON)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[dict[str, Any]] | None = None  # Any: schema


class ChatRequest(BaseModel):
    """What this server reads of a chat-completion request; other fields (temperature, ...) are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage]
    stream: bool = False
    seed: int | None = None


def openai_error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status)


def error_body(exc: EdgeSqlError | None) -> tuple[int, dict[str, object]]:
    status, _ = http_status(exc)
    param, code = ("model", "model_not_found") if isinstance(exc, UnknownDatabase) else (None, None)
    kind = "invalid_request_error" if status < 500 else "server_error"
    return status, {"error": {"message": str(exc), "type": kind, "param": param, "code": code}}


def openai_routes(service: Service) -> list[Route]:
    created = int(time.time())

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": MODEL_PREFIX + name, "object": "model", "created": created, "owned_by": "edge-sql"}
                    for name in service.databases
                ],
            }
        )

    async def completions(request: Request) -> Response:
        return await chat_completions(service, request)

    return [Route("/v1/models", models, methods=["GET"]), Route("/v1/chat/completions", completions, methods=["POST"])]


def ask_request(chat: ChatRequest) -> AskRequest:
    """The question (the last user message's text) for the database the model names; when an
    earlier reply of this server answered with SQL, that reply's question and SQL are the
    follow-up (the conversation's earlier turns, as a follow-up question carries them)."""
    database = chat.model.removeprefix(MODEL_PREFIX)
    users = [i for i, message in enumerate(chat.messages) if message.role == "user"]
    if not users:
        raise BadRequest("messages has no user message: the last one is the question")
    arguments: dict[str, object] = {"question": message_text(chat.messages[users[-1]]), "database": database}
    if chat.seed is not None:
        arguments["seed"] = chat.seed
    follow_up = previous_answer(chat.messages[: users[-1]])
    if follow_up is not None:
        arguments["follow_up"] = follow_up
    return AskRequest.from_arguments(arguments)


def message_text(message: ChatMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in content or [] if part.get("type") == "text")


def previous_answer(earlier: list[ChatMessage]) -> dict[str, str] | None:
    """The last answer of the conversation so far: the assistant reply's SQL (the first fenced
    `sql` block of a reply that has an answer) and the user question before it; None without one."""
    replies = [i for i, message in enumerate(earlier) if message.role == "assistant"]
    if not replies:
        return None
    reply = message_text(earlier[replies[-1]])
    fenced = SQL_FENCE.search(reply)
    asked = [message_text(m) for m in earlier[: replies[-1]] if m.role == "user"]
    if fenced is None or reply.startswith("No answer") or not asked:
        return None
    return {"question": asked[-1], "sql": fenced.group(2).strip()}


async def chat_completions(service: Service, request: Request) -> Response:
    try:
        body = await read_body(request, service.limits.max_body_bytes)
        try:
            chat = ChatRequest.model_validate_json(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            return openai_error(400, f"{where}: {first['msg']}", param=where)
        job = service.submit(ask_request(chat))
    except EdgeSqlError as exc:
        status, error = error_body(exc)
        return JSONResponse(error, status_code=status, headers=http_status(exc)[1])
    reply = Reply(chat.model)
    if chat.stream:
        return EventStream(job, reply.chunks(job))
    outcome = await outcome_or_cancel(request, job)
    if outcome.result is None:
        status, error = error_body(outcome.error)
        return JSONResponse(error, status_code=status, headers=http_status(outcome.error)[1])
    return JSONResponse(reply.completion(outcome.result))


class Reply:
    """One chat completion's id, model and wrapping, whole or as chunks."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.model = model
        self.created = int(time.time())

    def completion(self, result: EpisodeResult) -> dict[str, object]:
        message = {"role": "assistant", "content": answer_markdown(result), "reasoning_content": reasoning(result)}
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage(result),
            "edge_sql": edge_sql_field(result),
        }

    def chunk(self, delta: dict[str, object], finish: str | None = None, **extra: object) -> bytes:
        data = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    async def chunks(self, job: Job) -> AsyncIterator[bytes]:
        """The role, a reasoning chunk per round, thinking and call as they happen, the answer, usage."""
        yield self.chunk({"role": "assistant", "content": ""})
        async for item in job.updates():
            if isinstance(item, Finished):
                if item.result is not None:
                    yield self.chunk({"content": answer_markdown(item.result)})
                    yield self.chunk({}, "stop", usage=usage(item.result), edge_sql=edge_sql_field(item.result))
                else:
                    _, error = error_body(item.error)
                    yield f"data: {json.dumps(error, ensure_ascii=False)}\n\n".encode()
            elif isinstance(item, EpisodeEvent):
                text = event_reasoning(item)
                if text:
                    yield self.chunk({"reasoning_content": text})
        yield b"data: [DONE]\n\n"


# ---- the text: the same whether streamed or not -----------------------------------------------


def event_reasoning(event: EpisodeEvent) -> str:
    match event:
        case RoundStarted(round=index):
            return f"Round {index}\n"
        case Thought(text=text) if text.strip():
            return text.strip() + "\n"
        case CallRan(call=call):
            return f"- {call_line(call)}\n"
        case Forced(reason=reason):
            return f"Final answer forced: {forced_reason(reason)}\n"
    return ""


def round_reasoning(record: RoundRecord) -> str:
    think = record.think.strip()
    return (
        f"Round {record.index}\n"
        + (think + "\n" if think else "")
        + "".join(f"- {call_line(call)}\n" for call in record.calls)
    )


def reasoning(result: EpisodeResult) -> str:
    forced = f"Final answer forced: {forced_reason(result.force_reason)}\n" if result.forced else ""
    return "".join(round_reasoning(r) for r in result.rounds) + forced


def edge_sql_field(result: EpisodeResult) -> dict[str, object]:
    """The reply's own field (the completion's, or the last chunk's): the answer's SQL and its
    doubt (agent/doubt.py), for clients that read more than the text."""
    return {
        "sql": result.sql,
        "stop": result.stop,
        "doubt": doubt_of(result).model_dump(mode="json"),
        "given": result.given.to_json() if result.given is not None else None,
    }


def usage(result: EpisodeResult) -> dict[str, object]:
    timings = result.stats.measured.timings
    cached = timings.restored_tokens
    prompt = timings.prompt_tokens + cached
    completion = timings.generated_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def answer_markdown(result: EpisodeResult) -> str:
    """The confidence line, the SQL fenced, the first rows as a table, the row count, the stats
    line; without an answer, why, the model's SQL that did not run, and then the confidence."""
    confidence = "\n".join(f"> {line}" for line in [*given_lines(result), doubt_line(doubt_of(result))])
    if result.sql is None:
        lines = [f"No answer: {result.error or result.stop}"]
        if result.answer:
            lines += ["", "The model's last SQL (it did not run):", "", fence(result.answer)]
        return "\n".join([*lines, "", confidence, "", stats_line(result, "no result")])
    count = f"{len(result.rows)}{'+' if result.truncated else ''} row{'' if len(result.rows) == 1 else 's'}"
    shown = f", first {TABLE_ROWS} shown" if len(result.rows) > TABLE_ROWS else ""
    parts = [confidence, fence(result.sql)]
    if result.columns:
        parts.append(markdown_table(result.columns, result.rows[:TABLE_ROWS]))
    parts += [f"{count}{shown}", stats_line(result, count)]
    return "\n\n".join(parts)


def fence(sql: str) -> str:
    ticks = "```" if "```" not in sql else "````"
    return f"{ticks}sql\n{sql.strip()}\n{ticks}"


def markdown_table(columns: list[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        if value is None:
            return "NULL"
        # a BLOB cell stays hex (the JSON's datasette form would read as a dict here)
        shown = bytes(value).hex() if isinstance(value, bytes | bytearray | memoryview) else value
        text = str(shown).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")
        return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + "…"

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
