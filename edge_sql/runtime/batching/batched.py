"""Several episodes in one llama.cpp context, their decode steps batched together.

Why: a CPU decode step reads every weight once, whatever number of tokens the batch holds, so
B sequences decoded in one batch cost far less than B steps (issue 25 measured 1.4-1.7x the
tokens per second for B = 4-8 on the 2B shape, two cores).

How: each episode's `Session` runs in a thread of its own on a `SequenceContext`, a *member* of
the shared context holding one sequence id. Its `decode` does not call llama.cpp: it hands its
tokens to the `BatchedDecoder` and waits. The decoder makes one `llama_decode` of every waiting
member's tokens as soon as each *engaged* member is waiting. A member is engaged while its
session is inside `eval` or `generate`: between two of its decodes it only samples, so it will
ask again in a moment. A member that left them within the last `grace_s` (its episode is running
a tool call, or moving from `eval` to `generate`) is waited for too; past that, or once its
session says its work has ended (`idle`: an episode given back), it holds nobody up. Whichever
thread completes the set runs the step; there is no scheduler thread. A waiter
that has waited `max_wait_s` runs a step with whoever is there: a stuck thread slows the others
down but never stops them.

One step, one weight pass, where llama.cpp allows it. llama.cpp cuts the batch of a hybrid model
with a KV stream per sequence into micro-batches (`split_equal` with sequential ids,
src/llama-batch.cpp), and each micro-batch reads every weight: one holds a run of *consecutive*
sequence ids, the same number of tokens from each (`micro_batches` mirrors it). So the decoder
  - gives the step's members consecutive ids: a member waiting beside a gap (an id whose member
    is idle) trades ids with that idle member, their memories swapped with them (`moves`; on a
    Zen 4 EPYC a 1,500-token state of the 2B shape moves in ~80 ms, a second pass costs ~250 ms);
  - lets a short forced run (at most RIDE_ALONG_TOKENS grammar-forced tokens) ride along one
    token a step when most of a step of at least RIDE_ALONG_WIDTH members sample one token each,
    instead of costing a micro-batch of its own;
  - and otherwise gives short requests (a sampled token; a verify batch) their tokens whole,
    while long ones (a tool result, the prompt) share what is left of n_batch, so one long piece
    advances in chunks over several steps while the others keep sampling a token per step.
With recurrent rollback snapshots (`n_rs_seq`, speculation) neither packing nor riding applies:
llama.cpp keeps each sequence's trailing tokens in one micro-batch then.

Each sequence keeps its own attention cells (a non-unified KV cache of `n_ctx` cells per
sequence) and recurrent state; its memory operations (clear, state save and restore, rollback)
touch its sequence only and never run during a step.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from edge_sql.runtime.llama.backend import Closing
from edge_sql.runtime.llama.batch import TokenBatch, output_flags
from edge_sql.runtime.llama.context import LlamaContext, read_sequence_state, write_sequence_state

DEFAULT_MAX_WAIT_S = 1.0
DEFAULT_GRACE_S = 0.2  # a tool call against SQLite and the next prompt take milliseconds
RIDE_ALONG_TOKENS = 8  # forced runs this short ride along a token a step ...
RIDE_ALONG_WIDTH = 4  # ... in steps of at least this many members


def micro_batches(parts: Sequence[tuple[int, int]], n_ubatch: int) -> list[list[tuple[int, int]]]:
    """How llama.cpp cuts a batch of (sequence id, tokens) parts, in batch order, for a hybrid
    model with a KV stream per sequence (`split_equal(n_ubatch, sequential=True)`, no rollback
    tails): micro-batches of (sequence id, tokens), each a run of consecutive ids with equal
    tokens each. Its length is the number of weight passes the step costs."""
    remaining = [[seq, n] for seq, n in parts if n > 0]
    cuts: list[list[tuple[int, int]]] = []
    while remaining:
        run: list[list[int]] = []
        for part in remaining:
            if not run or part[0] == run[-1][0] + 1:
                run.append(part)
                if len(run) > n_ubatch:
                    break
        each = min(min(n for _, n in run), max(1, n_ubatch // len(run)))
        cuts.append([(seq, each) for seq, _ in run])
        for part in run:
            part[1] -= each
        remaining = [part for part in remaining if part[1] > 0]
    return cuts


@dataclass(eq=False)
class _Request:
    """One member's tokens to decode, perhaps over several steps; the logits rows it asked for."""

    member: SequenceContext
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
    """What the decoder did: steps, tokens, weight passes, and how many sequences shared a step."""

    steps: int = 0
    tokens: int = 0
    sequences: int = 0  # summed over steps: sequences / steps is the mean batch width
    forced: int = 0  # steps run after max_wait_s without every engaged sequence
    passes: int = 0  # micro-batches llama.cpp cut the steps into (`micro_batches`)
    moves: int = 0  # sequence states (not empty) moved to give a step consecutive ids

    @property
    def mean_width(self) -> float:
        return self.sequences / self.steps if self.steps else 0.0


