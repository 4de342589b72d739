"""How an answer came about when the model did not simply submit it, in words: what the
terminal shows above the SQL and `doubt` (`agent/doubt.py`) carries, in a module of its own so
that neither the CLI's display nor the result loads pydantic for it."""

from __future__ import annotations

from typing import Protocol

from edge_sql.checks.findings import FORCE_REASONS

FORCED_NOTE = "forced final answer"
FALLBACK_NOTE = "fallback"


class HowAnswered(Protocol):
    """What says how an answer came about (`EpisodeResult` is one): a protocol, so that the
    result imports this module and not the reverse."""

    @property
    def forced(self) -> bool: ...
    @property
    def force_reason(self) -> str | None: ...
    @property
    def fallback(self) -> bool: ...


def answer_notes(result: HowAnswered) -> list[str]:
    """How the answer came about when the model did not simply submit it: forced, or a fallback
    (what the terminal shows above the SQL, and the serving surfaces beside their confidence)."""
    notes = []
    if result.forced:
        notes.append(f"{FORCED_NOTE}: {forced_reason(result.force_reason)}")
    if result.fallback:
        notes.append(f"{FALLBACK_NOTE}: the model's answer did not run; this is the last query that ran")
    return notes


def forced_reason(reason: str | None) -> str:
    """Why the final answer was forced, in words (`max_rounds`: `tool rounds used up`)."""
    return FORCE_REASONS.get(reason or "", reason or "no reason given")
