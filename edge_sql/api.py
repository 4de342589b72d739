"""The Python API: `Agent` loads a model once and answers many questions offline.

from edge_sql import Agent

with Agent() as agent:                       # the default model (pulled if absent)
    result = agent.ask("How many albums are there?", "chinook.sqlite")
    print(result.sql, result.rows)

with Agent(parallel=4) as agent:             # four episodes at once, one context
    results = agent.ask_many(["How many albums?", "How many artists?"], "chinook.sqlite")
    voted = agent.ask("Which genre sells most?", "chinook.sqlite", vote=4, seed=1)
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from edge_sql.agent.budget import Budget, small_model_note
from edge_sql.agent.checked import abstain, check_episode, join_vote
from edge_sql.agent.episode import run_episode
from edge_sql.agent.events import EpisodeEvent
from edge_sql.agent.given import FollowUp
from edge_sql.agent.majority_vote import Tally, choose, vote_refusal
from edge_sql.agent.prompt import PromptTemplate, load_prompt
from edge_sql.agent.result import EpisodeResult
from edge_sql.agent.stats import EpisodeStats
from edge_sql.errors import ClosedError, EdgeSqlError
from edge_sql.knowledge import Knowledge
from edge_sql.knowledge.answers import consult
from edge_sql.runtime import PrefixCache, SamplingParams, Session, SessionInfo, SpeculateMode
from edge_sql.runtime.batching.sequences import SessionGroup, open_sessions
from edge_sql.runtime.options import DEFAULT_CONTEXT_TOKENS, episodes_at_once
from edge_sql.runtime.tuning import Settings, check_parallel
from edge_sql.tools import ReadOnlyDatabase, Toolbox

_log = logging.getLogger(__name__)


def resolve_model_path(
    model: str | Path | None, *, pull_if_missing: bool = True, log: Callable[[str], None] = lambda _m: None
) -> Path:
    """A GGUF path for `model`: a file, a store name, or None for the default model."""
    from edge_sql.store import ensure_model, resolve_model

    spec = str(model) if model is not None else None
    if pull_if_missing:
        return ensure_model(spec, pull_if_missing=True, log=log)
    return resolve_model(spec)


def load_settings(
    model_path: Path,
    *,
    tune: bool,
    n_gpu_layers: int | None,
    log: Callable[[str], None] = lambda _m: None,
    n_ctx: int = DEFAULT_CONTEXT_TOKENS,
    n_threads: int | None = None,
    speculate: SpeculateMode = "off",
) -> tuple[Settings, str]:
    """The llama.cpp settings to load `model_path` with, and how they were chosen:
    "cached" or "calibrated" (see `runtime.tuning`), "off" (`tune=False`: safe defaults) or
    "gpu" (layers are offloaded: calibration does not apply, offload keeps its defaults).
    Calibrated settings carry the most drafts per verify batch that fit the memory budget;
    `speculate` other than "off" only makes the log say when none fits."""
    settings, how = _settings(
        model_path, tune=tune, n_gpu_layers=n_gpu_layers, log=log, n_ctx=n_ctx, n_threads=n_threads
    )
    if speculate != "off" and settings.speculation(speculate)[0] != speculate:
        log(
            f"--speculate {speculate}: {settings.speculation(speculate)[0]} within the memory budget with these "
            "settings (each draft keeps a copy of the recurrent state, the MTP drafter a context of its own; "
            "`edge-sql tune` shows what fits)"
        )
    return settings, how


def _settings(
    model_path: Path,
    *,
    tune: bool,
    n_gpu_layers: int | None,
    log: Callable[[str], None],
    n_ctx: int,
    n_threads: int | None,
) -> tuple[Settings, str]:
    from edge_sql.runtime.llama.backend import gpu_backend_name, init_backend
    from edge_sql.runtime.tuning import default_settings, tuned_settings

    init_backend()
    if gpu_backend_name() and n_gpu_layers != 0:
        return default_settings(), "gpu"
    if not tune:
        return default_settings(), "off"

    def progress(message: str) -> None:  # a first calibration takes a while: say so through logging too
        _log.info(message)
        log(message)

    return tuned_settings(model_path, progress=progress, n_ctx=n_ctx, n_threads=n_threads)


def vote_plan(model_path: Path, settings: Settings, how: str, parallel: int | None = None) -> tuple[int, str]:
    """What `vote="auto"` means for this file on this machine: the K of `runtime.tuning.auto_vote`
    (1: no vote) from the calibrated decode rates, within `parallel` sequences when given (else
    the most that fit), and the line that says why. Settings that were not calibrated here
    ("off", "gpu") measured no rates: no vote."""
    from edge_sql.runtime.tuning.auto_vote import auto_vote, auto_vote_line
    from edge_sql.runtime.tuning.cache import cached_calibration

    calibration = cached_calibration(model_path) if how in ("cached", "calibrated") else None
    rates = calibration.parallel_rates if calibration is not None else []
    limit = settings.parallel_limit or 1
    if parallel is not None:
        limit = min(limit, parallel)
    return auto_vote(rates, limit), auto_vote_line(rates, limit)


@dataclass(frozen=True)
class SessionPlan:
    """What an Agent opens, decided before anything loads (`plan_sessions`): the model file, the
    settings it loads with (the caller's thread count on top) and how they were chosen
    (`tuning`), what `vote="auto"` means here (`auto_vote`: 1 is no vote; `auto_vote_line` says
    why) and how many sessions (sequences of one context) to open."""

    model_path: Path
    settings: Settings
    tuning: str
    auto_vote: int
    auto_vote_line: str
    sessions: int

    def vote_k(self, vote: int | Literal["auto"] | None) -> int | None:
        """The episodes `vote` answers with (None: one episode, no vote); "auto" is `auto_vote`,
        no vote when that is 1."""
        if vote == "auto":
            return self.auto_vote if self.auto_vote >= 2 else None
        return vote


def plan_sessions(
    model: str | Path | None,
    *,
    parallel: int = 1,
    vote: int | Literal["auto"] | None = None,
    tune: bool = True,
    n_gpu_layers: int | None = None,
    n_ctx: int = DEFAULT_CONTEXT_TOKENS,
    n_threads: int | None = None,
    speculate: SpeculateMode = "off",
    pull_if_missing: bool = True,
    log: Callable[[str], None] = lambda _m: None,
) -> SessionPlan:
    """The one plan of an Agent's sessions from what the user asked for: `parallel` episodes at
    once and requests' votes of `vote` (K: its K episodes run together, so K sessions; "auto":
    the K this machine's calibration gives within the memory budget). With no vote, "auto" is
    resolved within the `parallel` sessions. More sessions than calibration found room for are
    refused (EdgeSqlError); a vote of fewer than 2 episodes too (ValueError)."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    problem = vote_refusal(vote)
    if problem is not None:
        raise ValueError(problem)
    path = resolve_model_path(model, pull_if_missing=pull_if_missing, log=log)
    settings, how = load_settings(
        path, tune=tune, n_gpu_layers=n_gpu_layers, log=log, n_ctx=n_ctx, n_threads=n_threads, speculate=speculate
    )
    if n_threads is not None:  # the caller's thread count wins over the calibrated one
        settings = dataclasses.replace(settings, n_threads=n_threads)
    k = vote_plan(path, settings, how)[0] if vote == "auto" else vote
    sessions = episodes_at_once(parallel, k)
    check_parallel(settings, sessions)  # more sequences than calibration found room for: refused
    auto, line = vote_plan(path, settings, how, sessions)
    return SessionPlan(path, settings, how, auto, line, sessions)


def prefix_state_dir() -> Path:
    """Where saved prompt-prefix states live: the model store's `prefix-states/`."""
    from edge_sql.store.home import store_root

    return store_root() / "prefix-states"


@dataclass(frozen=True)
class Ask:
    """One question of `Agent.ask_many` or `Agent.each` with what it carries of its own (a bench
    or an evaluation mixes databases and evidence); a field left None takes `ask_many`'s argument.
    `vote=K` (or "auto"): answered by a vote of K sampled episodes (seeds seed..seed+K-1, as
    `ask(vote=K)`); `prompt`: its own prompt template (the bench's schema-given mode), else the
    Agent's."""

    question: str
    db: str | Path | ReadOnlyDatabase | None = None
    evidence: str | None = None
    seed: int | None = None
    vote: int | Literal["auto"] | None = None
    prompt: PromptTemplate | None = None


Watch = Callable[["Ask", Session, EpisodeResult], None]
"""Sees each episode's ask, the session it ran on and its result while the session is still
the episode's (what a caller reads off the session: timings, tokens)."""


class Agent:
    """A loaded model that answers questions about SQLite databases.

    `model` is a GGUF path, a model-store name (`synsql`, `synsql:Q4_K_M`) or None for the
    default model, which is pulled (downloaded and converted) the first time if it is not in
    the store. The model is loaded once; every `ask` is a new episode on the same context.

    `tune` loads the model with the settings calibrated for this file on this machine (a quick
    calibration the first time, cached in the store, its progress sent to `log` and to the
    `edge_sql.api` logger at INFO; `tuning` says "cached", "calibrated",
    "off" or "gpu"); `tune=False` uses safe defaults. `prefix_cache` also keeps the state after
    the shared system prompt on disk, so a later process skips evaluating it (in memory it is
    always kept between questions). `speculate` ("off", "lookup", "auto"; "mtp" once model files
    carry an MTP head) decodes drafted tokens in batches and keeps only those the model itself
    would write: the same answers for fewer decodes (`runtime/speculation/speculative.py`).

    `parallel=N` opens N sessions, each its own sequence of one llama.cpp context of `n_ctx`
    tokens per sequence (`runtime.batching.sequences.open_sessions`): up to N episodes run at once and
    their decode steps share llama.cpp batches, which is where the throughput comes from (more
    tokens per second in all, each episode a little slower). With calibrated settings, more
    sequences than fit the memory budget are refused (EdgeSqlError; `edge-sql tune` shows how
    many fit). `agent.sessions` lists them; `agent.session` is the one session of `parallel=1`.
    `vote=K` (or "auto") opens the sessions a vote of K needs beside `parallel`'s, for callers
    whose requests vote (run, serve); `agent.plan` (`SessionPlan`) says what was opened and why.

    Thread safety: `ask` may be called from any number of threads. Each call borrows a free
    session for its whole episode and blocks while all N are busy, so up to N calls run at once
    (with the default `parallel=1` they run one after another, as before); each gets its own
    result. `ask_many` answers a list N at a time; `ask(..., vote=K)` runs K sampled episodes
    and answers with the result set most of them return (`agent/majority_vote.py`).
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        n_threads: int | None = None,
        n_gpu_layers: int | None = None,
        n_ctx: int = DEFAULT_CONTEXT_TOKENS,
        prompt_file: str | Path | None = None,
        budget: Budget | None = None,
        pull_if_missing: bool = True,
        log: Callable[[str], None] = lambda _m: None,
        tune: bool = True,
        prefix_cache: bool = True,
        speculate: SpeculateMode = "off",
        parallel: int = 1,
        vote: int | Literal["auto"] | None = None,
        session_view: Callable[[Session], Session] | None = None,
    ) -> None:
        self.prompt: PromptTemplate = load_prompt(prompt_file)
        self.budget = budget or Budget()
        self.plan = plan_sessions(
            model,
            parallel=parallel,
            vote=vote,
            tune=tune,
            n_gpu_layers=n_gpu_layers,
            n_ctx=n_ctx,
            n_threads=n_threads,
            speculate=speculate,
            pull_if_missing=pull_if_missing,
            log=log,
        )
        self.parallel, self.model_path, self.tuning = self.plan.sessions, self.plan.model_path, self.plan.tuning
        self.auto_vote, self.auto_vote_line = self.plan.auto_vote, self.plan.auto_vote_line
        settings = self.plan.settings
        started = time.perf_counter()
        self._group: SessionGroup | None = open_sessions(
            self.model_path,
            settings.session_options(speculate, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers),
            self.parallel,
            prefix_cache=PrefixCache(prefix_state_dir() if prefix_cache else None, log=log),
        )
        self.load_s = time.perf_counter() - started  # opening the sessions (the model, the context)
        note = small_model_note(self.model_path.name, self.info.architecture, _gguf_name(self.model_path), self.budget)
        if note is not None:
            log(note)  # once per load: a model not trained for the protocol, with its open bounds
        self._views = [session_view(s) if session_view else s for s in self._group.sessions]
        self._free: list[Session] = list(self._views)  # the pool `ask` borrows from
        self._pool = threading.Condition()
        self._closed = False
        self._knowledge: Knowledge | None = None  # opened by the first question that consults it
        self._knowledge_lock = threading.Lock()

    @property
    def sessions(self) -> list[Session]:
        """The agent's sessions, one per parallel sequence (empty once closed), as its episodes see
        them: `session_view(session)` when given (the bench notes which tokens the model wrote)."""
        return list(self._views) if self._group is not None else []

    @property
    def session(self) -> Session | None:
        """The one session of a `parallel=1` Agent (None once closed); with more, see `sessions`."""
        if self.parallel != 1:
            raise EdgeSqlError(
                f"this Agent has {self.parallel} sessions (parallel={self.parallel}): use agent.sessions"
            )
        return self._views[0] if self._group is not None else None

    @property
    def info(self) -> SessionInfo:
        """How the model was loaded (file, backend, GPU layers, threads, context)."""
        if self._group is None:
            raise ClosedError("this Agent is closed")
        return self._group.info

    @property
    def knowledge(self) -> Knowledge:
        """The notes and verified answers `ask` consults (the store's knowledge database), its
        bounds measured with this model's tokenizer; opened on first use."""
        with self._knowledge_lock:
            if self._knowledge is None:
                self._knowledge = Knowledge.open(count_tokens=self.count_tokens)
            return self._knowledge

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` is in the model's own vocabulary."""
        if self._group is None:
            raise ClosedError("this Agent is closed")
        return len(self._views[0].tokenize(text, special=False))

    def warm_up(self) -> None:
        """Build what the first question would otherwise wait for: the grammar engine's view of the
        vocabulary (seconds for 248k tokens, holding the GIL and not cancellable). Servers call it
        at start so no client's first request pays for it."""
        if self._group is None:
            raise ClosedError("this Agent is closed")
        for session in self._views:  # one view per loaded model: the first builds it
            session.lltokenizer()

    def ask(
        self,
        question: str,
        db: str | Path | ReadOnlyDatabase,
        *,
        evidence: str | None = None,
        seed: int | None = None,
        greedy: bool = False,
        on_event: Callable[[EpisodeEvent], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        vote: int | Literal["auto"] | None = None,
        early_stop: bool = True,
        abstain_below: float | None = None,
        follow_up: FollowUp | None = None,
        fresh: bool = False,
        knowledge: bool = True,
    ) -> EpisodeResult:
        """Answer `question` about `db` (a path, opened read-only, or an open ReadOnlyDatabase).

        With `knowledge` (docs/knowledge.md): a question verified before on this database (same
        words, case, spacing and punctuation aside) is answered at once by running its stored SQL
        afresh (`stop == "verified"`; `fresh=True` asks the model instead); otherwise the notes
        that apply and the most similar verified answers join the evidence. `follow_up` (the
        previous question and its SQL) goes into the evidence too. `result.given` says what was
        given; `result.evidence` stays the caller's.

        `seed` makes sampling reproducible; `greedy` always takes the most likely token.
        `on_event` sees each round and call as it happens; `should_stop` returning True ends
        the episode early (`result.stop == "cancelled"`). Raises EdgeSqlError for a bad
        database or an empty question.

        `vote=K` (at least 2) answers by vote: K sampled episodes with seeds `seed`, `seed + 1`,
        ... (a random first seed when `seed` is None) run `parallel` at a time, and the result is
        the chosen episode's, with `stats.vote` (see `agent.majority_vote.choose`; also `seeds`,
        `wall_s` for the whole vote and `prompt_tokens_evaluated` by all its episodes). The
        episodes share their opening: one evaluates it, the others restore its state. As soon
        as the episodes still running cannot change the winning result set, they are stopped
        (`early_stop=False`: every episode runs to its end);
        `stats.vote.finished` counts those that did. `on_event` is not called for a vote (K
        episodes' events would interleave). A vote of greedy episodes is refused (ValueError):
        they would all write the same answer. `should_stop` (Ctrl-C, a client's cancel) stops
        every episode of a vote.

        `vote="auto"`: the largest vote this machine answers within `VOTE_FACTOR` times one
        episode, predicted from the calibrated decode rates (`runtime/tuning/auto_vote.py`), within
        the Agent's `parallel` sequences: `agent.auto_vote` (1: a single episode, no vote) and
        `agent.auto_vote_line` say which and why.

        Every answer carries `checks` (edge_sql/checks): where each name and value came from,
        whether the database holds each compared value, and a confidence; with a vote, the share
        of the K episodes that agree joins it. `abstain_below=F` (with a vote, 0 < F <= 1) answers
        "not sure" when fewer than F of the K agree: `stop == "abstained"`, no rows, the voted SQL
        in `answer` and the reason in `error`; every episode then runs to its end (a vote stopped
        early would count the stopped ones as disagreeing).
        """
        if abstain_below is not None and (vote is None or not 0 < abstain_below <= 1):
            raise ValueError(
                "abstain_below needs a vote (vote=K) and a fraction in (0, 1], "
                f"got vote={vote}, abstain_below={abstain_below}"
            )
        if not question or not question.strip():
            raise EdgeSqlError("empty question")
        with _opened(db) as database:
            consulted = consult(
                lambda: self.knowledge,
                database,
                question,
                evidence,
                follow_up=follow_up,
                fresh=fresh,
                use_knowledge=knowledge,
                count_tokens=self.count_tokens,
                max_rows=self.budget.max_result_rows,
                prompt_version=self.prompt.version,
            )
            if isinstance(consulted, EpisodeResult):
                return consulted
            result = self._ask(
                question,
                database,
                evidence=consulted.evidence,
                seed=seed,
                greedy=greedy,
                on_event=on_event,
                should_stop=should_stop,
                vote=vote,
                early_stop=early_stop,
                abstain_below=abstain_below,
            )
        result.evidence, result.given = evidence, consulted.given
        return result

    def _ask(
        self,
        question: str,
        db: ReadOnlyDatabase,
        *,
        evidence: str | None,
        seed: int | None,
        greedy: bool,
        on_event: Callable[[EpisodeEvent], None] | None,
        should_stop: Callable[[], bool] | None,
        vote: int | Literal["auto"] | None,
        early_stop: bool,
        abstain_below: float | None,
    ) -> EpisodeResult:
        """`ask` once the evidence is composed: one episode, or a vote."""
        k = self.vote_k(vote)
        if k is not None:
            result = self._vote(
                question,
                db,
                k,
                evidence=evidence,
                seed=seed,
                greedy=greedy,
                should_stop=should_stop,
                early_stop=early_stop and abstain_below is None,
            )
            return abstain(result, abstain_below) if abstain_below is not None else result
        return self._episode(
            question, db, evidence=evidence, seed=seed, greedy=greedy, on_event=on_event, should_stop=should_stop
        )

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
        with _opened(db) as database:
            with self._borrowed() as session:
                result = run_episode(
                    session,
                    Toolbox(database),
                    question,
                    evidence=evidence,
                    params=params,
                    prompt=prompt or self.prompt,
                    budget=self.budget,
                    should_stop=should_stop,
                    on_event=on_event,
                    share_opening=share_opening,
                )
                result.stats.llama_settings, result.stats.tuning = session.info.settings, self.tuning
                if watch is not None:
                    watch(Ask(question, database, evidence, seed, prompt=prompt), session, result)
            result.checks = check_episode(database, result)  # the session is free again meanwhile
            return result

    def ask_many(
        self,
        questions: Sequence[str | Ask | tuple],
        db: str | Path | ReadOnlyDatabase | None = None,
        *,
        evidence: str | None = None,
        seed: int | None = None,
        greedy: bool = False,
        should_stop: Callable[[], bool] | None = None,
        on_result: Callable[[int, EpisodeResult], None] | None = None,
    ) -> list[EpisodeResult]:
        """Answer several questions, `parallel` at a time; the results come in input order.

        A question is a str (about `db`, with `evidence` and `seed`) or an `Ask` (or a tuple of
        its fields: `(question, db, evidence, seed)`) whose fields that are not None win. Each
        database file is opened once and shared by its questions. `on_result(i, result)` is
        called as each episode finishes (in the calling thread); `should_stop` ends them all.
        Runs through `each`, which yields the results as they finish.

        A question that fails with an EdgeSqlError (a missing database, an empty question, one
        too long for the context) gets a result with `stop == "error"` and the message in
        `error`, so one bad question costs no other its answer. Any other exception is raised
        once every running question has finished; so is a KeyboardInterrupt (Ctrl-C) while
        waiting, after the running episodes have been stopped.
        """
        items = [_ask_item(q, db, evidence, seed) for q in questions]
        outcomes: list[EpisodeResult | Exception | None] = [None] * len(items)
        for i, outcome in self._each(items, greedy=greedy, should_stop=should_stop):
            outcomes[i] = outcome
            if on_result is not None and isinstance(outcome, EpisodeResult):
                on_result(i, outcome)
        for failed in outcomes:
            if isinstance(failed, BaseException) and not isinstance(failed, EdgeSqlError):
                raise failed
        return [
            self._error_result(item, outcome) if isinstance(outcome, BaseException) else outcome
            for item, outcome in zip(items, outcomes)
            if outcome is not None
        ]

    def close(self) -> None:
        """Free the context (idempotent). Waits for running `ask` calls to finish; calls waiting
        for a free session get EdgeSqlError. The loaded model stays in the process until another
        model is loaded, so a new Agent on the same file starts at once;
        `edge_sql.runtime.release_idle()` frees it now."""
        with self._pool:
            if self._group is None:
                return
            self._closed = True
            self._pool.notify_all()
            while len(self._free) < len(self._group):
                self._pool.wait()
            self._group.close()
            self._group, self._free = None, []
        with self._knowledge_lock:
            if self._knowledge is not None:
                self._knowledge.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the pool ------------------------------------------------------------------------

    @contextmanager
    def _borrowed(self) -> Iterator[Session]:
        """A free session for one episode, given back after it; waits while all are busy."""
        with self._pool:
            while not self._closed and not self._free:
                self._pool.wait()
            if self._closed:
                raise ClosedError("this Agent is closed")
            session = self._free.pop()
        try:
            yield session
        finally:
            with self._pool:
                self._free.append(session)
                self._pool.notify_all()

    def each(
        self,
        items: Sequence[Ask],
        *,
        greedy: bool = False,
        should_stop: Callable[[], bool] | None = None,
        early_stop: bool = True,
        watch: Callable[[int, Ask, Session, EpisodeResult], None] | None = None,
    ) -> Generator[tuple[int, EpisodeResult | Exception], None, None]:
        """Answer `items` (each with its own database, evidence, seed; see `Ask`), `parallel` at a
        time, yielding `(index, result)` as each finishes, or `(index, exception)` for one that
        could not be asked (a bad database, a question too long for the context). An item with
        `vote=K` is answered as `ask(..., vote=K, early_stop=early_stop)`; its episodes borrow
        sessions like any other. `watch(index, ask, session, result)` sees each episode (each of a
        vote's, with its own seed) on its session before the session is given back.
        `should_stop` ends them all; closing the iterator early (Ctrl-C, an error) stops the
        running episodes, starts no more and waits for them. This is the one driver of episodes:
        `ask_many`, `ask(vote=K)` and the bench (`bench/episodes.py`) run through it."""
        return self._each(list(items), greedy=greedy, should_stop=should_stop, early_stop=early_stop, watch=watch)

    def _each(
        self,
        items: list[Ask],
        *,
        greedy: bool,
        should_stop: Callable[[], bool] | None,
        early_stop: bool = True,
        watch: Callable[[int, Ask, Session, EpisodeResult], None] | None = None,
        skip: Callable[[], bool] | None = None,
        share_opening: bool = False,
    ) -> Generator[tuple[int, EpisodeResult | Exception], None, None]:
        """`each`, with what a vote adds: an item not started yet when `skip()` is True is not
        asked (nothing is yielded for it); `share_opening` (see `run_episode`)."""
        stop = threading.Event()

        def stopped() -> bool:
            return stop.is_set() or (should_stop is not None and should_stop())

        def one(i: int, databases: dict[object, ReadOnlyDatabase | EdgeSqlError]) -> EpisodeResult | Exception | None:
            item = items[i]
            if skip is not None and skip():
                return None
            seen = None if watch is None else (lambda ask, session, result: watch(i, ask, session, result))
            try:
                database = databases[_db_key(item.db)]
                if isinstance(database, BaseException):
                    raise database
                k = self.vote_k(item.vote)
                if k is not None:
                    return self._vote(
                        item.question,
                        database,
                        k,
                        evidence=item.evidence,
                        seed=item.seed,
                        greedy=greedy,
                        should_stop=stopped,
                        early_stop=early_stop,
                        prompt=item.prompt,
                        watch=seen,
                    )
                return self._episode(
                    item.question,
                    database,
                    evidence=item.evidence,
                    seed=item.seed,
                    greedy=greedy,
                    on_event=None,
                    should_stop=stopped,
                    share_opening=share_opening,
                    prompt=item.prompt,
                    watch=seen,
                )
            except Exception as exc:
                return exc

        with ExitStack() as stack:
            databases = _open_each(items, stack)
            pool = ThreadPoolExecutor(
                max_workers=max(1, min(self.parallel, len(items))), thread_name_prefix="edge-sql-ask"
            )
            try:
                futures = {pool.submit(one, i, databases): i for i in range(len(items))}
                for future in as_completed(futures):
                    outcome = future.result()
                    if outcome is not None:
                        yield futures[future], outcome
            finally:  # done, or Ctrl-C / the caller stopped reading: stop the running episodes, start no more
                stop.set()
                pool.shutdown(wait=True, cancel_futures=True)

    # ---- the vote ------------------------------------------------------------------------

    def vote_k(self, vote: int | Literal["auto"] | None) -> int | None:
        """The episodes `vote` answers with (None: one episode, no vote): the plan's
        (`SessionPlan.vote_k`), for `ask`, `each`, serve and the bench."""
        return self.plan.vote_k(vote)

    def _vote(
        self,
        question: str,
        db: str | Path | ReadOnlyDatabase,
        k: int,
        *,
        evidence: str | None,
        seed: int | None,
        greedy: bool,
        should_stop: Callable[[], bool] | None,
        early_stop: bool = True,
        share_opening: bool = True,
        prompt: PromptTemplate | None = None,
        watch: Watch | None = None,
    ) -> EpisodeResult:
        problem = vote_refusal(k, greedy)
        if problem is not None:
            raise ValueError(problem)
        if not question or not question.strip():
            raise EdgeSqlError("empty question")
        first = seed if seed is not None else random.randrange(2**31)
        seeds = [first + i for i in range(k)]
        started = time.perf_counter()
        with _opened(db) as database:
            tally = Tally(k, database, max_rows=self.budget.max_result_rows)
            done = threading.Event()  # the vote is decided: the episodes still running cannot change it

            def stopped() -> bool:
                return done.is_set() or (should_stop is not None and should_stop())

            items = [Ask(question, database, evidence, s, prompt=prompt) for s in seeds]
            outcomes: list[EpisodeResult | None] = [None] * k
            seen = None if watch is None else (lambda _i, ask, session, result: watch(ask, session, result))
            with closing(
                self._each(
                    items, greedy=False, should_stop=stopped, watch=seen, skip=done.is_set, share_opening=share_opening
                )
            ) as finished:
                for i, outcome in finished:
                    if isinstance(outcome, BaseException):
                        raise outcome  # the question itself cannot be asked (too long, agent closed, ...)
                    outcomes[i] = outcome
                    if outcome.stop != "cancelled" and tally.add(outcome) and early_stop:
                        done.set()
            results = outcomes
            if done.is_set():  # those stopped by the decision do not vote
                results = [r if r is not None and r.stop != "cancelled" else None for r in results]
            result = choose(results, database, max_rows=self.budget.max_result_rows, keys=tally.keys)
        vote = result.stats.vote
        assert vote is not None  # choose() set it
        vote.seeds, vote.wall_s = seeds, round(time.perf_counter() - started, 4)
        vote.prompt_tokens_evaluated = sum(
            r.stats.measured.timings.prompt_tokens for r in outcomes if isinstance(r, EpisodeResult)
        )
        join_vote(result)  # the agreement joins the answer's checks
        return result

    def _error_result(self, item: Ask, error: BaseException) -> EpisodeResult:
        """What `ask_many` returns for a question that could not be asked."""
        return EpisodeResult(
            question=item.question,
            evidence=item.evidence,
            sql=None,
            columns=[],
            rows=[],
            truncated=False,
            forced=False,
            fallback=False,
            answer=None,
            rounds=[],
            stats=EpisodeStats(),
            transcript="",
            stop="error",
            error=str(error),
            prompt_version=self.prompt.version,
        )


def _ask_item(
    question: str | Ask | tuple, db: str | Path | ReadOnlyDatabase | None, evidence: str | None, seed: int | None
) -> Ask:
    """`question` as an Ask, its empty fields filled from `ask_many`'s arguments."""
    item = question if isinstance(question, Ask) else Ask(*question) if isinstance(question, tuple) else Ask(question)
    item = dataclasses.replace(
        item,
        db=item.db if item.db is not None else db,
        evidence=item.evidence if item.evidence is not None else evidence,
        seed=item.seed if item.seed is not None else seed,
    )
    if item.db is None:
        raise ValueError(f"no database for the question {item.question!r}: pass db, or an Ask with its own")
    return item


def _db_key(db: str | Path | ReadOnlyDatabase | None) -> Path | ReadOnlyDatabase:
    assert db is not None  # _ask_item filled it
    return db if isinstance(db, ReadOnlyDatabase) else Path(db)


def _open_each(items: list[Ask], stack: ExitStack) -> dict[object, ReadOnlyDatabase | EdgeSqlError]:
    """Every database the items name, each file opened once (closed with `stack`); a file that
    cannot be opened maps to its error, which its questions then raise."""
    databases: dict[object, ReadOnlyDatabase | EdgeSqlError] = {}
    for item in items:
        key = _db_key(item.db)
        if key in databases:
            continue
        if isinstance(key, ReadOnlyDatabase):
            databases[key] = key
            continue
        try:
            databases[key] = stack.enter_context(ReadOnlyDatabase(key))
        except EdgeSqlError as exc:
            databases[key] = exc
    return databases


@contextmanager
def _opened(db: str | Path | ReadOnlyDatabase) -> Iterator[ReadOnlyDatabase]:
    """`db` open read-only: a path is opened here and closed after; an open database is used as is."""
    if isinstance(db, ReadOnlyDatabase):
        yield db
        return
    with ReadOnlyDatabase(db) as database:
        yield database


def _gguf_name(path: Path) -> str | None:
    """The model's own name in its GGUF metadata (`general.name`), if it has one."""
    from edge_sql.convert.gguf_file import read_gguf

    try:
        return read_gguf(path).name
    except (OSError, EdgeSqlError):  # the file loaded already: a name is only a nicety here
        return None
