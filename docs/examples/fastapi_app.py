"""edge-sql embedded in a FastAPI service: one Agent made at start-up from the command line's
settings, questions about the bundled Chinook database, notes and verified answers, and a
/health that answers at once while episodes run. tests/test_embedding.py runs this file.

    pip install edge-sql fastapi
    EDGE_SQL_PROFILE=small uvicorn fastapi_app:app
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import TypeVar

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

import edge_sql
from edge_sql import Agent, EpisodeResult

DB = Path(str(files("edge_sql") / "data" / "chinook" / "chinook.sqlite"))
T = TypeVar("T")


class Question(BaseModel):
    question: str
    timeout: float | None = None  # seconds, the wait for a free session included


class NoteIn(BaseModel):
    text: str


class VerifiedIn(BaseModel):
    question: str
    sql: str


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # edge-sql.toml, $EDGE_SQL_HOME/config.toml, EDGE_SQL_PROFILE and EDGE_SQL_<OPTION>, as
    # `edge-sql run` reads them; keywords given here win; nothing is downloaded
    app.state.agent = Agent.from_config()
    app.state.agent.warm_up()  # what the first question would wait for (and hold the GIL for), now
    yield
    app.state.agent.close(cancel=True)  # stops the running episodes; no thread of edge-sql's is left


app = FastAPI(lifespan=lifespan)


def agent(request: Request) -> Agent:
    found: Agent = request.app.state.agent
    return found


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """`work`, cancelled when the client goes away: its episode stops at the next token."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await asyncio.wait({task}, timeout=0.1)
        if not task.done() and await request.is_disconnected():
            task.cancel()
            await asyncio.wait({task})
            raise HTTPException(499, "the client closed the request")  # nobody reads it
    return task.result()


@app.get("/health")
async def health(request: Request) -> dict[str, int | str]:
    return {"status": "ok", **agent(request).queue_state()}


@app.post("/ask")
async def ask(body: Question, request: Request) -> EpisodeResult:  # written as result.to_json(transcript=False)
    try:
        return await unless_gone(request, agent(request).ask_async(body.question, DB, timeout=body.timeout))
    except edge_sql.QueueFull as exc:
        raise HTTPException(503, str(exc), headers={"Retry-After": str(exc.retry_after_s)}) from None
    except edge_sql.QuestionError as exc:
        raise HTTPException(422, str(exc)) from None


@app.post("/notes", status_code=201)
async def add_note(body: NoteIn, request: Request) -> dict[str, object]:
    knowledge = agent(request).knowledge
    try:
        note = await agent(request).run_async(knowledge.add_note, DB, body.text)
    except edge_sql.KnowledgeError as exc:
        raise HTTPException(422, str(exc)) from None
    return note.to_json()


@app.post("/verified", status_code=201)
async def verify(body: VerifiedIn, request: Request) -> dict[str, object]:
    knowledge = agent(request).knowledge
    try:
        answer = await agent(request).run_async(knowledge.verify, DB, body.question, body.sql)
    except edge_sql.KnowledgeError as exc:
        raise HTTPException(422, str(exc)) from None
    return answer.to_json()
