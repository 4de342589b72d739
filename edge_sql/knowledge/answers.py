"""What the knowledge does for one question: answer it at once from a verified answer, or brief
the model (the user's evidence plus notes, similar verified answers and the follow-up pair).

Both need no model: `at_once` runs the stored SQL afresh on the database, so a repeated
question is answered without loading one (benchmarks/retrieval/bench_knowledge.py times it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from edge_sql.agent.display import plural
from edge_sql.agent.given import FollowUp, Given, VerifiedAnswer
from edge_sql.agent.result import EpisodeResult
from edge_sql.agent.stats import EpisodeStats
from edge_sql.errors import QueryError
from edge_sql.knowledge.evidence import Composed, TokenCounter, compose
from edge_sql.knowledge.holds import why_stale
from edge_sql.knowledge.store import Knowledge, Seen
from edge_sql.tools import ReadOnlyDatabase


@dataclass(frozen=True)
class Stale:
    """A verified answer to the question that no longer holds (`why`, one line): it is marked
    stale in the store and the model is asked instead."""

    answer: VerifiedAnswer
    why: str

    def line(self) -> str:
        return (
            f"the verified answer v{self.answer.id} was not used: {self.why}; it is marked stale and the model is asked"
        )


def at_once(
    kb: Knowledge,
    db: ReadOnlyDatabase,
    question: str,
    evidence: str | None = None,
    *,
    follow_up: FollowUp | None = None,
    max_rows: int = 1000,
    prompt_version: str = "",
) -> EpisodeResult | Stale | None:
    """The answer to `question` from the verified answer to the same question on `db`, its SQL run
    afresh and checked (`stop == "verified"`); None when there is none; Stale when its SQL fails
    now or its checks find a name or value the database no longer has (holds.py): then it is
    marked stale, and the mark cleared once it holds again."""
    seen = Seen.of(db)
    verified = kb.same_question(db, question, follows=follow_up.question if follow_up else None, seen=seen)
    if verified is None:
        return None
    try:
        rows = db.execute(verified.sql, max_rows=max_rows)
    except QueryError as exc:
        return _stale(kb, db, verified, f"its SQL fails now ({exc})")
    from edge_sql.checks import check_sql  # here: sqlglot loads with the first check

    checks = check_sql(db, verified.sql, result=rows)  # names and values on the database as it is now
    marked, absent = kb.marks(verified.id)
    why = why_stale(checks, absent)
    if why is not None:
        return _stale(kb, db, verified, why)
    if marked is not None:
        kb.mark_stale(db, verified.id, None)  # it holds again
    result = EpisodeResult(
        question=question,
        evidence=evidence,
        sql=verified.sql,
        columns=list(rows.columns),
        rows=[list(r) for r in rows.rows],
        truncated=rows.truncated,
        forced=False,
        fallback=False,
        answer=verified.sql,
        rounds=[],
        stats=EpisodeStats(),
        transcript="",
        stop="verified",
        prompt_version=prompt_version,
        given=Given(
            follow_up=follow_up if verified.follows else None,  # a standalone answer followed nothing
            verified=verified,
            schema_change=kb.schema_change(db, seen=seen),
        ),
    )
    result.checks = checks
    result.checks.add("note", "verified", f"a person verified this SQL on {verified.verified_at[:10]}")
    return result


def _stale(kb: Knowledge, db: ReadOnlyDatabase, verified: VerifiedAnswer, why: str) -> Stale:
    kb.mark_stale(db, verified.id, f"no longer holds: {why}")
    return Stale(verified, why)


def brief(
    kb: Knowledge,
    db: ReadOnlyDatabase,
    question: str,
    evidence: str | None = None,
    *,
    follow_up: FollowUp | None = None,
    use_knowledge: bool = True,
) -> Composed:
    """The evidence to ask `question` with and what went into it: with `use_knowledge`, the notes
    that apply and the most similar verified answers (within the bound, in `kb`'s tokens); the
    follow-up pair in any case."""
    if not use_knowledge:
        return compose(evidence, follow_up=follow_up, count_tokens=kb.count_tokens)
    seen = Seen.of(db)
    return compose(
        evidence,
        notes=kb.applicable_notes(db, question, seen=seen),
        examples=kb.similar(db, question, seen=seen),
        follow_up=follow_up,
        count_tokens=kb.count_tokens,
        schema_change=kb.schema_change(db, seen=seen),
    )


def given_lines(result: EpisodeResult) -> list[str]:
    """What a view prints under an answer about what it was given: `a verified answer from
    2026-12-06, run afresh`, or `given: 2 notes, 1 verified example, the previous answer`, and the
    schema change when there was one."""
    given = result.given
    if given is None:
        return []
    lines = []
    if result.stop == "verified" and given.verified is not None:
        lines.append(f"a verified answer from {given.verified.verified_at[:10]}, its SQL run afresh")
    else:
        parts = [
            plural(len(given.notes), "note") if given.notes else "",
            plural(len(given.examples), "verified example") if given.examples else "",
            "the previous answer" if given.follow_up is not None else "",
        ]
        if any(parts):
            lines.append("given: " + ", ".join(p for p in parts if p))
    if given.schema_change:
        lines.append(f"note: {given.schema_change}")
    if given.stale_verified:
        lines.append(f"note: {given.stale_verified}")
    return lines


def consult(
    open_knowledge: Callable[[], Knowledge],
    db: ReadOnlyDatabase,
    question: str,
    evidence: str | None,
    *,
    follow_up: FollowUp | None,
    fresh: bool,
    use_knowledge: bool,
    count_tokens: TokenCounter,
    max_rows: int,
    prompt_version: str,
) -> EpisodeResult | Composed:
    """The Agent's one step before an episode (`ask`, `each`, `ask_many`): the answer at once when
    `question` (not `fresh`) was verified before on `db` (on its own, or after the same previous
    question; `at_once`, the step `run --question` takes before loading a model); else the
    evidence to ask with. With `use_knowledge` off the knowledge is not opened, and only a
    follow-up pair is added."""
    if not use_knowledge:
        return compose(evidence, follow_up=follow_up, count_tokens=count_tokens)
    kb = open_knowledge()
    found = None
    if not fresh:
        found = at_once(
            kb, db, question, evidence, follow_up=follow_up, max_rows=max_rows, prompt_version=prompt_version
        )
        if isinstance(found, EpisodeResult):
            return found
    composed = brief(kb, db, question, evidence, follow_up=follow_up)
    if isinstance(found, Stale):  # the result says why the verified answer was not used
        return Composed(composed.evidence, replace(composed.given, stale_verified=found.line()))
    return composed
