"""The MCP interface: tools `ask` and `list_databases` on the official Python SDK.

`ask` queues one episode on the shared agent, reports the queue position and every round and
call as MCP progress, and returns a bounded summary as structured content plus a short text;
both say how sure the answer is and how it came about (agent/doubt.py).
A client's cancellation cancels the tool's task; the job is then withdrawn from the queue or
its episode stopped at the next token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar, TypeVarTuple

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from edge_sql import __version__
from edge_sql.agent.display import plural
from edge_sql.agent.doubt import Doubt, doubt_line, doubt_of
from edge_sql.agent.events import CallRan, EpisodeEvent, Forced, RoundStarted, Tokens
from edge_sql.agent.how import forced_reason
from edge_sql.agent.result import EpisodeResult, json_value
from edge_sql.errors import EdgeSqlError
from edge_sql.knowledge.answers import given_lines
from edge_sql.serve.queue import Finished, Position
from edge_sql.serve.request import AskRequest, NoteRequest, VerifyRequest
from edge_sql.serve.service import Service
from edge_sql.serve.tokens import check_teacher

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
INSTRUCTIONS = (
    "Ask questions in plain language about the SQLite databases this server was started with. "
    "Call list_databases for their names and tables, then ask(question, database). Each answer "
    "is one SQL query with its result; the databases are opened read-only. A question can follow "
    "the last answer (follow_up: its question and SQL). When the user says an answer is right (or "
    "fixes its SQL), call verify; add_note keeps a fact about a database for later questions."
)


class CallOutput(BaseModel):
    tool: str
    args: dict[str, Any]  # Any: schema
    ok: bool
    output: str = Field(description="What the tool returned to the model (shortened)")


class RoundOutput(BaseModel):
    round: int
    calls: list[CallOutput]


class AskOutput(BaseModel):
    sql: str | None = Field(description="The answer query (null when there is none)")
    columns: list[str]
    rows: list[list[Any]] = Field(description="The first rows of the answer")  # Any: schema
    row_count: int = Field(description="Rows the answer returned (up to the server's row limit)")
    more_rows: bool = Field(description="True when the query had more rows than row_count")
    forced: bool = Field(description="The answer came from the forced final turn (tool rounds used up)")
    fallback: bool = Field(description="The model's own answer did not run; sql is its last query that ran")
    stop: str = Field(description="submitted, final_answer, cancelled, error or abstained (a vote agreed too little)")
    error: str | None
    rounds: list[RoundOutput]
    wall_s: float = Field(description="Seconds the episode took (without the wait in the queue)")
    checks: dict[str, Any] | None = Field(  # Any: schema
        default=None,
        description=(
            "The answer checked: confidence (checked, unchecked, doubtful) with its reasons, each table, "
            "column and compared value with the round and call that showed it, and whether the database holds "
            "each value (the closest stored values when not)"
        ),
    )
    doubt: Doubt = Field(
        description="How sure the answer is and how it came about: confidence, reasons, forced, fallback, vote"
    )
    given: dict[str, Any] | None = Field(  # Any: schema
        default=None,
        description=(
            "What the model was given besides the question: notes, similar verified answers (examples), the "
            "follow-up pair; or the verified answer it was answered from at once (stop 'verified')"
        ),
    )
    given_text: list[str] = Field(default_factory=list, description="The same in words")
    chart: dict[str, Any] | None = Field(  # Any: schema
        default=None,
        description=(
            "A Vega-Lite spec of the whole result, chosen by written rules (a time with numbers: a line; a "
            "category with a number: bars; ...); null when no chart suits the result"
        ),
    )


class DatabaseOutput(BaseModel):
    name: str
    tables: list[str]


class DatabasesOutput(BaseModel):
    databases: list[DatabaseOutput]


class _Arguments(ArgModelBase):
    """Hands the tool its arguments untouched, so that `AskRequest` alone validates them."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:  # Any: schema
        return {"arguments": dict(self.model_extra or {})}


