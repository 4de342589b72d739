"""One llama.cpp model and context on the low-level bindings: eval each token once, sample.

Why not `llama_cpp.Llama`: it re-evaluates the whole prompt of hybrid models (whose recurrent
state cannot be rolled back to a common prefix) on every call, checks grammars against the
whole vocabulary per token, and allocates an n_batch x n_vocab score buffer. Here the context
is append-only:
`eval` adds prompt tokens, `generate` adds sampled tokens, and every token is decoded
exactly once. The last sampled token of a completion is decoded lazily, together with the
next `eval` batch, so no decode call is spent on it alone.

The session holds the parts and the append-only bookkeeping (tokens, how many are decoded,
the next logits); the parts do one job each: `LlamaContext` (context.py) the llama.cpp context,
`Vocabulary` (vocabulary.py) tokens and text, `GrammarCache` (constrained.py) compiled grammars,
`PrefixCache` (prefix_state.py) saved prompt states, `Verifier` (speculative.py) speculation.

A Session is not thread-safe: use it from one thread at a time.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from edge_sql.errors import ClosedError, ContextFullError
from edge_sql.runtime.llama.backend import Closing
from edge_sql.runtime.llama.context import DecodeContext
from edge_sql.runtime.llama.loading import OpenedModel, open_model
from edge_sql.runtime.llama.shared_models import release, share
from edge_sql.runtime.options import SessionOptions
from edge_sql.runtime.records import Completion, SessionInfo, StopReason, Timings
from edge_sql.runtime.speculation.speculative import Drafter, Speculator, Verifier, make_verifier
from edge_sql.runtime.state.prefix_state import PrefixCache, StateSnapshot, prefix_key
from edge_sql.runtime.text.constrained import GrammarCache, GrammarConstraint
from edge_sql.runtime.text.sampling import NoAllowedToken, SamplingParams, sample, sample_allowed
from edge_sql.runtime.text.vocabulary import TextStream, Vocabulary


class Session(Closing):
    """A loaded model with one append-only context.

    Settings come as `options` (a `SessionOptions`, whose docstring says what each does), with
    any of its fields given as keywords on top (`Session(path, n_ctx=2048, n_threads=1)`).
    `options` (resolved) and `info` say what was chosen.

    Shared prefix: after `shared_prefix(tokens)`, the next `eval` on an empty context that
    starts with `tokens` restores their saved state (attention KV and recurrent state) from
    `prefix_cache` instead of evaluating them, or evaluates them alone and saves the state
    there. Without a cache the session keeps the last prefix in memory; a `PrefixCache` with
    a folder also keeps states on disk for later processes.
    """

    def __init__(
        self,
        model: str | Path | OpenedModel,
        options: SessionOptions | None = None,
        *,
        prefix_cache: PrefixCache | None = None,
        **settings: Any,
    ) -> None:
        """`model`: a GGUF path (loaded with `options` and `settings`), or a model and context
        opened elsewhere, which the session then owns (`on_context`)."""
        opened = (
            model
            if isinstance(model, OpenedModel)
            else open_model(model, replace(options or SessionOptions(), **settings))
        )
        self._loaded, self._context, self.info = opened
        self.options = self._context.options  # resolved
        self.vocab = Vocabulary(self._loaded)  # reads the loaded model: cannot fail
        self._grammars = GrammarCache(self.lltokenizer, self.vocab.n_vocab)  # compiles on first use
        self._verifier: Verifier | None = None
        try:  # from here on what is made may fail: what was made before is freed by `close()`
            self._verifier = make_verifier(self.options, self._context)  # its MTP context reads this one's
            if self._verifier is not None:
                self.info.buffers.update(self._verifier.buffers)  # the MTP context's own KV and compute
            self._prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache()
            self._pending_prefix: list[int] | None = None
            self._pending_opening: list[int] | None = None
            self.reset()
        except BaseException:
            self.close()
            raise

    @classmethod
    def on_context(
        cls, context: DecodeContext, info: SessionInfo, *, prefix_cache: PrefixCache | None = None
    ) -> Session:
        """A session on a context made elsewhere: one sequence of a batched context
        (runtime/batching/sequences.py). It holds a reference to the model, as every session does."""
        return cls(OpenedModel(share(context.loaded), context, info), prefix_cache=prefix_cache)

    # ---- context state -------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the context and zero the counters; the next generate re-seeds the sampler."""
        self._context.clear()
        self._context.reset_perf()
        self._tokens: list[int] = []
        self._n_evaluated = 0
        self._n_restored = 0
        self._logits: np.ndarray | None = None
        self._rng: np.random.Generator | None = None
        self._pending_prefix = self._pending_opening = None
        self.timings = Timings()
        if self._verifier is not None:
            self._verifier.speculator.reset()

    def seed(self, seed: int | None) -> None:
        """Re-seed the sampler now (otherwise the first generate after reset seeds it)."""
        self._rng = np.random.default_rng(seed)

    @property
    def n_ctx(self) -> int:
        return self._context.n_ctx

    @property
    def n_past(self) -> int:
        """Tokens in the context: prompt tokens evaluated plus tokens generated."""
        return len(self._tokens)

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    @property
    def context(self) -> DecodeContext:
        """The session's llama.cpp context, for what runs beside it (an `MTPDrafter`). The
        session owns it: close what reads it before `close()`."""
        if self._context is None:
            raise ClosedError("the session is closed: its context has been freed")
        return self._context

    @property
    def llama_model(self) -> llama_cpp.llama_model_p:
        """The loaded llama.cpp model, to open another context on the same weights (as
        `teacher_forcing` does). Sessions of the same file share it (runtime/llama/shared_models.py):
        never free it, and free any context made from it before `close()`. Raises ClosedError
        once the session is closed."""
        if self._loaded is None:
            raise ClosedError("the session is closed: its model has been freed")
        return self._loaded.model

    @property
    def tokens(self) -> list[int]:
        return list(self._tokens)

    @property
    def decoded_tokens(self) -> int:
        """Tokens passed to llama_decode since the last reset (n_past minus a pending token,
        minus restored prefix tokens, plus draft tokens that were rolled back)."""
        return self._n_evaluated - self._n_restored + self.timings.rolled_back_tokens

    @property
    def speculator(self) -> Speculator | None:
        """Who drafts for `generate` (None: speculation is off for this session)."""
        return self._verifier.speculator if self._verifier is not None else None

    def use_drafters(
        self, drafters: list[Drafter], *, auto: bool = False, max_k: int | None = None, adaptive: bool = True
    ) -> None:
        """Draft with `drafters` (priority order) from now on, at most `max_k` tokens a batch
        (default and limit: the session's `draft_max`); the session must have been loaded with
        speculation on (its context is sized for verify batches then)."""
        draft_max = self.options.draft_max
        if not draft_max:
            raise RuntimeError("speculation is off for this session: load it with speculate='lookup' or 'auto'")
        max_k = draft_max if max_k is None else max_k
        if not 1 <= max_k <= draft_max:
            raise ValueError(f"max_k must be in 1..{draft_max}")
        speculator = Speculator(drafters, max_k=max_k, auto=auto, adaptive=adaptive)
        if self._verifier is None:
            self._verifier = Verifier(self._context, speculator, draft_max)
        else:
            self._verifier.speculator = speculator

    def llama_perf_counts(self) -> tuple[int, int]:
        """llama.cpp's own counters since the last reset: (batch tokens, single-token decodes).

        llama.cpp reports each as at least 1.
        """
        return self._context.perf_counts()

    # ---- tokens and text (the vocabulary's) ------------------------------------------------

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return self.vocab.tokenize(text, special=special)

    def token_bytes(self, token: int) -> bytes:
        return self.vocab.token_bytes(token)

    def detokenize(self, tokens: Iterable[int]) -> str:
        return self.vocab.detokenize(tokens)

    def is_special_token(self, token: int) -> bool:
        return self.vocab.is_special_token(token)

    def grammar_token(self, text: str) -> str:
        return self.vocab.grammar_token(text)

    def lltokenizer(self) -> Any:
        """llguidance's view of this vocabulary (built on first use: seconds for 248k tokens;
        shared by the sessions of one loaded model, see runtime/llama/shared_models.py)."""
        return self.vocab.lltokenizer()

    # ---- evaluation ----------------------------------------------------------------------

    def eval(self, tokens: Iterable[int]) -> None:
        """Append prompt tokens to the context and evaluate them (each exactly once)."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            return
        if len(self._tokens) + len(tokens) > self.n_ctx:
            raise ContextFullError(
                f"context full: {len(self._tokens)} + {len(tokens)} tokens exceed the {self.n_ctx}-token window"
            )
        bad = [t for t in tokens if not 0 <= t < self.n_vocab]
        if bad:
            raise ValueError(f"token ids out of range: {bad[:5]}")
        start = time.perf_counter()
        ran_with = self._context.ran_with.copy()
        prefix, self._pending_prefix = self._pending_prefix, None
        opening, self._pending_opening = self._pending_opening, None
        if (
            opening
            and not self._tokens
            and tokens[: len(opening)] == opening
            and prefix == opening[: len(prefix or [])]
        ):
            self._open_with(opening, prefix)  # not engaged: it may wait for another session making the state
            tokens = tokens[len(opening) :]
        elif prefix and not self._tokens and tokens[: len(prefix)] == prefix:
            self._start_with(prefix)  # not engaged: it may wait for another session making the state
            tokens = tokens[len(prefix) :]
        self._tokens.extend(tokens)
        with self._context.engaged():
            self._flush()
        self.timings.prompt_s += time.perf_counter() - start
        self.timings.prompt_tokens += len(tokens)
        self.timings.threads += self._context.ran_with - ran_with

    def logits(self) -> np.ndarray:
        """A copy of the next-token logits after everything in the context."""
        self._flush()
        if self._logits is None:
            raise RuntimeError("the context is empty: no logits yet")
        return self._logits.copy()

    def _flush(self, upto: int | None = None) -> None:
        """Decode the tokens not yet evaluated (up to index `upto`), in n_batch chunks; logits
        for the last one when that is the context's last token."""
        n_total = len(self._tokens) if upto is None else upto
        while self._n_evaluated < n_total:
            chunk = self._tokens[self._n_evaluated : min(n_total, self._n_evaluated + self._context.n_batch)]
            last_chunk = self._n_evaluated + len(chunk) == len(self._tokens)
            self._logits = None
            tick = time.perf_counter()
            self._context.decode(chunk, self._n_evaluated, outputs="last" if last_chunk else "none")
            if len(chunk) == 1 and self._verifier is not None:
                self._verifier.time_single_decode(time.perf_counter() - tick)
            self._n_evaluated += len(chunk)
            if last_chunk:
                self._logits = self._context.logits(-1)

    # ---- saved states ----------------------------------------------------------------------

    def shared_prefix(self, tokens: Iterable[int], *, opening: Iterable[int] | None = None) -> None:
        """Declare that the next `eval` on this empty context starts with `tokens`, a prefix
        many episodes share (system prompt and tool list): restore its saved state if there
        is one, else evaluate it alone and save it. Ignored when the context is not empty.

        `opening` (starting with `tokens`): the whole opening, which sessions starting together
        share too (the K episodes of a vote): the first to start evaluates what follows the
        prefix once and keeps the state in memory (not on disk); the others wait for it and
        restore it instead of evaluating the question each (`PrefixCache.claim`)."""
        self._pending_prefix = [int(t) for t in tokens] if not self._tokens else None
        self._pending_opening = [int(t) for t in opening] if opening is not None and not self._tokens else None

    def snapshot(self) -> StateSnapshot:
        """The whole context: its tokens, llama.cpp's sequence state and the last logits."""
        self._flush()
        if self._logits is None:
            raise RuntimeError("the context is empty: nothing to snapshot")
        return StateSnapshot(tokens=tuple(self._tokens), state=self._context.state(), logits=self._logits.copy())

    def restore(self, snapshot: StateSnapshot) -> bool:
        """Replace the context with a snapshot's (counted as restored, not evaluated tokens).

        Returns False, leaving the context empty, when llama.cpp rejects the state (made with
        another model or settings) or it does not fit this context. Counters and the sampler's
        seed are kept.
        """
        self._context.clear()
        self._tokens, self._n_evaluated, self._n_restored, self._logits = [], 0, 0, None
        if len(snapshot.tokens) > self.n_ctx or snapshot.logits.shape != (self.n_vocab,):
            return False
        if not self._context.set_state(snapshot.state, snapshot.tokens):
            return False
        self._tokens = list(snapshot.tokens)
        self._n_evaluated = self._n_restored = len(self._tokens)
        self._logits = np.array(snapshot.logits, dtype=np.float32)
        self.timings.restored_tokens += len(self._tokens)
        return True

    def _prefix_key(self, prefix: list[int]) -> str:
        return prefix_key(self.info.model_path, self.options, self.info.backend, prefix)

    def _open_with(self, opening: list[int], prefix: list[int] | None) -> None:
        """Fill the empty context with `opening`: restored from the state a session starting
        with it keeps in memory, or made here (the prefix's state first, then the rest evaluated)
        and kept for the others."""
        key = self._prefix_key(opening)
        with self._prefix_cache.claim(key, opening) as snapshot:
            tick = time.perf_counter()
            if snapshot is not None:
                if self.restore(snapshot):
                    self.timings.restore_s += time.perf_counter() - tick
                    return
                self._prefix_cache.discard(key)
            if prefix:
                self._start_with(prefix)
            rest = opening[len(self._tokens) :]
            self._tokens.extend(rest)
            with self._context.engaged():
                self._flush()
            self.timings.prompt_tokens += len(rest)
            self._prefix_cache.put(key, self.snapshot(), disk=False)

    def _start_with(self, prefix: list[int]) -> None:
        """Fill the empty context with `prefix`: its saved state restored, or evaluated alone and
        saved. The sessions of a group start together: the cache lets one of them evaluate it
        while the others wait for its state, instead of each evaluating the same tokens."""
        key = self._prefix_key(prefix)
        with self._prefix_cache.claim(key, prefix) as snapshot:
            tick = time.perf_counter()
            if snapshot is not None:
                if self.restore(snapshot):
                    self.timings.restore_s += time.perf_counter() - tick
                    return
                self._prefix_cache.log(
                    f"note: the saved prompt state {key[:12]} did not load; evaluating the prompt instead"
                )
                self._prefix_cache.discard(key)
            self._tokens.extend(prefix)
            with self._context.engaged():
                self._flush()
            self.timings.prompt_tokens += len(prefix)
            self._prefix_cache.put(key, self.snapshot())

    # ---- generation ----------------------------------------------------------------------

    def generate(
        self,
        *,
        grammar: str | None = None,
        params: SamplingParams = SamplingParams(),
        max_tokens: int,
        stop_tokens: Collection[int] = (),
        should_stop: Callable[[], bool] | None = None,
        on_text: Callable[[str], None] | None = None,
        audit: bool = False,
    ) -> Completion:
        """Sample up to `max_tokens` tokens into the context, under a Lark grammar if given.

        Stops when a stop token is sampled ("stop": the token stays in the context and
        `ended_turn` is True; under a grammar stop tokens are allowed only where the grammar
        may end), when the grammar admits nothing more ("grammar_done": nothing is appended,
        the caller closes the turn if it wants to), at `max_tokens`, when `should_stop()`
        returns True ("cancelled"), or when the context is full ("context_full"). Tokens the
        grammar forces are appended without sampling and decoded as one batch; they count
        as generated tokens and in `n_forced`.

        `audit=True` (a measurement, slower) decodes forced tokens one at a time too and counts
        the grammar steps where the model's raw top token was not allowed (`n_overruled`).

        Speculation (a session loaded with `speculate` on; not with `audit`): where a token is
        pending, a verify batch of drafts may supply the logits of the next steps instead of
        decodes; the appended tokens are the ones non-speculative decoding appends for the
        same logits (runtime/speculation/speculative.py says how).
        """
        with self._context.engaged():
            return self._generate(grammar, params, max_tokens, stop_tokens, should_stop, on_text, audit)

    def _generate(
        self,
        grammar: str | None,
        params: SamplingParams,
        max_tokens: int,
        stop_tokens: Collection[int],
        should_stop: Callable[[], bool] | None,
        on_text: Callable[[str], None] | None,
        audit: bool,
    ) -> Completion:
        """The loop of `generate`: each step appends the tokens the grammar forces, or samples
        one token from the next logits and appends it, until a stop reason holds."""
        run = self._start_run(grammar, params, max_tokens, stop_tokens, on_text, audit)
        reason: StopReason | None = None
        while reason is None:
            reason = self._stop_before_step(run, should_stop)
            if reason is None and not self._append_forced(run):
                reason = self._sample_step(run)
        return self._finish_run(run, reason)

    def _start_run(
        self,
        grammar: str | None,
        params: SamplingParams,
        max_tokens: int,
        stop_tokens: Collection[int],
        on_text: Callable[[str], None] | None,
        audit: bool,
    ) -> _Run:
        if not self._tokens:
            raise ValueError("generate() needs a prompt: eval() some tokens first")
        if self._rng is None:
            self.seed(params.seed)
        assert self._rng is not None  # seeded above
        constraint = self._grammars.get(grammar) if grammar is not None else None
        if constraint is not None:
            constraint.start(list(stop_tokens))
        return _Run(
            constraint=constraint,
            stop_set=frozenset(int(t) for t in stop_tokens),
            params=params,
            rng=self._rng,
            verifier=self._verifier if not audit else None,
            text=TextStream(self.vocab, on_text),
            start=len(self._tokens),
            max_tokens=max_tokens,
            audit=audit,
            ran_with=self._context.ran_with.copy(),
            started=time.perf_counter(),
        )

    def _room(self, run: _Run) -> int:
        """Tokens this call may still append: within `max_tokens` and the context."""
        return min(run.max_tokens - (len(self._tokens) - run.start), self.n_ctx - len(self._tokens))

    def _stop_before_step(self, run: _Run, should_stop: Callable[[], bool] | None) -> StopReason | None:
        """Why the call ends before another step (None: it goes on)."""
        if should_stop is not None and should_stop():
            return "cancelled"
        if run.constraint is not None and run.constraint.is_stopped:
            return "grammar_done"
        if self._room(run) <= 0:
            return "max_tokens" if len(self._tokens) - run.start >= run.max_tokens else "context_full"
        return None

    def _append_forced(self, run: _Run) -> bool:
        """Append the tokens the grammar forces here without sampling them (one at a time under
        audit, counted against the model's raw choice); False when it forces none. Where a stop
        token may end the turn nothing is forced: the model chooses."""
        constraint = run.constraint
        if constraint is None or (run.stop_set and constraint.is_accepting):
            return False
        tick = time.perf_counter()
        forced = constraint.forced_tokens()[: 1 if run.audit else self._room(run)]
        run.timings.sample_s += time.perf_counter() - tick
        if not forced:
            return False
        if run.audit:
            self._flush()
            assert self._logits is not None  # flushed: the logits after the last token
            constraint.compute_mask()
            run.n_audited += 1
            run.n_overruled += _overruled(constraint, self._logits)
        if run.verifier is not None and run.verifier.active:  # non-speculative decoding would not sample here
            run.verifier.end(run.timings)
        constraint.consume(forced)
        self._tokens.extend(forced)
        run.text.feed(forced)
        run.n_forced += len(forced)
        return True

    def _sample_step(self, run: _Run) -> StopReason | None:
        """Sample one token from the next logits and append it: "stop" for a stop token,
        "grammar_done" when the grammar is complete and admits no token, None to go on."""
        tick = time.perf_counter()
        logits = self._next_logits(run.verifier, self._room(run))
        tock = time.perf_counter()
        run.timings.decode_s += tock - tick
        token = self._sample(run, logits)
        if token is None:
            return "grammar_done"  # complete; only llguidance's own EOS was left
        run.timings.sample_s += time.perf_counter() - tock
        stop = token in run.stop_set  # a stop token stays out of the text
        if run.constraint is not None and not stop:
            run.constraint.consume([token])
        self._tokens.append(token)
        if not stop:
            run.text.feed([token])
        self._follow_drafts(run, token)
        return "stop" if stop else None

    def _sample(self, run: _Run, logits: np.ndarray) -> int | None:
        """A token from `logits` under the grammar's mask; None when the grammar may end and
        allows no token (llguidance's own EOS was all that was left)."""
        constraint = run.constraint
        if constraint is None:
            return sample(logits, run.params, run.rng)
        constraint.compute_mask()
        if run.audit:
            run.n_audited += 1
            run.n_overruled += _overruled(constraint, logits)
        try:
            token, _ = sample_allowed(logits, constraint.is_allowed, constraint.allowed_mask, run.params, run.rng)
        except NoAllowedToken:
            if not constraint.is_accepting:
                raise
            return None
        return token

    def _follow_drafts(self, run: _Run, token: int) -> None:
        """With a verify batch in flight, check `token` against its drafts: where it is the
        draft that the batch already evaluated, the batch's next row is the next step's logits
        and nothing is pending (the session's bookkeeping moves one token on)."""
        if run.verifier is None or not run.verifier.active:
            return
        after = run.verifier.follow(token, run.timings)
        if after is not None:
            self._n_evaluated += 1
            self._logits = after

    def _finish_run(self, run: _Run, reason: StopReason) -> Completion:
        """End the verify batch in flight, add the call's timings to the session's, and say what was added."""
        timings = run.timings
        if run.verifier is not None and run.verifier.active:
            run.verifier.end(timings)
        new_tokens = self._tokens[run.start :]
        timings.generate_s = time.perf_counter() - run.started
        timings.generated_tokens = len(new_tokens)
        timings.forced_tokens = run.n_forced
        timings.threads = self._context.ran_with - run.ran_with
        self.timings.add(timings)
        return Completion(
            tokens=new_tokens,
            text=run.text.finish(),
            stop_reason=reason,
            n_forced=run.n_forced,
            n_audited=run.n_audited,
            n_overruled=run.n_overruled,
            ended_turn=bool(new_tokens) and new_tokens[-1] in run.stop_set,
            timings=timings,
        )

    def _next_logits(self, verifier: Verifier | None, room: int) -> np.ndarray:
        """Where the next step's logits come from: the verify batch in flight, a new verify
        batch of the pending tokens with the speculator's drafts (pending tokens that do not
        fit beside them decoded first), or decoding the pending tokens (a flush)."""
        if verifier is not None and not verifier.active and self._n_evaluated < len(self._tokens):
            proposal = verifier.propose(self._tokens, room)
            if proposal is not None:
                keep = min(len(self._tokens) - self._n_evaluated, self._context.n_batch - len(proposal.drafts))
                self._flush(upto=len(self._tokens) - keep)
                self._logits = verifier.decode(self._tokens[self._n_evaluated :], self._n_evaluated, proposal)
                self._n_evaluated = len(self._tokens)
        self._flush()  # nothing is pending after a verify batch
        assert self._logits is not None  # flushed: the logits after the last token
        return self._logits

    # ---- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Free the context and release the model; the session is unusable afterwards. Safe to
        call twice: each part is let go of once, in the order they depend on each other."""
        self._grammars.clear()  # they point into the model's vocabulary
        verifier, self._verifier = self._verifier, None
        if verifier is not None:  # its MTP context reads this one's: freed first
            verifier.close()
        context, self._context = self._context, None  # type: ignore[assignment]  # closed: `context` says so
        if context is not None:
            context.close()
        loaded, self._loaded = self._loaded, None  # type: ignore[assignment]  # closed: `llama_model` says so
        if loaded is not None:
            release(loaded)  # freed when no session uses it (or kept idle)


@dataclass
class _Run:
    """One `generate` call's state, which its steps share: what bounds and constrains it, where
    its tokens start, and what it counted (its own `Timings`, added to the session's at the end)."""

    constraint: GrammarConstraint | None
    stop_set: frozenset[int]
    params: SamplingParams
    rng: np.random.Generator
    verifier: Verifier | None  # None under audit: every step decoded alone
    text: TextStream
    start: int  # where this call's tokens start in the context
    max_tokens: int
    audit: bool
    ran_with: Counter[tuple[str, int]]  # the context's thread counts when the call started
    started: float
    timings: Timings = field(default_factory=Timings)
    n_forced: int = 0
    n_audited: int = 0
    n_overruled: int = 0


def _overruled(constraint: GrammarConstraint, logits: np.ndarray) -> bool:
    """Whether the grammar's mask (computed) refuses the model's raw top token."""
    return not constraint.is_allowed(np.array([int(np.argmax(logits))]))[0]
