"""How sure an answer is and how it came about, said the same way wherever it goes: the Python
result's `doubt`, and what `serve` sends.

A wrong answer in a chat window looks as authoritative as a right one, so the OpenAI-compatible
reply and MCP's result carry the answer's confidence (edge_sql/checks), its reasons, and whether
the answer was forced, a fallback or voted (with the vote's agreement): as one line of text and
as the structured `Doubt` below. /v1/ask's JSON (that of `run --json`) holds the same parts in
`checks`, `forced`, `force_reason`, `fallback` and `stats.vote`.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, Field

from edge_sql.agent.how import FALLBACK_NOTE, FORCED_NOTE, HowAnswered, answer_notes
from edge_sql.agent.stats import EpisodeStats
from edge_sql.checks.findings import Checks


class Answer(HowAnswered, Protocol):
    """What the doubt is read from (`EpisodeResult` is one; the result imports this module
    where its `doubt` is read, so this module names no result class)."""

    @property
    def checks(self) -> Checks | None: ...
    @property
    def stats(self) -> EpisodeStats: ...


class VoteAgreement(BaseModel):
    k: int = Field(description="Episodes the vote ran")
    agreed: int = Field(description="Episodes that returned the chosen answer's result")
    agreement: float = Field(description="agreed / k")


class Doubt(BaseModel):
    confidence: str | None = Field(
        description="checked, unchecked or doubtful (edge_sql's answer checks); null when there was no SQL to check"
    )
    reasons: list[str] = Field(description="Why: the findings that set the confidence")
    forced: bool = Field(description="The answer came from the forced final turn (tool rounds used up)")
    force_reason: str | None = Field(description="max_rounds, failed_queries or context, when forced")
    fallback: bool = Field(description="The model's own answer did not run; the SQL is its last query that ran")
    vote: VoteAgreement | None = Field(description="How far a vote's episodes agreed (null without a vote)")
    how: list[str] = Field(description="How the answer came about, in words (empty: the model submitted it)")


def doubt_of(result: Answer) -> Doubt:
    checks, vote = result.checks, result.stats.vote
    agreement = None
    if vote is not None:
        agreement = VoteAgreement(k=vote.k, agreed=vote.agreed, agreement=round(vote.agreed / vote.k, 4))
    return Doubt(
        confidence=checks.confidence if checks is not None else None,
        reasons=checks.reasons if checks is not None else [],
        forced=result.forced,
        force_reason=result.force_reason,
        fallback=result.fallback,
        vote=agreement,
        how=[*answer_notes(result), *([vote_words(agreement)] if agreement is not None else [])],
    )


def vote_words(vote: VoteAgreement) -> str:
    return f"vote: {vote.agreed} of {vote.k} episode{'' if vote.k == 1 else 's'} agree on this result"


def doubt_line(doubt: Doubt) -> str:
    """`Confidence: doubtful: REASON; REASON (vote: 3 of 4 episodes agree on this result)`: each
    thing said once. A doubtful answer's reasons already say that it was forced or a fallback
    (the checks' findings), and a reason may say the vote's agreement, so the line leaves those
    notes of `how` out; with no SQL to check it keeps them (`Confidence: none (no SQL to check) (forced final answer: ...)`)."""
    if doubt.confidence is None:
        head = "Confidence: none (no SQL to check)"
    elif doubt.confidence == "checked":
        head = "Confidence: checked"
    else:
        head = f"Confidence: {doubt.confidence}" + "".join(
            f"{': ' if i == 0 else '; '}{reason}" for i, reason in enumerate(doubt.reasons)
        )
    said = (FORCED_NOTE, FALLBACK_NOTE) if doubt.confidence == "doubtful" else ()
    how = [n for n in doubt.how if not n.startswith(said) and not any(r in n for r in doubt.reasons)]
    return head + (f" ({'; '.join(how)})" if how else "")
