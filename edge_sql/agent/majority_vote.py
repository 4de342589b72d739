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

Stopping early: once the largest group leads every other (and a group not yet seen) by more
than the episodes still running, none of them can change the winning result set (`decided`), so
`Agent.ask(..., vote=K)` stops them (`Tally` follows the vote as episodes finish). An episode
stopped so does not vote; `stats.vote.finished` counts the others. The
chosen episode is then the tie-break's among the finished ones of the winning group.

Running the K episodes is the caller's job (`Agent.ask(..., vote=K)` runs them in parallel).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Hashable, Sequence

from edge_sql.agent.budget import Budget
from edge_sql.agent.result import EpisodeResult, result_set
from edge_sql.agent.stats import VoteEpisode, VoteStats
from edge_sql.errors import QueryError
from edge_sql.tools import ReadOnlyDatabase


def failed_queries(result: EpisodeResult) -> int:
    """The episode's `run_query` calls that failed (what the failed-query limit counts)."""
    return sum(1 for r in result.rounds for call in r.calls if call.tool == "run_query" and not call.ok)


STOPPED = "stopped: the vote was decided without it"


GREEDY_VOTE_FLAGS = "--vote samples K episodes and --greedy would make them all the same: use one"
GREEDY_VOTE = (
    "a vote needs sampled episodes: greedy ones would all write the same answer "
    "(drop greedy, or set a seed for reproducible votes)"
)


def vote_refusal(vote: int | str | None, greedy: bool = False, *, flags: bool = False) -> str | None:
    """Why a vote of `vote` episodes (`"auto"`, or None: no vote) cannot run, or None when it can:
    the one place the rules live ("a vote needs K >= 2 episodes", "a vote of greedy episodes is
    refused: they would all write the same answer"); each surface raises its own error with the
    message (`flags`: worded with the command line's options)."""
    if isinstance(vote, int) and vote < 2:
        return f"a vote needs at least 2 episodes, got {vote}"
    if vote is not None and greedy:
        return GREEDY_VOTE_FLAGS if flags else GREEDY_VOTE
    return None


def decided(sizes: Sequence[int], remaining: int) -> bool:
    """Whether `remaining` more episodes cannot change the winning result set of a vote whose
    groups have `sizes` so far: the largest leads the next one (or a group not seen yet) by more
    than `remaining`. Then it stays the largest group alone whatever they return (no tie either)."""
    if not sizes:
        return False
    ordered = sorted(sizes, reverse=True)
    return ordered[0] > (ordered[1] if len(ordered) > 1 else 0) + remaining


class Tally:
    """A vote of `k` episodes followed as they finish (from any thread): `add` each finished
    result; `decided` says when the rest cannot change the winner. Its `keys` (each distinct
    SQL's result set, run once) go on to `choose`."""

    def __init__(self, k: int, db: ReadOnlyDatabase, *, max_rows: int = Budget().max_result_rows) -> None:
        self.k, self.db, self.max_rows = k, db, max_rows
        self.keys: dict[str, Hashable | str] = {}
        self._sizes: dict[Hashable, int] = {}
        self._finished = 0
        self._lock = threading.Lock()

    def add(self, result: EpisodeResult) -> bool:
        """Count `result` (an episode that ran to its end); returns whether the vote is decided."""
        with self._lock:
            self._finished += 1
            if result.sql is not None:
                if result.sql not in self.keys:
                    self.keys[result.sql] = _result_key(self.db, result.sql, self.max_rows)
                key = self.keys[result.sql]
                if not isinstance(key, str):
                    self._sizes[key] = self._sizes.get(key, 0) + 1
            return decided(list(self._sizes.values()), self.k - self._finished)

    @property
    def decided(self) -> bool:
        with self._lock:
            return decided(list(self._sizes.values()), self.k - self._finished)


