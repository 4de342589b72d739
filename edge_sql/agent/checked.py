"""The checks of an episode's answer (edge_sql/checks) with its provenance from the episode's calls."""

from __future__ import annotations

import dataclasses

from edge_sql.agent.result import EpisodeResult
from edge_sql.checks import Checks, attach_provenance, check_sql
from edge_sql.tools import QueryResult, ReadOnlyDatabase


def check_episode(db: ReadOnlyDatabase, result: EpisodeResult) -> Checks | None:
    """Check the answer `result` returns (its SQL, or the model's answer that failed to run) on
    `db`, reusing its rows, and trace each name and value to the call that showed it; None for a
    cancelled episode or one without any SQL. Runs no model and writes nothing."""
    sql = result.sql if result.sql is not None else result.answer
    if not sql or result.stop == "cancelled":
        return None
    rows = (
        QueryResult(list(result.columns), [tuple(r) for r in result.rows], result.truncated)
        if result.sql is not None
        else None
    )
    checks = check_sql(
        db, sql, result=rows, forced=result.forced, force_reason=result.force_reason, fallback=result.fallback
    )
    attach_provenance(checks, result.rounds, result.question, result.evidence)
    return checks


def join_vote(result: EpisodeResult) -> None:
    """Add a vote's agreement to the voted answer's checks: the share of all K episodes that
    returned its result (an episode without an answer that runs agrees with none). Half or less
    makes the answer doubtful."""
    vote, checks = result.stats.vote, result.checks
    if vote is None or checks is None or not vote.k:
        return
    share = vote.agreed / vote.k
    checks.agreement = round(share, 4)
    message = f"{vote.agreed} of {vote.k} episodes agree on this result"
    checks.add("note" if share > 0.5 else "doubtful", "agreement" if share > 0.5 else "low_agreement", message)


def abstain(result: EpisodeResult, below: float) -> EpisodeResult:
    """ "Not sure" instead of the voted answer when fewer than `below` of the K episodes agree on
    it: `stop` "abstained", no rows, the voted SQL kept in `answer`, the reason in `error`."""
    checks = result.checks
    if result.sql is None or checks is None or checks.agreement is None or checks.agreement >= below:
        return result
    vote = result.stats.vote
    assert vote is not None  # checks.agreement comes from the vote
    reason = (
        f"not sure: {vote.agreed} of {vote.k} episodes agree on this result ({checks.agreement:.0%}, below {below:.0%})"
    )
    return dataclasses.replace(
        result, sql=None, columns=[], rows=[], truncated=False, answer=result.sql, stop="abstained", error=reason
    )
