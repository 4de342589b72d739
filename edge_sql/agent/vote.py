"""Answers by vote: choose among K sampled episodes of one question (execution-guided
self-consistency, a known accuracy gain for text-to-SQL).

Each episode's final SQL (`EpisodeResult.sql`: its answer, or the fallback it returns) runs
again on the read-only database, with the episode's own row cap and the database's time limit,
and cells uncut so that values compare exactly. Result sets compare as the evaluation scores
them (`result.result_set`: rows as a set of tuples); a result cut by the row cap compares on the
rows fetched and agrees only with another cut one. An episode without SQL, or whose SQL fails
now, does not vote. The answer is the largest group's; the chosen episode is, among the
episodes of the largest groups (several when they tie), the one with the fewest failed
`run_query` calls, then the first. With no voter at all, the first episode is the one returned.

Running the K episodes is the caller's job (`Agent.ask(..., vote=K)` runs them in parallel).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any

from edge_sql.agent.budget import Budget
from edge_sql.agent.result import EpisodeResult, result_set
from edge_sql.errors import QueryError
from edge_sql.tools import ReadOnlyDatabase


def failed_queries(result: EpisodeResult) -> int:
    """The episode's `run_query` calls that failed (what the failed-query limit counts)."""
    return sum(1 for r in result.rounds for call in r.calls if call.tool == "run_query" and not call.ok)


def choose(results: Sequence[EpisodeResult], db: ReadOnlyDatabase, *, max_rows: int = Budget().max_result_rows
           ) -> EpisodeResult:
    """The voted answer among `results` (K episodes of one question, in their order): a copy of
    the chosen episode's result whose `stats["vote"]` says how the vote went:
    `k`, `chosen` (its index), `agreed` (episodes in its group), `voters`, `agreement`
    (agreed / voters; 0.0 with no voter) and `episodes`: for each, its `sql`, `group` (groups
    numbered in order of first appearance; None: it did not vote), `failed_queries` and, when it
    did not vote, `reason`."""
    if not results:
        raise ValueError("a vote needs at least one episode")
    keys: dict[str, Hashable | str] = {}  # one run per distinct SQL
    groups: dict[Hashable, int] = {}
    episodes: list[dict[str, Any]] = []
    for result in results:
        entry: dict[str, Any] = {"sql": result.sql, "group": None, "failed_queries": failed_queries(result)}
        if result.sql is None:
            entry["reason"] = result.error or "no answer"
        else:
            if result.sql not in keys:
                keys[result.sql] = _result_key(db, result.sql, max_rows)
            key = keys[result.sql]
            if isinstance(key, str):
                entry["reason"] = key
            else:
                entry["group"] = groups.setdefault(key, len(groups))
        episodes.append(entry)
    sizes = [sum(1 for e in episodes if e["group"] == g) for g in range(len(groups))]
    voters = sum(sizes)
    if voters:
        largest = max(sizes)
        candidates = [i for i, e in enumerate(episodes) if e["group"] is not None and sizes[e["group"]] == largest]
        chosen = min(candidates, key=lambda i: (episodes[i]["failed_queries"], i))
        agreed = largest
    else:
        chosen, agreed = 0, 0
    vote = {"k": len(results), "chosen": chosen, "agreed": agreed, "voters": voters,
            "agreement": round(agreed / voters, 4) if voters else 0.0, "episodes": episodes}
    winner = results[chosen]
    return dataclasses.replace(winner, stats={**winner.stats, "vote": vote})


def agreement_line(vote: dict[str, Any]) -> str:
    """`3 of 4 episodes agreed`, with how many did not vote: what `run --vote` prints."""
    line = f"{vote['agreed']} of {vote['k']} episodes agreed"
    silent = vote["k"] - vote["voters"]
    return line + (f" ({silent} without an answer that runs)" if silent else "")


def _result_key(db: ReadOnlyDatabase, sql: str, max_rows: int) -> Hashable | str:
    """What a vote compares for `sql`: its result set (and whether the row cap cut it), or the
    reason it does not vote (text)."""
    try:
        result = db.execute(sql, max_rows=max_rows, max_cell_chars=None)
    except QueryError as exc:
        return f"the SQL failed to run: {exc}"
    return frozenset(result_set(result.rows)), result.truncated
