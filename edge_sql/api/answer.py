"""One question's path through the Agent, for `ask`, `each` and `ask_many` alike (`Answering`,
a mixin of Agent): the knowledge consulted first (`knowledge.answers.consult`), then the call's
turn in the Agent's one queue (`session_pool.py`), then one episode or a vote, each episode on
a session borrowed for it."""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_sql.agent.episode import run_episode
from edge_sql.agent.events import EpisodeEvent
from edge_sql.agent.given import FollowUp
from edge_sql.agent.result import EpisodeResult
from edge_sql.api.asks import Ask, Watch, error_result
from edge_sql.api.session_pool import Place
from edge_sql.api.vote import run_vote
from edge_sql.errors import Cancelled
from edge_sql.knowledge.answers import consult
from edge_sql.knowledge.evidence import Composed
from edge_sql.runtime import SamplingParams
from edge_sql.tools import ReadOnlyDatabase, Toolbox, opened

if TYPE_CHECKING:
    from edge_sql.agent.budget import Budget
    from edge_sql.agent.prompt import PromptTemplate
    from edge_sql.api.knowledge_hook import KnowledgeHook
    from edge_sql.api.session_pool import SessionPool


class Answering:
    """`Agent._answer` and the episode it runs (the Agent supplies the rest)."""

    prompt: PromptTemplate
    budget: Budget
    tuning: str
    _knowledge: KnowledgeHook

    if TYPE_CHECKING:  # the Agent's, which these calls go through

        def count_tokens(self, text: str) -> int: ...
        def vote_k(self, *args: Any, **kwargs: Any) -> int | None: ...  # Any: mixin
        def _each(
            self,
            *args: Any,  # Any: mixin
            **kwargs: Any,  # Any: mixin
        ) -> Generator[tuple[int, EpisodeResult | Exception], None, None]: ...
        def _open_pool(self) -> SessionPool: ...

    def _answer(
        self,
        item: Ask,
        database: ReadOnlyDatabase,
        *,
        greedy: bool,
        should_stop: Callable[[], bool] | None,
        on_event: Callable[[EpisodeEvent], None] | None = None,
        early_stop: bool = True,
        abstain_below: float | None = None,
        follow_up: FollowUp | None = None,
        fresh: bool = False,
        knowledge: bool = True,
        compose: bool = True,
        watch: Watch | None = None,
        share_opening: bool = False,
        place: Place | None = None,
        in_turn: bool = False,
    ) -> EpisodeResult:
        """The one path of a question, for `ask`, `each` and `ask_many` alike: the knowledge
        consulted (`knowledge.answers.consult`: answered at once from a verified answer, or the
        evidence composed), then the call's turn (`place`, taken earlier, or a place taken now;
        `in_turn`: a vote's own episodes, inside the vote's turn) and one episode or a vote of
        `item.vote`'s K. With `knowledge` off the store is not opened; `compose=False` as well
        (`each` without knowledge: the bench's own evidence, and a vote's own episodes) skips the
        step, the evidence going to the model as given and `given` None; `watch`,
        `share_opening`: see `each` and `run_episode`. The place is left in any case."""
        try:
            consulted: EpisodeResult | Composed | None = None
            if knowledge or compose:
                consulted = consult(
                    self._knowledge.knowledge,
                    database,
                    item.question,
                    item.evidence,
                    follow_up=follow_up,
                    fresh=fresh,
                    use_knowledge=knowledge,
                    count_tokens=self.count_tokens,
                    max_rows=self.budget.max_result_rows,
                    prompt_version=(item.prompt or self.prompt).version,
                )
                if isinstance(consulted, EpisodeResult):
                    return consulted  # answered at once: no turn taken
            evidence = consulted.evidence if consulted is not None else item.evidence
            try:
                with nullcontext() if in_turn else self._open_pool().turn(place, should_stop):
                    result = self._run(
                        item,
                        database,
                        evidence,
                        greedy=greedy,
                        should_stop=should_stop,
                        on_event=on_event,
                        early_stop=early_stop,
                        abstain_below=abstain_below,
                        watch=watch,
                        share_opening=share_opening,
                    )
            except Cancelled:  # stopped (its deadline, its should_stop, a client gone) while waiting its turn
                result = error_result(item, "stopped", self.prompt.version, "cancelled")
            if consulted is not None:
                result.evidence, result.given = item.evidence, consulted.given
            return result
        finally:
            if place is not None:
                self._open_pool().leave(place)

    def _run(
        self,
        item: Ask,
        database: ReadOnlyDatabase,
        evidence: str | None,
        *,
        greedy: bool,
        should_stop: Callable[[], bool] | None,
        on_event: Callable[[EpisodeEvent], None] | None,
        early_stop: bool,
        abstain_below: float | None,
        watch: Watch | None,
        share_opening: bool,
    ) -> EpisodeResult:
        """One episode, or a vote of `item.vote`'s K (its episodes inside this call's turn)."""
        k = self.vote_k(item.vote)
        if k is None:
            return self._episode(
                item.question,
                database,
                evidence=evidence,
                seed=item.seed,
                greedy=greedy,
                on_event=on_event,
                should_stop=should_stop,
                share_opening=share_opening,
                prompt=item.prompt,
                watch=watch,
            )
        result = run_vote(
            self._each,
            item.question,
            database,
            k,
            evidence=evidence,
            seed=item.seed,
            greedy=greedy,
            should_stop=should_stop,
            max_rows=self.budget.max_result_rows,
            early_stop=early_stop and abstain_below is None,
            prompt=item.prompt,
            watch=watch,
        )
        if abstain_below is None:
            return result
        from edge_sql.agent.checked import abstain  # here: sqlglot loads with the first check

        return abstain(result, abstain_below)

    def _episode(
        self,
        question: str,
        db: str | Path | ReadOnlyDatabase,
        *,
        evidence: str | None,
        seed: int | None,
        greedy: bool,
        on_event: Callable[[EpisodeEvent], None] | None,
        should_stop: Callable[[], bool] | None,
        share_opening: bool = False,
        prompt: PromptTemplate | None = None,
        watch: Watch | None = None,
    ) -> EpisodeResult:
        """One episode on a borrowed session (`share_opening`: see `run_episode`; `watch`: see `each`)."""
        params = SamplingParams(seed=seed, greedy=greedy)
        with opened(db) as database:
            try:
                result = self._on_session(
                    database, question, evidence, params, should_stop, on_event, share_opening, prompt, watch
                )
            except Cancelled:  # stopped (its deadline, its should_stop) while waiting for a session
                return error_result(
                    Ask(question, database, evidence, seed), "stopped", self.prompt.version, "cancelled"
                )
            from edge_sql.agent.checked import check_episode  # here: sqlglot loads with the first check

            result.checks = check_episode(database, result)  # the session is free again meanwhile
            return result

    def _on_session(
        self,
        database: ReadOnlyDatabase,
        question: str,
        evidence: str | None,
        params: SamplingParams,
        should_stop: Callable[[], bool] | None,
        on_event: Callable[[EpisodeEvent], None] | None,
        share_opening: bool,
        prompt: PromptTemplate | None,
        watch: Watch | None,
    ) -> EpisodeResult:
        """The episode on a session borrowed for it (Cancelled: stopped while waiting for one)."""
        with self._open_pool().borrowed(should_stop) as session:
            result = run_episode(
                session,
                Toolbox(database, question=f"{question}\n{evidence or ''}", count_tokens=session.count_tokens),
                question,
                evidence=evidence,
                params=params,
                prompt=prompt or self.prompt,
                budget=self.budget,
                should_stop=should_stop,
                on_event=on_event,
                share_opening=share_opening,
                tuning=self.tuning,
            )
            if watch is not None:
                watch(Ask(question, database, evidence, params.seed, prompt=prompt), session, result)
        return result
