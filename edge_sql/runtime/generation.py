"""The generate loop: sample tokens into a session's context under a grammar, with speculation.

Why a module of its own: one `generate` call is a loop of small steps (forced tokens, one sampled
token, drafts followed) sharing one `_Run`; apart from the context bookkeeping it appends to
(context_state.py), nothing else in a session takes part in it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np

from edge_sql.runtime.context_state import ContextState
from edge_sql.runtime.records import Completion, StopReason, Timings
from edge_sql.runtime.speculation.speculative import Verifier
from edge_sql.runtime.text.constrained import GrammarCache, GrammarConstraint
from edge_sql.runtime.text.sampling import NoAllowedToken, SamplingParams, sample, sample_allowed
from edge_sql.runtime.text.vocabulary import TextStream


class GeneratingContext(ContextState):
    """A context that `generate` appends sampled tokens to (its grammars compiled by `_grammars`,
    set by `Session.__init__`)."""

    _grammars: GrammarCache

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
            start=run.start,
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