def build_mcp(service: Service) -> MCPServer:
    """An MCPServer exposing `service`: run it over stdio or mount its streamable HTTP app."""
    limits = service.limits

    async def ask(arguments: dict[str, Any], ctx: Context) -> Annotated[CallToolResult, AskOutput]:  # Any: schema
        """Answer a question about one of the server's databases with a SQL query and its rows.

        `database` is a name from list_databases; `evidence` is an optional hint (e.g. what a
        term means); `seed` makes the answer reproducible. Progress reports each tool round as
        the local model explores the database, and the tokens it has generated while it writes.
        """
        try:
            job = service.submit(AskRequest.from_arguments(arguments))
        except EdgeSqlError as exc:
            raise ToolError(str(exc)) from None
        step = 0
        try:
            async for item in job.updates():
                if isinstance(item, Finished):
                    return _tool_result(item, limits.mcp_rows, limits.mcp_output_chars)
                message = _progress_message(item)
                if message is not None:
                    step += 1
                    await ctx.report_progress(step, None, message)
        finally:
            if not job.finished:
                job.cancel()  # the client cancelled (or went away): stop the episode
        raise AssertionError("updates() always ends with Finished")

    def list_databases() -> DatabasesOutput:
        """The databases this server can answer questions about, with their tables."""
        return DatabasesOutput(databases=[DatabaseOutput(**entry) for entry in service.list_databases()])

    async def add_note(
        ctx: Context, database: str, text: str, question: str | None = None
    ) -> dict[str, Any]:  # Any: schema
        """Teach the model a fact about a database, given with every question from now on (e.g.
        'amounts are in cents'); with `question`, only with questions that have those words.
        Stored in edge-sql's own knowledge database, never in the user's database."""
        _may_teach(ctx)
        note = await _knowledge(service.add_note, NoteRequest(database=database, text=text, question=question), "MCP")
        return {"note": note.to_json(), "message": f"added note {note.id}: {note.text}"}

    async def list_notes(database: str) -> dict[str, Any]:  # Any: schema
        """A database's notes and verified answers (stale ones flagged: a table they name is gone,
        or the answer's SQL no longer holds)."""
        return dict(await _knowledge(service.knowledge_of, database))

    async def remove_note(ctx: Context, database: str, note_id: int) -> dict[str, Any]:  # Any: schema
        """Delete one note of a database (its id from list_notes; the history keeps it)."""
        _may_teach(ctx)
        note = await _knowledge(service.remove_note, database, note_id, "MCP")
        return {"removed": note_id, "note": note.to_json(), "message": f"removed note {note_id}: {note.text}"}

    async def verify(
        ctx: Context,
        database: str,
        question: str,
        sql: str,
        evidence: str | None = None,
        follows: str | None = None,
        replace: bool = False,
    ) -> dict[str, Any]:  # Any: schema
        """Mark an answer right, as a person confirmed it: `sql` (the answer's SQL, or its fix)
        answers `question`. The same question is then answered at once from it, and similar ones
        are given it as an example. Only call this for what the user confirmed. `follows`: the
        question this one followed, for the answer to a follow-up. A question that already has a
        verified answer with other SQL is refused, naming it: pass `replace` only once the user
        confirmed replacing it. The reply says what was stored (`message`)."""
        _may_teach(ctx)
        confirmed = VerifyRequest(
            database=database, question=question, sql=sql, evidence=evidence, follows=follows, replace=replace
        )
        return (await _knowledge(service.verify, confirmed, "MCP")).reply_json()

    async def history(database: str) -> dict[str, Any]:  # Any: schema
        """What teaching changed in a database's notes and verified answers, oldest first: when,
        from which surface, the old and the new SQL or text. `undo` takes a change's id."""
        return dict(await _knowledge(service.history, database))

    async def undo(ctx: Context, database: str, change: int) -> dict[str, Any]:  # Any: schema
        """Undo one change from `history` (only when the user asks): an added note or answer is
        removed, a replaced or removed one comes back."""
        _may_teach(ctx)
        undone = await _knowledge(service.undo, database, change, "MCP")
        return {"undone": undone.to_json(), "message": undone.undone_line()}

    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    # they write edge-sql's own knowledge database (never the user's): not read-only, not destructive
    teaching = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    ask_tool = Tool.from_function(ask, annotations=read_only)
    # the SDK derives a tool's schema and validation from its signature; `ask` takes HTTP's
    # request model instead, so both interfaces accept and refuse the same requests
    ask_tool.parameters = AskRequest.model_json_schema()
    ask_tool.fn_metadata.arg_model = _Arguments
    return MCPServer(
        "edge-sql",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        tools=[
            ask_tool,
            Tool.from_function(list_databases, annotations=read_only),
            *(Tool.from_function(fn, annotations=teaching) for fn in (add_note, list_notes, remove_note, verify)),
            Tool.from_function(history, annotations=read_only),
            Tool.from_function(undo, annotations=teaching),
        ],
    )


