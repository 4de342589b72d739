"""Checks shared by the episode tests (random fixture, trained fixture, SmolLM2)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from edge_sql.agent import Budget, EpisodeResult, load_prompt, parse_final_turn, parse_tool_turn
from edge_sql.agent.result import CallRecord

PROMPT = load_prompt()
ASSISTANT_OPEN = PROMPT.chat.open_turn("assistant") + PROMPT.chat.assistant_prefix


@dataclass
class EpisodeRun:
    """One test episode: its set-up, database, seed and budget, the result, and what the session held."""

    setup: str
    db: str
    seed: int
    budget: Budget
    result: EpisodeResult
    session_tokens: int  # the session's own count of context tokens afterwards
    session_text_matches: bool  # the context's tokens spell the transcript exactly


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assistant_turns(transcript: str) -> list[str]:
    """The text of each assistant turn after its prefix, without the end-of-turn token."""
    turns = transcript.split(ASSISTANT_OPEN)[1:]
    return [turn.split(PROMPT.chat.turn_end)[0] for turn in turns]


def check_turns_parse(result: EpisodeResult) -> int:
    """Every assistant turn parses with the strict parser and matches the recorded calls.

    Returns the number of turns checked.
    """
    chat = PROMPT.chat
    turns = assistant_turns(result.transcript)
    tool_turns = turns[:-1] if result.forced else turns
    assert len(tool_turns) == len(result.rounds), result.transcript
    for turn, record in zip(tool_turns, result.rounds):
        parsed = parse_tool_turn(turn, think_end=chat.think_end, after_think=chat.after_think)
        assert [(c.tool, c.args) for c in parsed.calls] == [(c.tool, c.args) for c in record.calls]
        assert parsed.think == record.think
    if result.forced:
        final = parse_final_turn(turns[-1], think_end=chat.think_end, after_think=chat.after_think)
        assert final.sql == result.answer
    return len(turns)


def query_calls(result: EpisodeResult) -> list[CallRecord]:
    """The episode's `run_query` calls, in order."""
    return [call for record in result.rounds for call in record.calls if call.tool == "run_query"]


def last_good_query(result: EpisodeResult) -> str | None:
    """The SQL of the episode's last `run_query` that ran without error."""
    good = [call.args["sql"] for call in query_calls(result) if call.ok]
    return good[-1] if good else None


def check_each_token_evaluated_once(result: EpisodeResult, session_tokens: int) -> None:
    """Prompt, generated and restored tokens add up to the transcript, which is what the
    session holds: no token is evaluated twice, and restored ones (the shared prompt prefix,
    from a saved state) are not evaluated at all."""
    stats = result.stats.to_json()
    restored = stats["prefix_tokens_restored"]
    assert restored >= 0
    assert stats["prompt_tokens_evaluated"] + stats["generated_tokens"] + restored == stats["transcript_tokens"]
    assert stats["transcript_tokens"] == session_tokens