class BatchedDecoder:
    """Batches the decodes of the members of `context` (made with `n_seq` sequences)."""

    def __init__(
        self, context: LlamaContext, *, max_wait_s: float = DEFAULT_MAX_WAIT_S, grace_s: float = DEFAULT_GRACE_S
    ) -> None:
        self.context = context
        self.max_wait_s = max_wait_s
        self.grace_s = grace_s
        self.counts = StepCounts()
        self._batch = TokenBatch(context.n_batch)
        self._cond = threading.Condition()
        self._llama = threading.RLock()  # held by a step and by every memory operation (nested: set_state clears)
        self._members: list[SequenceContext] = []
        self._pending: dict[SequenceContext, _Request] = {}
        self._engaged: dict[SequenceContext, int] = {}
        self._left: dict[SequenceContext, float] = {}  # member -> when it stopped being engaged
        self._stepping = False
        # a step holds at most one request per sequence: so many rows each keeps every step within
        # the context's n_outputs_max (past it llama.cpp aborts: GGML_ASSERT in llama-context.cpp)
        self._outputs_per_sequence = max(1, context.n_outputs_max // max(1, context.n_seq))

    def join(self, member: SequenceContext) -> None:
        """Register a member (one per sequence id): steps may trade ids with it while it is idle."""
        with self._cond:
            if any(m.seq == member.seq for m in self._members):
                raise ValueError(f"sequence {member.seq} already has a member")
            self._members.append(member)

    @contextmanager
    def engaged(self, member: SequenceContext) -> Iterator[None]:
        """Within the block, steps wait for `member`'s next request (see the module docstring)."""
        with self._cond:
            self._engaged[member] = self._engaged.get(member, 0) + 1
            self._left.pop(member, None)
        try:
            yield
        finally:
            with self._cond:
                self._engaged[member] -= 1
                if not self._engaged[member]:
                    del self._engaged[member]
                    if self.grace_s > 0:
                        self._left[member] = time.monotonic()
                self._cond.notify_all()  # the others may be complete without it now

    def idle(self, member: SequenceContext) -> None:
        """`member` will not decode again until it is engaged anew (its episode ended): steps stop
        holding for its grace. Without it, the last steps of the others waited `grace_s` for a
        member that had finished (0.2 s: `tuning.parallel.decode_rate`'s eight timed steps came out
        bimodal, 41 or 95 tok/s for two sequences of SmolLM2 on a 2-core Xeon)."""
        with self._cond:
            if self._left.pop(member, None) is not None:
                self._cond.notify_all()

    @contextmanager
    def memory(self) -> Iterator[None]:
        """Hold steps off while a member's memory is changed or read."""
        with self._llama:
            yield

    def decode(
        self, member: SequenceContext, tokens: Sequence[int], start: int, outputs: np.ndarray
    ) -> dict[int, np.ndarray]:
        """Decode `tokens` of `member` at positions start..; returns a copy of the logits of each
        flagged token, by its index in `tokens`. Blocks until they are decoded."""
        request = _Request(member, np.asarray(tokens, dtype=np.int32), start, np.asarray(outputs, dtype=bool))
        if int(request.outputs.sum()) > self._outputs_per_sequence:  # llama.cpp would abort the process
            raise ValueError(
                f"{int(request.outputs.sum())} logits rows asked in one decode; a sequence of this "
                f"context has room for {self._outputs_per_sequence}"
            )
        with self._cond:
            if member in self._pending:
                raise RuntimeError(f"sequence {member.seq} already waits for a decode (one thread per sequence)")
            self._pending[member] = request
            self._left.pop(member, None)
            self._cond.notify_all()
            while not request.finished:
                holdup = None if self._stepping else self._holdup(time.monotonic())
                if holdup == 0.0:
                    self._step(forced=False)
                    continue
                timeout = self.max_wait_s if holdup is None else min(holdup, self.max_wait_s)
                if (
                    not self._cond.wait(timeout)
                    and holdup is None
                    and not self._stepping
                    and self._pending
                    and not request.finished
                ):
                    self.counts.forced += 1
                    self._step(forced=True)
        if request.error is not None:
            raise request.error
        return request.rows

    def _holdup(self, now: float) -> float | None:
        """0.0: step now; None: an engaged member is not waiting yet; else the seconds of grace
        left to the first member that just left eval/generate (it may be back at once)."""
        if not self._pending or any(m not in self._pending for m in self._engaged):
            return None
        for member, since in list(self._left.items()):
            if now - since >= self.grace_s:
                del self._left[member]
        return min((since + self.grace_s - now for since in self._left.values()), default=0.0)

    def _plan(self) -> list[tuple[_Request, int, int]]:
        """(request, first token, count) for the next step: short requests whole (short forced
        runs one token, riding along), long ones sharing what is left of n_batch
        (water-filling). `_step` puts them in sequence order once it has packed the ids."""
        left = self.context.n_batch
        requests = list(self._pending.values())
        sampled = sum(r.remaining == 1 for r in requests)
        ride = len(requests) >= RIDE_ALONG_WIDTH and 2 * sampled >= len(requests) and self.context.n_rs_seq == 0
        wants = {r: 1 if ride and r.remaining <= RIDE_ALONG_TOKENS else r.remaining for r in requests}
        requests.sort(key=lambda r: (wants[r], r.member.seq))
        parts = []
        for i, request in enumerate(requests):
            take = min(wants[request], max(1, left // (len(requests) - i)), left)
            if take > 0:
                parts.append((request, request.decoded, take))
                left -= take
        return parts

    def _step(self, *, forced: bool) -> None:
        """Run one llama_decode (called holding the condition; released meanwhile)."""
        parts = self._plan()
        self._stepping = True
        rows: list[dict[int, np.ndarray]] = [{} for _ in parts]
        error: BaseException | None = None
        moves = passes = 0
        self._cond.release()
        try:
            with self._llama:
                if not forced and self.context.n_rs_seq == 0:
                    moves = self._pack([r.member for r, _, _ in parts])
                parts.sort(key=lambda part: part[0].member.seq)
                n_ubatch = self.context.options.n_ubatch
                assert n_ubatch is not None  # a context's options are resolved
                passes = len(micro_batches([(r.member.seq, n) for r, _, n in parts], n_ubatch))
                starts = self._batch.fill_parts(
                    [
                        (r.member.seq, r.tokens[first : first + n], r.start + first, r.outputs[first : first + n])
                        for r, first, n in parts
                    ]
                )
                self._batch.decode(self.context.ptr, self.context.threads)
                n_vocab = self.context.n_vocab
                for (request, first, n), at, got in zip(parts, starts, rows):
                    for j in np.flatnonzero(request.outputs[first : first + n]):
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
                del self._pending[request.member]
        self.counts.steps += 1
        self.counts.tokens += sum(n for _, _, n in parts)
        self.counts.sequences += len(parts)
        self.counts.passes += passes
        self.counts.moves += moves
        self._cond.notify_all()

    def _pack(self, stepping: list[SequenceContext]) -> int:
        """Give the members of a step consecutive ids (one micro-batch instead of one per run):
        the window of ids that holds most of them already; each one outside trades ids and
        memory with the idle member in a hole of the window. Returns the states moved."""
        ids = sorted(m.seq for m in stepping)
        k = len(ids)
        if ids[-1] - ids[0] + 1 == k:
            return 0
        window = max(range(self.context.n_seq - k + 1), key=lambda w: (sum(w <= s < w + k for s in ids), -w))
        inside = range(window, window + k)
        holder = {m.seq: m for m in self._members}
        holes = [s for s in inside if holder.get(s) not in stepping]
        outside = [m for m in stepping if m.seq not in inside]
        return sum(self._trade(member, hole, holder.get(hole)) for member, hole in zip(outside, holes))

    def _trade(self, member: SequenceContext, seq: int, idle: SequenceContext | None) -> int:
        """Move `member` (in this step) to id `seq` and `idle` (not in it; None: no member holds
        `seq`) to member's old id, each with its memory. The step holds the llama lock, and a
        member's thread touches memory only under it, so no memory operation runs meanwhile.
        Returns the states moved."""
        ptr, memory, old = self.context.ptr, self.context.memory, member.seq
        last = {s: llama_cpp.llama_memory_seq_pos_max(memory, s) for s in (old, seq)}
        states = {s: read_sequence_state(ptr, s) for s in (old, seq) if last[s] >= 0}
        for s in (old, seq):
            llama_cpp.llama_memory_seq_rm(memory, s, -1, -1)
        for source, target in ((old, seq), (seq, old)):
            if source in states and (
                not write_sequence_state(ptr, target, states[source])
                or llama_cpp.llama_memory_seq_pos_max(memory, target) != last[source]
            ):
                raise RuntimeError(f"moving sequence {source}'s state to {target}: llama.cpp refused it")
        member.seq = seq
        if idle is not None:
            idle.seq = old
        return len(states)

    def close(self) -> None:
        self._batch.close()


class SequenceContext(Closing):
    """A member of a context the `BatchedDecoder` steps, holding sequence id `seq`: what a
    `Session` of a group decodes on (a `DecodeContext`, as a `LlamaContext` is). Decodes go
    through the decoder's batches; memory operations wait for no step to run. While the member
    is idle or waiting, a step may trade its id for another (its memory moves with it, its
    `tokens` stay), so `seq` is read only under the decoder's lock. The shared context is the
    group's: `close()` only lets go of it. No per-decode listeners: the batch a step decodes is
    every member's (see `DecodeContext`)."""

    def __init__(self, decoder: BatchedDecoder, seq: int) -> None:
        base = decoder.context
        # the memory operations of one sequence, on the shared context (which it does not own)
        self._view = LlamaContext(base.ptr, base.loaded, base.options, {}, seq=seq, owned=False)
        self._view.threads = base.threads  # the group's steps run on the shared context's threads
        self._decoder = decoder
        self.loaded, self.options = base.loaded, base.options
        self.n_ctx, self.n_vocab = self._view.n_ctx, self._view.n_vocab
        self._rows: dict[int, np.ndarray] = {}
        self._n_last = 0
        self._decoded_tokens = 0
        self._single_decodes = 0
        decoder.join(self)

    @property
    def seq(self) -> int:
        return self._view.seq

    @seq.setter
    def seq(self, seq: int) -> None:  # a step traded ids (`BatchedDecoder._trade`)
        self._view.seq = seq

    @property
    def tokens(self) -> list[int]:
        return self._view.tokens

    @property
    def ran_with(self) -> Counter[tuple[str, int]]:
        return self._view.ran_with

    @property
    def n_batch(self) -> int:
        return self.options.n_batch

    @property
    def ptr(self) -> llama_cpp.llama_context_p:
        """The shared context's raw pointer, for llama.cpp calls on sequence `seq` (ClosedError once let go of)."""
        return self._view.ptr

    @property
    def n_rs_seq(self) -> int:
        return self._view.n_rs_seq

    @property
    def span(self) -> tuple[int, int]:
        """First and last position this sequence's memory holds ((-1, -1) when empty)."""
        return self._view.span

    def decode(self, tokens: Sequence[int], start: int, *, outputs: str | np.ndarray) -> None:
        flags = output_flags(len(tokens), outputs)
        self._view.count_threads(len(tokens))
        self._rows = self._decoder.decode(self, tokens, start, flags)
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

    def engaged(self) -> AbstractContextManager[None]:
        return self._decoder.engaged(self)

    def idle(self) -> None:
        self._decoder.idle(self)

    def clear(self) -> None:
        with self._decoder.memory():
            self._view.clear()

    def remove_from(self, pos: int) -> bool:
        with self._decoder.memory():
            return self._view.remove_from(pos)

    def state(self) -> bytes:
        with self._decoder.memory():
            return self._view.state()

    def set_state(self, state: bytes, tokens: Sequence[int]) -> bool:
        with self._decoder.memory():
            return self._view.set_state(state, tokens)

    def perf_counts(self) -> tuple[int, int]:
        """This sequence's share, as llama.cpp counts a context's (each at least 1)."""
        return max(1, self._decoded_tokens), max(1, self._single_decodes)

    def reset_perf(self) -> None:
        self._decoded_tokens = self._single_decodes = 0

    def close(self) -> None:
        self._view.close()  # lets go of the shared context; the group frees it
