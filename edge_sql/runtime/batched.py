"""Several episodes in one llama.cpp context, their decode steps batched together.

Why: a CPU decode step reads every weight once, whatever number of tokens the batch holds, so
B sequences decoded in one batch cost far less than B steps (issue 25 measured 1.4-1.7x the
tokens per second for B = 4-8 on the 2B shape, two cores).

How: each episode's `Session` runs in a thread of its own on a `SequenceContext`, sequence k of
the shared context. Its `decode` does not call llama.cpp: it hands its tokens to the
`BatchedDecoder` and waits. The decoder makes one `llama_decode` of every waiting sequence's
tokens as soon as each *engaged* sequence is waiting. A sequence is engaged while its session
is inside `eval` or `generate`: between two of its decodes it only samples, so it will ask again
in a moment. A sequence outside them (its episode is running a tool, or it has no question) holds
nobody up. Whichever thread completes the set runs the step; there is no scheduler thread.
A waiter that has waited `max_wait_s` runs a step with whoever is there: a stuck thread slows the
others down but never stops them.

A step holds at most n_batch tokens. Short requests (a sampled token; a verify batch) come first
and whole; long ones (a tool result, the prompt) share what is left, so one long piece advances
in chunks over several steps while the others keep sampling a token per step.

Each sequence keeps its own attention cells (a non-unified KV cache of `n_ctx` cells per
sequence) and recurrent state; its memory operations (clear, state save and restore, rollback)
touch its sequence only and never run during a step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from edge_sql.runtime.batch import TokenBatch, output_flags
from edge_sql.runtime.context import LlamaContext

DEFAULT_MAX_WAIT_S = 1.0


@dataclass(eq=False)
class _Request:
    """One sequence's tokens to decode, perhaps over several steps; the logits rows it asked for."""

    seq: int
    tokens: np.ndarray
    start: int
    outputs: np.ndarray
    decoded: int = 0
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    error: BaseException | None = None

    @property
    def remaining(self) -> int:
        return len(self.tokens) - self.decoded

    @property
    def finished(self) -> bool:
        return self.error is not None or self.decoded == len(self.tokens)


@dataclass
class StepCounts:
    """What the decoder did: steps, tokens, and how many sequences shared a step."""

    steps: int = 0
    tokens: int = 0
    sequences: int = 0  # summed over steps: sequences / steps is the mean batch width
    forced: int = 0     # steps run after max_wait_s without every engaged sequence

    @property
    def mean_width(self) -> float:
        return self.sequences / self.steps if self.steps else 0.0


