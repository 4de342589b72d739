"""What an episode reports while it runs, for streaming: one small type per kind of event.

A round starts (`RoundStarted`), the model is writing (`Tokens`), its thinking is written
(`Thought`), a call ran (`CallRan`), the answer is forced (`Forced`), the episode answered
(`Answered`). Consumers (the CLI's live view, serve's SSE stream, MCP progress, the OpenAI
reasoning stream) `match` on the class; each carries only the fields of its kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from edge_sql.agent.result import CallRecord


@dataclass(frozen=True)
class RoundStarted:
    """Tool round `round` (from 1) begins."""

    round: int


@dataclass(frozen=True)
class Tokens:
    """The model is writing: `text` written since the round's last `Tokens` event, the episode's
    generated tokens so far and their rate while generating."""

    round: int
    text: str
    tokens: int
    tok_s: float


@dataclass(frozen=True)
class Thought:
    """The round's think block, before its calls run."""

    round: int
    text: str


@dataclass(frozen=True)
class CallRan:
    """A call of the round ran; `call` is what it returned to the model."""

    round: int
    call: CallRecord


@dataclass(frozen=True)
class Forced:
    """The final answer is forced: `reason` is "max_rounds", "failed_queries" or "context"."""

    round: int
    reason: str


@dataclass(frozen=True)
class Answered:
    """The episode's last event: `sql` is the SQL it returns (None: no answer)."""

    round: int
    sql: str | None


EpisodeEvent = RoundStarted | Tokens | Thought | CallRan | Forced | Answered

EventHandler = Callable[[EpisodeEvent], None]
