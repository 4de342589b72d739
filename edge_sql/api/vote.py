"""A question answered by vote (`Agent.ask(..., vote=K)`): K sampled episodes with seeds
seed..seed+K-1 run through the driver, followed as they finish (`majority_vote.Tally`) and
stopped once the rest cannot change the winning result set; the answer is
`majority_vote.choose`'s, with the vote's seeds, wall time and prompt tokens in `stats.vote`."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Generator
from contextlib import closing
from pathlib import Path
from typing import Protocol

from edge_sql.agent.majority_vote import Tally, choose, vote_refusal
from edge_sql.agent.prompt import PromptTemplate
from edge_sql.agent.result import EpisodeResult
from edge_sql.api.asks import Ask, Watch
from edge_sql.api.driver import EachWatch
from edge_sql.errors import QuestionError
from edge_sql.tools import ReadOnlyDatabase, opened


class VoteEpisodes(Protocol):
    """How a vote runs its episodes: the Agent's driver (`Agent._each`), here for sampled
    episodes that share their opening, stopped by `should_stop` and not started once `skip()`,
    within the vote's turn in the Agent's queue and without consulting the knowledge (the vote's
    question did, once)."""

    def __call__(
        self,
        items: list[Ask],
        *,
        greedy: bool,
        should_stop: Callable[[], bool] | None,
        watch: EachWatch | None = None,
        skip: Callable[[], bool] | None = None,
        share_opening: bool = False,
        in_turn: bool = False,
    ) -> Generator[tuple[int, EpisodeResult | Exception], None, None]: ...


def run_vote(
    episodes: VoteEpisodes,
    question: str,
    db: str | Path | ReadOnlyDatabase,
    k: int,
    *,
    evidence: str | None,
    seed: int | None,
    greedy: bool,
    should_stop: Callable[[], bool] | None,
    max_rows: int,
    early_stop: bool = True,
    prompt: PromptTemplate | None = None,
    watch: Watch | None = None,
) -> EpisodeResult:
    """The vote of `k` episodes on `question` (see the module docstring); `early_stop=False`
    lets every episode run to its end. Refuses (ValueError) what `vote_refusal` refuses."""
    problem = vote_refusal(k, greedy)
    if problem is not None:
        raise ValueError(problem)
    if not question or not question.strip():
        raise QuestionError("empty question")
    first = seed if seed is not None else random.randrange(2**31)
    seeds = [first + i for i in range(k)]
    started = time.perf_counter()
    with opened(db) as database:
        tally = Tally(k, database, max_rows=max_rows)
        done = threading.Event()  # the vote is decided: the episodes still running cannot change it

        def stopped() -> bool:
            return done.is_set() or (should_stop is not None and should_stop())

        items = [Ask(question, database, evidence, s, prompt=prompt) for s in seeds]
        outcomes: list[EpisodeResult | None] = [None] * k
        seen: EachWatch | None = None
        if watch is not None:
            seen = lambda _i, ask, session, result: watch(ask, session, result)  # noqa: E731 - drops the index
        finished_episodes = episodes(
            items, greedy=False, should_stop=stopped, watch=seen, skip=done.is_set, share_opening=True, in_turn=True
        )
        with closing(finished_episodes) as finished:
            for i, outcome in finished:
                if isinstance(outcome, BaseException):
                    raise outcome  # the question itself cannot be asked (too long, agent closed, ...)
                outcomes[i] = outcome
                if outcome.stop != "cancelled" and tally.add(outcome) and early_stop:
                    done.set()
        results = outcomes
        if done.is_set():  # those stopped by the decision do not vote
            results = [r if r is not None and r.stop != "cancelled" else None for r in results]
        result = choose(
            results, database, max_rows=max_rows, keys=tally.keys, seeds=seeds, ran=outcomes, started=started
        )
    from edge_sql.agent.checked import join_vote  # here: sqlglot loads with the first check

    join_vote(result)  # the agreement joins the answer's checks
    return result
