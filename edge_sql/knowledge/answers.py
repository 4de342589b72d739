"""What the knowledge does for one question: answer it at once from a verified answer, or brief
the model (the user's evidence plus notes, similar verified answers and the follow-up pair).

Both need no model: `answer_at_once` runs the stored SQL afresh on the database, so a repeated
question is answered without loading one (benchmarks/bench_knowledge.py times it).
"""

from __future__ import annotations

from collections.abc import Callable

from edge_sql.agent.checked import check_episode
from edge_sql.agent.given import FollowUp, Given
from edge_sql.agent.result import EpisodeResult
from edge_sql.agent.stats import EpisodeStats
from edge_sql.errors import QueryError
from edge_sql.knowledge.evidence import Composed, TokenCounter, compose
from edge_sql.knowledge.store import Knowledge, Seen
from edge_sql.tools import ReadOnlyDatabase


def answer_at_once(
    kb: Knowledge,
    db: ReadOnlyDatabase,
    question: str,
    evidence: str | None = None,
    *,
    follow_up: FollowUp | None = None,
    max_rows: int = 1000,
    prompt_version: str = "",
) -> EpisodeResult | None:
    """The answer to `question` from the verified answer to the same question on `db`, its SQL run
    afresh and checked (`stop == "verified"`); None when there is none, or its SQL no longer runs
    (then a fresh episode answers)."""
    seen = Seen(db)
    verified = kb.same_question(db, question, follows=follow_up.question if follow_up else None, seen=seen)
    if verified is None:
        return None
    try:
        rows = db.execute(verified.sql, max_rows=max_rows)
    except QueryError:
        return None
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
        given=Given(follow_up=follow_up, verified=verified, schema_change=kb.schema_change(db, seen=seen)),
    )
    result.checks = check_episode(db, result)
    return result


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
    seen = Seen(db)
    return compose(
        evidence,
        notes=kb.applicable_notes(db, question, seen=seen),
        examples=kb.similar(db, question, seen=seen),
        follow_up=follow_up,
        count_tokens=kb.count_tokens,
        schema_change=kb.schema_change(db, seen=seen),
    )


def verified_line(result: EpisodeResult) -> str | None:
    """`a verified answer from 2026-12-06`: what a view prints above an answer given at once."""
    given = result.given
    if result.stop != "verified" or given is None or given.verified is None:
        return None
    return f"a verified answer from {given.verified.verified_at[:10]}"


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
    """`Agent.ask`'s one step before an episode: the answer at once when `question` (not `fresh`)
    was verified before on `db` (on its own, or after the same previous question); else the
    evidence to ask with. With
    `use_knowledge` off the knowledge is not opened, and only a follow-up pair is added."""
    if not use_knowledge:
        return compose(evidence, follow_up=follow_up, count_tokens=count_tokens)
    kb = open_knowledge()
    if not fresh:
        at_once = answer_at_once(
            kb, db, question, evidence, follow_up=follow_up, max_rows=max_rows, prompt_version=prompt_version
        )
        if at_once is not None:
            return at_once
    return brief(kb, db, question, evidence, follow_up=follow_up)
