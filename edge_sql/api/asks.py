"""What the Agent is asked: `Ask` (one question with its own database, evidence, seed, vote and
prompt), how `ask_many`'s arguments become Asks, the databases they name opened once each, and
the result of a question that could not be asked."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from edge_sql.agent.prompt import PromptTemplate
from edge_sql.agent.result import EpisodeResult
from edge_sql.agent.stats import EpisodeStats
from edge_sql.errors import EdgeSqlError
from edge_sql.runtime import Session
from edge_sql.tools import ReadOnlyDatabase


@dataclass(frozen=True)
class Ask:
    """One question of `Agent.ask_many` or `Agent.each` with what it carries of its own (a bench
    or an evaluation mixes databases and evidence); a field left None takes `ask_many`'s argument.
    `vote=K` (or "auto"): answered by a vote of K sampled episodes (seeds seed..seed+K-1, as
    `ask(vote=K)`); `prompt`: its own prompt template (the bench's schema-given mode), else the
    Agent's."""

    question: str
    db: str | Path | ReadOnlyDatabase | None = None
    evidence: str | None = None
    seed: int | None = None
    vote: int | Literal["auto"] | None = None
    prompt: PromptTemplate | None = None


Watch = Callable[["Ask", Session, EpisodeResult], None]
"""Sees each episode's ask, the session it ran on and its result while the session is still
the episode's (what a caller reads off the session: timings, tokens)."""


def ask_item(
    question: str | Ask | tuple, db: str | Path | ReadOnlyDatabase | None, evidence: str | None, seed: int | None
) -> Ask:
    """`question` as an Ask, its empty fields filled from `ask_many`'s arguments."""
    item = question if isinstance(question, Ask) else Ask(*question) if isinstance(question, tuple) else Ask(question)
    item = dataclasses.replace(
        item,
        db=item.db if item.db is not None else db,
        evidence=item.evidence if item.evidence is not None else evidence,
        seed=item.seed if item.seed is not None else seed,
    )
    if item.db is None:
        raise ValueError(f"no database for the question {item.question!r}: pass db, or an Ask with its own")
    return item


def db_key(db: str | Path | ReadOnlyDatabase | None) -> Path | ReadOnlyDatabase:
    assert db is not None  # ask_item filled it
    return db if isinstance(db, ReadOnlyDatabase) else Path(db)


def open_each(items: list[Ask], stack: ExitStack) -> dict[object, ReadOnlyDatabase | EdgeSqlError]:
    """Every database the items name, each file opened once (closed with `stack`); a file that
    cannot be opened maps to its error, which its questions then raise."""
    databases: dict[object, ReadOnlyDatabase | EdgeSqlError] = {}
    for item in items:
        key = db_key(item.db)
        if key in databases:
            continue
        if isinstance(key, ReadOnlyDatabase):
            databases[key] = key
            continue
        try:
            databases[key] = stack.enter_context(ReadOnlyDatabase(key))
        except EdgeSqlError as exc:
            databases[key] = exc
    return databases


def error_result(item: Ask, error: BaseException | str, prompt_version: str, stop: str = "error") -> EpisodeResult:
    """What `ask_many` returns for a question that could not be asked (`stop="cancelled"`: one
    stopped while it waited for a session)."""
    return EpisodeResult(
        question=item.question,
        evidence=item.evidence,
        sql=None,
        columns=[],
        rows=[],
        truncated=False,
        forced=False,
        fallback=False,
        answer=None,
        rounds=[],
        stats=EpisodeStats(),
        transcript="",
        stop=stop,
        error=str(error),
        prompt_version=prompt_version,
    )
