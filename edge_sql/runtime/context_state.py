"""A session's append-only context: what is in it, evaluating prompt tokens, saved states.

Why apart from generation: the bookkeeping here (tokens, how many are decoded, the next logits)
is what every part of a session shares; `eval` and the saved-state paths (shared prefix,
snapshot, restore) fill the context, and generation.py appends sampled tokens to it. Every token
is decoded exactly once; the last sampled token of a completion is decoded lazily, together with
the next `eval` batch.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np

from edge_sql.errors import ContextFullError
from edge_sql.runtime.llama.backend import Closing
from edge_sql.runtime.llama.context import DecodeContext
from edge_sql.runtime.llama.shared_models import LoadedModel
from edge_sql.runtime.options import SessionOptions
from edge_sql.runtime.records import SessionInfo, Timings
from edge_sql.runtime.speculation.speculative import Verifier
from edge_sql.runtime.state.prefix_state import PrefixCache, StateSnapshot, prefix_key
from edge_sql.runtime.token_text import TokenText


class ContextState(TokenText, Closing):
    """The context's tokens and counters and the paths that fill it; the parts it runs on
    (model, context, verifier, prefix cache) are set by `Session.__init__`."""

    options: SessionOptions
    info: SessionInfo
    timings: Timings
    _loaded: LoadedModel
    _context: DecodeContext
    _verifier: Verifier | None
    _prefix_cache: PrefixCache
    _pending_prefix: list[int] | None
    _pending_opening: list[int] | None
    _tokens: list[int]
    _n_evaluated: int
    _n_restored: int
    _logits: np.ndarray | None
    _rng: np.random.Generator | None

    def reset(self) -> None:
        """Empty the context and zero the counters; the next generate re-seeds the sampler."""
        self._context.clear()
        self._context.reset_perf()
        self._tokens = []
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
    def tokens(self) -> list[int]:
        return list(self._tokens)

    @property
    def decoded_tokens(self) -> int:
        """Tokens passed to llama_decode since the last reset (n_past minus a pending token,
        minus restored prefix tokens, plus draft tokens that were rolled back)."""
        return self._n_evaluated - self._n_restored + self.timings.rolled_back_tokens

    def llama_perf_counts(self) -> tuple[int, int]:
        """llama.cpp's own counters since the last reset: (batch tokens, single-token decodes).

        llama.cpp reports each as at least 1.
        """
        return self._context.perf_counts()

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
