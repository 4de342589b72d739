"""What an answer was given besides its question: notes, similar verified answers, a follow-up.

These records live beside `EpisodeResult` (which carries a `Given`) so that the result can say
what the model saw without the agent importing the knowledge store that fills them
(`edge_sql.knowledge` re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FollowUp:
    """The previous question and its SQL: a question that follows an answer carries them."""

    question: str
    sql: str


@dataclass(frozen=True)
class Note:
    """A note a person wrote about a database. `question`: the words it is tied to (it is given
    only with a question that has them), None for a note that always applies. `stale` says why
    it no longer fits the database (a table it names was dropped), None while it fits."""

    id: int
    text: str
    question: str | None
    created: str
    stale: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "text": self.text,
            "question": self.question,
            "created": self.created,
            "stale": self.stale,
        }


@dataclass(frozen=True)
class VerifiedAnswer:
    """A question whose SQL a person confirmed (`verified_at`: when, ISO 8601 UTC); `follows`: the
    question it was asked after, for the answer to a follow-up."""

    id: int
    question: str
    evidence: str | None
    sql: str
    verified_at: str
    stale: str | None = None
    follows: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "question": self.question,
            "evidence": self.evidence,
            "sql": self.sql,
            "verified_at": self.verified_at,
            "stale": self.stale,
            "follows": self.follows,
        }


@dataclass(frozen=True)
class Given:
    """What one answer was given: the notes and similar verified answers put into its evidence,
    the follow-up pair, or the verified answer it was answered from at once (`verified`).
    `schema_change` says that the database's schema changed since some of its notes were written;
    `stale_verified`, why the verified answer to this very question was not used (it no longer
    holds: the model was asked instead)."""

    notes: list[Note] = field(default_factory=list)
    examples: list[VerifiedAnswer] = field(default_factory=list)
    follow_up: FollowUp | None = None
    verified: VerifiedAnswer | None = None
    schema_change: str | None = None
    stale_verified: str | None = None

    def to_json(self) -> dict[str, object]:
        verified = self.verified
        return {
            "notes": [{"id": n.id, "text": n.text} for n in self.notes],
            "examples": [{"id": e.id, "question": e.question, "sql": e.sql} for e in self.examples],
            "follow_up": {"question": self.follow_up.question, "sql": self.follow_up.sql} if self.follow_up else None,
            "verified": (
                {
                    "id": verified.id,
                    "question": verified.question,
                    "sql": verified.sql,
                    "verified_at": verified.verified_at,
                }
                if verified is not None
                else None
            ),
            "schema_change": self.schema_change,
            "stale_verified": self.stale_verified,
        }