def choose(
    results: Sequence[EpisodeResult | None],
    db: ReadOnlyDatabase,
    *,
    max_rows: int = Budget().max_result_rows,
    keys: dict[str, Hashable | str] | None = None,
    seeds: Sequence[int] | None = None,
    ran: Sequence[EpisodeResult | None] | None = None,
    started: float | None = None,
) -> EpisodeResult:
    """The voted answer among `results` (K episodes of one question, in their order; None for one
    stopped once the vote was decided): a copy of the chosen episode's result whose
    `stats.vote` (`VoteStats`) says how the vote went, with each episode's `VoteEpisode`.
    `keys` holds result sets already computed (a `Tally`'s). With `seeds` (the episodes'),
    `ran` (each episode's result as it ended, a stopped one's too; None: never started) and
    `started` (when the vote began, `time.perf_counter()`), the stats are complete when built:
    the seeds, the whole vote's wall time, the prompt tokens all episodes evaluated, and each
    episode's seed, stop and wall time."""
    if not results or all(r is None for r in results):
        raise ValueError("a vote needs at least one episode")
    keys = {} if keys is None else dict(keys)  # one run per distinct SQL
    groups: dict[Hashable, int] = {}
    episodes: list[VoteEpisode] = []
    for result in results:
        if result is None:
            episodes.append(VoteEpisode(sql=None, group=None, failed_queries=0, reason=STOPPED))
            continue
        entry = VoteEpisode(sql=result.sql, group=None, failed_queries=failed_queries(result))
        if result.sql is None:
            entry.reason = result.error or "no answer"
        else:
            if result.sql not in keys:
                keys[result.sql] = _result_key(db, result.sql, max_rows)
            key = keys[result.sql]
            if isinstance(key, str):
                entry.reason = key
            else:
                entry.group = groups.setdefault(key, len(groups))
        episodes.append(entry)
    sizes = [sum(1 for e in episodes if e.group == g) for g in range(len(groups))]
    voters = sum(sizes)
    if voters:
        largest = max(sizes)
        candidates = [i for i, e in enumerate(episodes) if e.group is not None and sizes[e.group] == largest]
        chosen = min(candidates, key=lambda i: (episodes[i].failed_queries, i))
        agreed = largest
    else:
        chosen, agreed = next(i for i, r in enumerate(results) if r is not None), 0
    finished = sum(r is not None for r in results)
    vote = VoteStats(
        k=len(results),
        chosen=chosen,
        agreed=agreed,
        voters=voters,
        agreement=round(agreed / voters, 4) if voters else 0.0,
        finished=finished,
        episodes=episodes,
    )
    if seeds is not None:
        _add_runs(vote, list(seeds), list(ran) if ran is not None else list(results), started)
    winner = results[chosen]
    assert winner is not None
    return dataclasses.replace(winner, stats=dataclasses.replace(winner.stats, vote=vote))


def _add_runs(vote: VoteStats, seeds: list[int], ran: list[EpisodeResult | None], started: float | None) -> None:
    """The vote's seeds, wall time and evaluated prompt tokens, and each episode's seed, stop and
    wall time (what `choose` was given of how the episodes ran)."""
    for seed, episode, result in zip(seeds, vote.episodes, ran):
        episode.seed = seed
        if result is not None:
            episode.stop, episode.wall_s = result.stop, result.stats.measured.wall_s
    vote.seeds = seeds
    vote.prompt_tokens_evaluated = sum(r.stats.measured.timings.prompt_tokens for r in ran if r is not None)
    if started is not None:
        vote.wall_s = round(time.perf_counter() - started, 4)


def agreement_line(vote: VoteStats) -> str:
    """`3 of 4 episodes agreed`, with how many did not vote and how many were stopped once the
    vote was decided: what `run --vote` prints."""
    line = f"{vote.agreed} of {vote.k} episodes agreed"
    notes = []
    silent = vote.finished - vote.voters
    if silent:
        notes.append(f"{silent} without an answer that runs")
    if vote.finished < vote.k:
        notes.append(f"{vote.k - vote.finished} stopped once the vote was decided")
    return line + (f" ({'; '.join(notes)})" if notes else "")


def _result_key(db: ReadOnlyDatabase, sql: str, max_rows: int) -> Hashable | str:
    """What a vote compares for `sql`: its result set (and whether the row cap cut it), or the
    reason it does not vote (text)."""
    try:
        result = db.execute(sql, max_rows=max_rows, max_cell_chars=None)
    except QueryError as exc:
        return f"the SQL failed to run: {exc}"
    return frozenset(result_set(result.rows)), result.truncated