class BatchedDecoder:
    """Batches the decodes of the sequences of `context` (made with `n_seq` sequences)."""

    def __init__(self, context: LlamaContext, *, max_wait_s: float = DEFAULT_MAX_WAIT_S) -> None:
        self.context = context
        self.max_wait_s = max_wait_s
        self.counts = StepCounts()
        self._batch = TokenBatch(context.n_batch)
        self._cond = threading.Condition()
        self._llama = threading.RLock()  # held by a step and by every memory operation (nested: set_state clears)
        self._pending: dict[int, _Request] = {}
        self._engaged: dict[int, int] = {}
        self._stepping = False
        # a step holds at most one request per sequence: so many rows each keeps every step within
        # the context's n_outputs_max (past it llama.cpp aborts: GGML_ASSERT in llama-context.cpp)
        self._outputs_per_sequence = max(1, context.n_outputs_max // max(1, context.n_seq))

    @contextmanager
    def engaged(self, seq: int) -> Iterator[None]:
        """Within the block, steps wait for `seq`'s next request (see the module docstring)."""
        with self._cond:
            self._engaged[seq] = self._engaged.get(seq, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._engaged[seq] -= 1
                if not self._engaged[seq]:
                    del self._engaged[seq]
                self._cond.notify_all()  # the others may be complete without it now

    @contextmanager
    def memory(self) -> Iterator[None]:
        """Hold steps off while a sequence's memory is changed or read."""
        with self._llama:
            yield

    def decode(self, seq: int, tokens: Sequence[int], start: int, outputs: np.ndarray) -> dict[int, np.ndarray]:
        """Decode `tokens` of sequence `seq` at positions start..; returns a copy of the logits
        of each flagged token, by its index in `tokens`. Blocks until they are decoded."""
        request = _Request(seq, np.asarray(tokens, dtype=np.int32), start, np.asarray(outputs, dtype=bool))
        if int(request.outputs.sum()) > self._outputs_per_sequence:  # llama.cpp would abort the process
            raise ValueError(f"{int(request.outputs.sum())} logits rows asked in one decode; a sequence of this "
                             f"context has room for {self._outputs_per_sequence}")
        with self._cond:
            if seq in self._pending:
                raise RuntimeError(f"sequence {seq} already waits for a decode (one thread per sequence)")
            self._pending[seq] = request
            self._cond.notify_all()
            while not request.finished:
                if not self._stepping and self._ready():
                    self._step()
                elif not self._cond.wait(self.max_wait_s) and not self._stepping and self._pending:
                    self.counts.forced += 1
                    self._step()
        if request.error is not None:
            raise request.error
        return request.rows

    def _ready(self) -> bool:
        return bool(self._pending) and all(seq in self._pending for seq in self._engaged)

    def _plan(self) -> list[tuple[_Request, int, int]]:
        """(request, first token, count) for the next step: short requests whole, long ones
        sharing what is left of n_batch (water-filling), in sequence order."""
        left = self.context.n_batch
        requests = sorted(self._pending.values(), key=lambda r: (r.remaining, r.seq))
        parts = []
        for i, request in enumerate(requests):
            take = min(request.remaining, max(1, left // (len(requests) - i)), left)
            if take > 0:
                parts.append((request, request.decoded, take))
                left -= take
        return sorted(parts, key=lambda part: part[0].seq)

    def _step(self) -> None:
        """Run one llama_decode (called holding the condition; released meanwhile)."""
        parts = self._plan()
        self._stepping = True
        rows: list[dict[int, np.ndarray]] = [{} for _ in parts]
        error: BaseException | None = None
        self._cond.release()
        try:
            with self._llama:
                starts = self._batch.fill_parts([
                    (r.seq, r.tokens[first:first + n], r.start + first, r.outputs[first:first + n])
                    for r, first, n in parts])
                self._batch.decode(self.context.ptr)
                n_vocab = self.context.n_vocab
                for (request, first, n), at, got in zip(parts, starts, rows):
                    for j in np.flatnonzero(request.outputs[first:first + n]):
                        row = llama_cpp.llama_get_logits_ith(self.context.ptr, at + int(j))
                        got[first + int(j)] = np.ctypeslib.as_array(row, shape=(n_vocab,)).copy()
        except BaseException as exc:  # every request of the step learns it, in its own thread
            error = exc
        finally:
            self._cond.acquire()
            self._stepping = False
        for (request, _first, n), got in zip(parts, rows):
            if error is not None:
                request.error = error
            else:
                request.decoded += n
                request.rows.update(got)
            if request.finished:
                del self._pending[request.seq]
        self.counts.steps += 1
        self.counts.tokens += sum(n for _, _, n in parts)
        self.counts.sequences += len(parts)
        self._cond.notify_all()

    def close(self) -> None:
        self._batch.close()


class SequenceContext(LlamaContext):
    """Sequence `seq` of a context the `BatchedDecoder` steps: what a `Session` of a group
    decodes on. Decodes go through the decoder's batches; memory operations wait for no step
    to run. The shared context is the group's: `close()` only lets go of it."""

    def __init__(self, decoder: BatchedDecoder, seq: int) -> None:
        base = decoder.context
        super().__init__(base.ptr, base.loaded, base.options, {}, seq=seq)
        self._decoder = decoder
        self._rows: dict[int, np.ndarray] = {}
        self._n_last = 0
        self._decoded_tokens = 0
        self._single_decodes = 0

    def decode(self, tokens: Sequence[int], start: int, *, outputs: str | np.ndarray) -> None:
        flags = output_flags(len(tokens), outputs)
        self._rows = self._decoder.decode(self.seq, tokens, start, flags)
        self._n_last = len(tokens)
        del self.tokens[start:]
        self.tokens.extend(int(t) for t in tokens)
        if len(tokens) == 1:
            self._single_decodes += 1
        else:
            self._decoded_tokens += len(tokens)

    def logits(self, i: int = -1) -> np.ndarray:
        """The logits of token `i` of this sequence's last decode (a flagged one)."""
        return self._rows[i + self._n_last if i < 0 else i]

    def output_rows(self, n: int) -> np.ndarray:
        return np.stack([self._rows[i] for i in sorted(self._rows)[:n]])

    def add_listener(self, listener) -> None:
        raise NotImplementedError("a sequence of a batched context has no per-decode listeners (no MTP drafter)")

    def engaged(self):
        return self._decoder.engaged(self.seq)

    def clear(self) -> None:
        with self._decoder.memory():
            super().clear()

    def remove_from(self, pos: int) -> bool:
        with self._decoder.memory():
            return super().remove_from(pos)

    def state(self) -> bytes:
        with self._decoder.memory():
            return super().state()

    def set_state(self, state: bytes, tokens: Sequence[int]) -> bool:
        with self._decoder.memory():
            return super().set_state(state, tokens)

    def perf_counts(self) -> tuple[int, int]:
        """This sequence's share, as llama.cpp counts a context's (each at least 1)."""
        return max(1, self._decoded_tokens), max(1, self._single_decodes)

    def reset_perf(self) -> None:
        self._decoded_tokens = self._single_decodes = 0

    def close(self) -> None:
        self._listeners = []
        self._ptr = None
