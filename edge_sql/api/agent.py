"""`Agent`: a model loaded once that answers many questions, each an episode on a session
borrowed from its pool (`session_pool.py`); `each` drives them (`driver.py`), a vote is
`vote.py`'s, the knowledge is consulted first (`knowledge_hook.py`) and the sessions are the
plan's (`plan.py`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Unpack

from edge_sql.agent.budget import Budget, small_model_note
from edge_sql.agent.events import EpisodeEvent
from edge_sql.agent.given import FollowUp
from edge_sql.agent.prompt import PromptTemplate, load_prompt
from edge_sql.agent.result import EpisodeResult
from edge_sql.api.agent_settings import AgentOptions, AgentSettings, make_settings
from edge_sql.api.answer import Answering
from edge_sql.api.asks import Ask
from edge_sql.api.config import settings_in_effect
from edge_sql.api.knowledge_api import AgentKnowledge
from edge_sql.api.knowledge_hook import KnowledgeHook
from edge_sql.api.many import AskMany
from edge_sql.api.plan import gguf_name, plan_sessions, prefix_state_dir
from edge_sql.api.session_pool import Place, SessionPool
from edge_sql.api.stopping import StopWhen
from edge_sql.errors import ClosedError, EdgeSqlError, QuestionError
from edge_sql.runtime import PrefixCache, Session, SessionInfo
from edge_sql.tools import ReadOnlyDatabase, opened

_log = logging.getLogger("edge_sql.api")  # what `log=` gets goes here too, at INFO


class Agent(AskMany, Answering):
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
    `session_settings` (a benchmark's: flash attention, thread adaptation, ...) win over the
    settings the sessions would open with.

    `greedy` and `seed` are what `ask` and `ask_many` use when the call gives none (a vote still
    samples). `Agent.from_config(profile=...)` makes an Agent from the command line's settings.
    `settings=AgentSettings(...)` (api/agent_settings.py) gives every keyword at once, the
    keywords on top; `agent.settings` is what the Agent was made with, unchanged.

    Thread safety: `ask` may be called from any number of threads. Each call takes its turn in
    one queue (`agent.queue`, serve's too), first come, first served, at most `max_waiting` calls
    waiting (one more: QueueFull), so up to `parallel` calls run at once (with the default
    `parallel=1` they run one after another), each episode on a session of its own; each gets
    its own result. `ask_many`
    answers a list N at a time; `ask(..., vote=K)` runs K sampled episodes and answers with the
    result set most of them return (`agent/majority_vote.py`). `ask_async` and `ask_many_async`
    are the same calls for an event loop (`many.py`).
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        settings: AgentSettings | None = None,
        log: Callable[[str], None] = lambda _m: None,
        **options: Unpack[AgentOptions],
    ) -> None:
        def said(message: str) -> None:  # to the caller's `log` and the `edge_sql.api` logger
            _log.info(message)
            log(message)

        # the one settings object (`api/agent_settings.py`): `settings`, the keywords on top
        base = settings if settings is not None else make_settings()
        self.settings = base.with_(**options, **({"model": model} if model is not None else {}))
        self.prompt: PromptTemplate = load_prompt(self.settings.prompt_file)
        self.budget = self.settings.budget or Budget()
        self.greedy, self.seed = self.settings.greedy, self.settings.seed
        self._closing = threading.Event()  # close(cancel=True): every running episode stops
        self._executor = None  # ask_async's threads, started on first use (`many.py`)
        self.plan = plan_sessions(self.settings, log=said)
        self.parallel, self.model_path, self.tuning = self.plan.sessions, self.plan.model_path, self.plan.tuning
        self.auto_vote, self.auto_vote_line = self.plan.auto_vote, self.plan.auto_vote_line
        self._pool: SessionPool | None = SessionPool.open(  # what `ask` borrows from; None once closed
            self.plan,
            PrefixCache(prefix_state_dir() if self.settings.prefix_cache else None, log=said),
            self.settings.max_waiting,
            calls=self.settings.parallel,  # requests at once; a vote's extra sessions are its own episodes'
        )
        self.load_s = self._pool.load_s  # opening the sessions (the model, the context)
        note = small_model_note(self.model_path.name, self.info.architecture, gguf_name(self.model_path), self.budget)
        if note is not None:
            said(note)  # once per load: a model not trained for the protocol, with its open bounds
        self._knowledge = KnowledgeHook(self.count_tokens)  # opened by the first question that consults it

    @classmethod
    def from_config(
        cls,
        profile: str | None = None,
        model: str | Path | None = None,
        *,
        log: Callable[[str], None] = lambda _m: None,
        **options: Unpack[AgentOptions],
    ) -> Agent:
        """An Agent from the command line's settings (`api/config.py`): `edge-sql.toml`,
        `$EDGE_SQL_HOME/config.toml`, `profile` (default `$EDGE_SQL_PROFILE`) and
        `EDGE_SQL_<OPTION>`, under the command line's names; `model` and `options` (Agent's
        keywords) win. Nothing is downloaded unless `pull_if_missing=True` is given."""
        explicit: dict[str, object] = {**options, **({"model": model} if model is not None else {})}
        return cls(settings=settings_in_effect(profile, **explicit), log=log)

    @property
    def sessions(self) -> list[Session]:
        """The agent's sessions, one per parallel sequence (empty once closed)."""
        return list(self._pool.views) if self._pool is not None else []

    @property
    def session(self) -> Session | None:
        """The one session of a `parallel=1` Agent (None once closed); with more, see `sessions`."""
        if self.parallel != 1:
            raise EdgeSqlError(
                f"this Agent has {self.parallel} sessions (parallel={self.parallel}): use agent.sessions"
            )
        return self._pool.views[0] if self._pool is not None else None

    @property
    def info(self) -> SessionInfo:
        """How the model was loaded (file, backend, GPU layers, threads, context)."""
        return self._open_pool().group.info

    @property
    def knowledge(self) -> AgentKnowledge:
        """The notes and verified answers `ask` consults (the store's knowledge database), its
        bounds measured with this model's tokenizer; opened on first use. Its calls take what
        `ask` takes (a path or an open database); once the Agent is closed, ClosedError."""
        self._open_pool()
        return self._knowledge.knowledge()

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` is in the model's own vocabulary."""
        return len(self._open_pool().views[0].tokenize(text, special=False))

    def warm_up(self) -> None:
        """Build what the first question would otherwise wait for: the grammar engine's view of the
        vocabulary (seconds for 248k tokens, holding the GIL and not cancellable). Servers call it
        at start so no client's first request pays for it."""
        for session in self._open_pool().views:  # one view per loaded model: the first builds it
            session.lltokenizer()

    def ask(
        self,
        question: str,
        db: str | Path | ReadOnlyDatabase,
        *,
        evidence: str | None = None,
        seed: int | None = None,
        greedy: bool | None = None,
        on_event: Callable[[EpisodeEvent], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        timeout: float | None = None,
        vote: int | Literal["auto"] | None = None,
        early_stop: bool = True,
        abstain_below: float | None = None,
        follow_up: FollowUp | None = None,
        fresh: bool = False,
        knowledge: bool = True,
        place: Place | None = None,
    ) -> EpisodeResult:
        """Answer `question` about `db` (a path, opened read-only, or an open ReadOnlyDatabase).

        With `knowledge` (docs/knowledge.md): a question verified before on this database (same
        words, case, spacing and punctuation aside) is answered at once by running its stored SQL
        afresh (`stop == "verified"`; `fresh=True` asks the model instead); otherwise the notes
        that apply and the most similar verified answers join the evidence. `follow_up` (the
        previous question and its SQL) goes into the evidence too. `result.given` says what was
        given; `result.evidence` stays the caller's.

        `seed` makes sampling reproducible; `greedy` always takes the most likely token (None: the
        Agent's `seed` and `greedy`). `on_event` sees each round and call as it happens;
        `should_stop` returning True ends the episode at the next token (`result.stop ==
        "cancelled"`), and so does `timeout` (seconds for the whole call, the wait for a free
        session included; `error` then says it was the deadline); both are also looked at while
        the call waits for a session (a cancelled result without rounds). Raises DatabaseError for
        a bad database, QuestionError for an empty question, QueueFull when `max_waiting` calls
        already wait. `place`: a place taken earlier in the Agent's queue (`agent.queue.enter()`,
        as serve takes one when a request arrives): the call answers in its turn, and leaves it.

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
            raise QuestionError("empty question")
        self._open_pool()  # a closed Agent answers nothing, not even from the knowledge it closed
        seed = self.seed if seed is None else seed
        greedy = (self.greedy and vote is None) if greedy is None else greedy  # a vote samples
        stop = should_stop if isinstance(should_stop, StopWhen) else self.stop_when(should_stop, timeout)
        with opened(db) as database:
            result = self._answer(
                Ask(question, database, evidence, seed, vote),
                database,
                greedy=greedy,
                should_stop=stop,
                on_event=on_event,
                early_stop=early_stop,
                abstain_below=abstain_below,
                follow_up=follow_up,
                fresh=fresh,
                knowledge=knowledge,
                place=place,
            )
        if result.stop == "cancelled":
            result.error = stop.message() + ("" if result.stats.figures is not None else " before the episode started")
        return result

    def stop_when(self, should_stop: Callable[[], bool] | None, timeout: float | None) -> StopWhen:
        """One call's reasons to stop (`api/stopping.py`): `should_stop`, `timeout`, `close(cancel=True)`."""
        return StopWhen(should_stop, timeout=timeout, closing=self._closing)

    def close(self, *, cancel: bool = False) -> None:
        """Free the context (idempotent). Waits for running `ask` calls to finish (`cancel=True`:
        stops them at the next token first, each returning a cancelled result); calls waiting
        for a free session get ClosedError, and so does every call after. No thread of edge-sql's
        is left once no Agent is open (the decode thread ends too). The loaded model stays in the
        process until another model is loaded, so a new Agent on the same file starts at once;
        `edge_sql.runtime.release_idle()` frees it now."""
        if cancel:
            self._closing.set()
        pool = self._pool
        if pool is not None:
            pool.wake()
            pool.close()
            self._pool = None
        self._knowledge.close()
        self._close_async()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_pool(self) -> SessionPool:
        """The session pool (ClosedError once the Agent is closed)."""
        if self._pool is None:
            raise ClosedError("this Agent is closed")
        return self._pool

    # ---- the vote ------------------------------------------------------------------------

    def vote_k(self, vote: int | Literal["auto"] | None) -> int | None:
        """The episodes `vote` answers with (None: one episode, no vote): the plan's
        (`SessionPlan.vote_k`), for `ask`, `each`, serve and the bench."""
        return self.plan.vote_k(vote)
