"""One llama.cpp context on a loaded model: its memory, its batch, and what that memory holds.

Why one place: several contexts run on a session's weights (the session's own, the MTP drafter's,
teacher forcing's and the imatrix collector's), and each used to write llama.cpp's context
parameters itself.
`create_context` makes all of them from the session's `SessionOptions`; what differs between
them (output rows, recurrent snapshots, another context to read) is said in its arguments.

`LlamaContext` keeps the tokens its memory holds by position (decoded, restored from a state,
removed again), so a context that follows it (the MTP drafter's) can tell what changed without
knowing the session. It is not thread-safe.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import llama_cpp
import numpy as np

from edge_sql.convert.llama_log import capture_llama_log as capture_log
from edge_sql.errors import ClosedError, ModelFileError
from edge_sql.runtime.llama.backend import Closing, buffer_sizes
from edge_sql.runtime.llama.batch import TokenBatch
from edge_sql.runtime.llama.shared_models import LoadedModel
from edge_sql.runtime.llama.state_streams import for_streams, portable
from edge_sql.runtime.llama.threads import STEP_TOKENS, ThreadGovernor
from edge_sql.runtime.options import SessionOptions

DecodeListener = Callable[[np.ndarray, int], None]


class DecodeContext(Protocol):
    """What a `Session` and its `Verifier` decode on: a llama.cpp context of their own
    (`LlamaContext`) or one sequence of a batched one (`SequenceContext`,
    runtime/batching/batched.py). Both satisfy it and neither derives from the other.

    Why a protocol and not the sequence as a `LlamaContext`: a `LlamaContext` also offers
    per-decode listeners and its raw pointer, which an MTP drafter needs to read the hidden
    states of the context's whole last batch. In a batched context that batch is every
    sequence's, so a sequence cannot keep that promise; a subclass had to raise where its base
    works. The session needs only what follows."""

    @property
    def loaded(self) -> LoadedModel: ...
    @property
    def options(self) -> SessionOptions: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_batch(self) -> int: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def ran_with(self) -> Counter[tuple[str, int]]: ...

    def decode(self, tokens: Sequence[int], start: int, *, outputs: str | np.ndarray) -> None: ...
    def logits(self, i: int = -1) -> np.ndarray: ...
    def engaged(self) -> AbstractContextManager[None]: ...
    def idle(self) -> None: ...
    def clear(self) -> None: ...
    def remove_from(self, pos: int) -> bool: ...
    def state(self) -> bytes: ...
    def set_state(self, state: bytes, tokens: Sequence[int]) -> bool: ...
    def perf_counts(self) -> tuple[int, int]: ...
    def reset_perf(self) -> None: ...
    def close(self) -> None: ...


def create_context(
    loaded: LoadedModel,
    options: SessionOptions,
    *,
    what: str,
    n_outputs: int = 1,
    n_rs_seq: int = 0,
    perf: bool = False,
    reads: LlamaContext | None = None,
    cb_eval: object | None = None,
    n_seq: int = 1,
) -> LlamaContext:
    """A context on `loaded`'s weights with `options` (resolved: no `None` threads or ubatch).

    `n_outputs`: logits rows one batch may ask for (1: no n_batch x vocab buffer); `n_rs_seq`:
    recurrent-state snapshots kept to roll back to; `perf`: keep llama.cpp's decode counters;
    `reads`: the target context an MTP context runs beside; `cb_eval`: a
    `ggml_backend_sched_eval_callback` that sees graph nodes (the imatrix collector; the caller
    keeps it alive as long as the context); `n_seq`: sequences, each with its own
    `options.n_ctx` cells and recurrent state (the batched engine's; runtime/batching/batched.py).
    Raises ModelFileError naming
    `what` when llama.cpp cannot make it (out of memory).
    """
    params = llama_cpp.llama_context_default_params()
    if reads is not None:
        params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = reads.ptr
    params.n_ctx = options.n_ctx * n_seq
    params.n_batch = options.n_batch
    params.n_ubatch = options.n_ubatch
    params.n_seq_max = n_seq
    if n_seq > 1:
        params.kv_unified = False  # each sequence its own cells: episodes share no cells
    params.n_outputs_max = n_outputs
    params.n_rs_seq = n_rs_seq
    params.n_threads = params.n_threads_batch = options.n_threads
    # no layer on the GPU means no GPU work: llama.cpp would otherwise copy CPU weights to the GPU
    # for every batch of 32+ tokens (`op_offload`), so `--gpu-layers 0` prefills and teacher-forces
    # on the GPU while decoding on the CPU (seen on an H200: identical log-probabilities "on both")
    params.op_offload = bool(options.n_gpu_layers)
    params.no_perf = not perf
    if cb_eval is not None:
        params.cb_eval = cb_eval
        params.cb_eval_user_data = None
    if options.flash_attn is not None:
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if options.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
    with capture_log() as lines:
        ptr = llama_cpp.llama_init_from_model(loaded.model, params)
    if not ptr:
        raise ModelFileError(f"llama.cpp could not create {what}")
    context = LlamaContext(ptr, loaded, options, buffer_sizes(lines))
    context.n_outputs_max = n_outputs
    return context


def read_sequence_state(ptr: llama_cpp.llama_context_p, seq: int) -> bytes:
    """llama.cpp's state of sequence `seq` of a context (attention cells and recurrent state)."""
    size = llama_cpp.llama_state_seq_get_size(ptr, seq)
    buffer = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(ptr, buffer, size, seq)
    if written != size:
        raise RuntimeError(f"llama_state_seq_get_data wrote {written} of {size} bytes")
    return bytes(buffer)


def write_sequence_state(ptr: llama_cpp.llama_context_p, seq: int, state: bytes) -> bool:
    """Load `state` (from `read_sequence_state`) into empty sequence `seq`; False when llama.cpp refuses it."""
    buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    return llama_cpp.llama_state_seq_set_data(ptr, buffer, len(state), seq) == len(state)


class LlamaContext(Closing):
    """A llama.cpp context, or one sequence of it (`seq`: its memory operations touch that
    sequence only); made by `create_context`, freed by `close()` (`owned=False`: a view of a
    context freed elsewhere, which `close()` only lets go of)."""

    def __init__(
        self,
        ptr: llama_cpp.llama_context_p,
        loaded: LoadedModel,
        options: SessionOptions,
        buffers: dict[str, int],
        *,
        seq: int = 0,
        owned: bool = True,
    ) -> None:
        self._ptr: llama_cpp.llama_context_p | None = ptr  # None once freed
        self._owned = owned
        self.seq = seq
        self.loaded = loaded
        self.options = options
        self.buffers = buffers  # what llama.cpp allocated for it ("CPU KV", "CPU compute", ...)
        self.memory = llama_cpp.llama_get_memory(ptr)
        self.n_ctx = llama_cpp.llama_n_ctx_seq(ptr)  # one sequence's window
        self.n_seq = llama_cpp.llama_n_seq_max(ptr)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(loaded.model))
        self.n_outputs_max = 1  # logits rows one batch may ask for (create_context sets it)
        self.tokens: list[int] = []  # the token its memory holds at each position
        self._batch: TokenBatch | None = None
        self._listeners: list[DecodeListener] = []
        # the thread count follows the machine's load on the CPU (runtime/llama/threads.py); with
        # layers on a GPU the step time says little about the CPU's threads, and with flash
        # attention on (or llama.cpp's "auto") the count changes the sums (loading.py,
        # `attention_for_threads`, resolves the two together): the count stays
        adaptive = options.adapt_threads and options.flash_attn is False and not options.n_gpu_layers
        self.threads = ThreadGovernor(options.n_threads or 1, self._set_threads, adaptive=adaptive)
        self.ran_with: Counter[tuple[str, int]] = Counter()  # tokens by ("prefill"/"decode", threads)

    def _set_threads(self, n: int) -> None:
        llama_cpp.llama_set_n_threads(self.ptr, n, n)

    @property
    def ptr(self) -> llama_cpp.llama_context_p:
        """The raw context (for llama.cpp calls this class does not wrap); ClosedError once freed."""
        if not self._ptr:
            raise ClosedError("the context is closed: it has been freed")
        return self._ptr

    @property
    def model(self) -> llama_cpp.llama_model_p:
        return self.loaded.model

    @property
    def n_batch(self) -> int:
        return self.options.n_batch

    @property
    def n_rs_seq(self) -> int:
        return llama_cpp.llama_n_rs_seq(self.ptr)

    # ---- decoding ---------------------------------------------------------------------------

    def decode(self, tokens: Sequence[int], start: int, *, outputs: str | np.ndarray) -> None:
        """Decode `tokens` at positions start.. (at most n_batch); `outputs` as `TokenBatch.fill`
        says which positions get logits. Listeners see the batch afterwards."""
        if self._batch is None:
            self._batch = TokenBatch(self.n_batch)
        self._batch.fill(tokens, start, outputs=outputs)
        self.count_threads(len(tokens))
        self._batch.decode(self.ptr, self.threads)
        del self.tokens[start:]
        self.tokens.extend(int(t) for t in tokens)
        for listener in list(self._listeners):
            listener(self._batch.tokens, start)

    def count_threads(self, n_tokens: int) -> None:
        """Count `n_tokens` decoded with the governor's thread count now (`ran_with`)."""
        phase = "decode" if n_tokens <= STEP_TOKENS else "prefill"
        self.ran_with[phase, self.threads.count] += n_tokens

    def logits(self, i: int = -1) -> np.ndarray:
        """A view of the logits of output row `i` of the last batch (valid until the next decode)."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ptr, i), shape=(self.n_vocab,))

    def output_rows(self, n: int) -> np.ndarray:
        """A view of all `n` output rows of the last batch, shape (n, n_vocab)."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits(self.ptr), shape=(n, self.n_vocab))

    def add_listener(self, listener: DecodeListener) -> None:
        """Call `listener(tokens, first_position)` after every decode (`tokens` is a view, valid
        during the call): how an MTP drafter reads each hidden state before the next decode."""
        self._listeners.append(listener)

    def remove_listener(self, listener: DecodeListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def engaged(self) -> AbstractContextManager[None]:
        """Held by a session through each eval and generate: a batched context's sequences
        (runtime/batching/batched.py) wait for each other then; a context of its own waits for nobody."""
        return nullcontext()

    def idle(self) -> None:
        """The session's work is over for now (an episode ended): nobody waits for it."""

    # ---- memory -----------------------------------------------------------------------------

    def clear(self) -> None:
        if self.n_seq == 1:
            llama_cpp.llama_memory_clear(self.memory, True)
        else:  # the other sequences are other episodes'
            llama_cpp.llama_memory_seq_rm(self.memory, self.seq, -1, -1)
        self.tokens = []

    def remove_from(self, pos: int) -> bool:
        """Drop positions pos.. from memory (attention cells; recurrent layers fall back to an
        `n_rs_seq` snapshot); False when llama.cpp cannot."""
        del self.tokens[pos:]
        return bool(llama_cpp.llama_memory_seq_rm(self.memory, self.seq, pos, -1))

    @property
    def span(self) -> tuple[int, int]:
        """First and last position memory holds ((-1, -1) when empty)."""
        return (
            llama_cpp.llama_memory_seq_pos_min(self.memory, self.seq),
            llama_cpp.llama_memory_seq_pos_max(self.memory, self.seq),
        )

    def state(self) -> bytes:
        """llama.cpp's sequence state (attention cells and recurrent state), in the form a
        context of any number of sequences loads (runtime/llama/state_streams.py)."""
        raw = read_sequence_state(self.ptr, self.seq)
        return portable(raw) or raw

    def set_state(self, state: bytes, tokens: Sequence[int]) -> bool:
        """Replace memory with `state` (from `state()` of this or another context of the same
        model and settings), which holds `tokens`; False (memory empty) when llama.cpp
        rejects it or it does not hold exactly that many positions."""
        self.clear()
        state = for_streams(state, self.n_seq)
        if not write_sequence_state(self.ptr, self.seq, state) or self.span[1] != len(tokens) - 1:
            self.clear()
            return False
        self.tokens = [int(t) for t in tokens]
        return True

    # ---- counters and lifetime --------------------------------------------------------------

    def perf_counts(self) -> tuple[int, int]:
        """llama.cpp's own counters since `reset_perf`: (batch tokens, single-token decodes)."""
        perf = llama_cpp.llama_perf_context(self.ptr)
        return perf.n_p_eval, perf.n_eval

    def reset_perf(self) -> None:
        llama_cpp.llama_perf_context_reset(self.ptr)

    def close(self) -> None:
        """Free the batch and the context (free contexts that read this one first)."""
        self._listeners = []
        batch = getattr(self, "_batch", None)
        if batch is not None:
            batch.close()
            self._batch = None
        if getattr(self, "_ptr", None) and self._owned:
            llama_cpp.llama_free(self._ptr)
        self._ptr = None