async def _knowledge(call: Callable[[*Ts], T], *args: *Ts) -> T:
    """A knowledge call of the service (SQLite, off the event loop); its refusal is a tool error."""
    try:
        return await anyio.to_thread.run_sync(call, *args)
    except EdgeSqlError as exc:
        raise ToolError(str(exc)) from None


def _may_teach(ctx: Context) -> None:
    """A tool error (nothing stored) for a call over HTTP without the teach token, where one is set."""
    request = ctx.request_context.request
    try:
        check_teacher(getattr(request, "scope", None))
    except EdgeSqlError as exc:
        raise ToolError(str(exc)) from None


def _progress_message(item: Position | EpisodeEvent) -> str | None:
    if isinstance(item, Position):
        return "running" if item.position == 0 else f"queued: position {item.position}"
    match item:
        case RoundStarted(round=index):
            return f"round {index}"
        case Tokens(round=index, tokens=tokens, tok_s=tok_s):
            return f"round {index}: {plural(tokens, 'token')} generated, {tok_s:.1f} tok/s"
        case CallRan(round=index, call=call):
            return f"round {index}: {call.tool} {'ok' if call.ok else 'error'}"
        case Forced(reason=reason):
            return f"final answer forced: {forced_reason(reason)}"
    return None  # Thought: too long for a progress line; Answered: the result follows at once


def _tool_result(outcome: Finished, max_rows: int, max_output: int) -> CallToolResult:
    if outcome.result is None:
        raise ToolError(str(outcome.error))
    output = ask_output(outcome.result, max_rows, max_output)
    return CallToolResult(
        content=[TextContent(type="text", text=summary_text(output))], structured_content=output.model_dump(mode="json")
    )


def ask_output(result: EpisodeResult, max_rows: int, max_output: int) -> AskOutput:
    """The bounded MCP view of an episode: first rows, total count, short call outputs."""

    def short(text: str) -> str:
        return text if len(text) <= max_output else text[:max_output] + "…"

    return AskOutput(
        sql=result.sql,
        columns=list(result.columns),
        rows=[[json_value(v) for v in row] for row in result.rows[:max_rows]],
        row_count=len(result.rows),
        more_rows=result.truncated,
        forced=result.forced,
        fallback=result.fallback,
        stop=result.stop,
        error=result.error,
        wall_s=result.stats.measured.wall_s,
        rounds=[
            RoundOutput(
                round=r.index,
                calls=[CallOutput(tool=c.tool, args=c.args, ok=c.ok, output=short(c.output)) for c in r.calls],
            )
            for r in result.rounds
        ],
        checks=result.checks.to_json() if result.checks is not None else None,
        doubt=doubt_of(result),
        given=result.given.to_json() if result.given is not None else None,
        given_text=given_lines(result),
        chart=result.chart,
    )


def summary_text(output: AskOutput) -> str:
    """A few lines a chat client can show: the SQL, the row count, the rounds, how sure it is and
    how it came about."""
    calls = sum(len(r.calls) for r in output.rounds)
    lines = [f"SQL: {output.sql}" if output.sql else f"No answer ({output.stop}): {output.error}"]
    if output.sql:
        count = f"{output.row_count}{'+' if output.more_rows else ''} row{'' if output.row_count == 1 else 's'}"
        shown = f", first {len(output.rows)} in the structured result" if output.rows else ""
        lines.append(f"{count}{shown}; columns: {', '.join(output.columns)}")
    lines.append(f"{plural(len(output.rounds), 'round')}, {plural(calls, 'call')}")
    lines += [*output.given_text, doubt_line(output.doubt)]
    return "\n".join(lines)
