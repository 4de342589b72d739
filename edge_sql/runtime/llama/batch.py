"""A llama.cpp token batch, filled from Python without a per-token loop (but for sequence ids)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import llama_cpp
import numpy as np

from edge_sql.runtime.llama.decode_thread import run_decode
from edge_sql.runtime.llama.threads import ThreadGovernor


def output_flags(n: int, outputs: str | np.ndarray) -> np.ndarray:
    """One flag per token, from "last", "all", "none" or the flags themselves."""
    if not isinstance(outputs, str):
        return np.asarray(outputs, dtype=bool)
    flags = np.full(n, outputs == "all", dtype=bool)
    if outputs == "last":
        flags[n - 1] = True
    return flags


class TokenBatch:
    """A `llama_batch` of up to `capacity` tokens (of sequence 0, or of several through
    `fill_parts`), with numpy views on its arrays.

    `LlamaContext.decode` fills and decodes it: the session's context (logits of the last token
    only, or of a verify batch's drafts) and teacher forcing's (logits of every token). Free it
    with `close()` (or use it as a context manager).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a batch holds at least 1 token, got {capacity}")
        self.capacity = capacity
        self.batch = llama_cpp.llama_batch_init(capacity, 0, 1)
        self._token = np.ctypeslib.as_array(self.batch.token, shape=(capacity,))
        self._pos = np.ctypeslib.as_array(self.batch.pos, shape=(capacity,))
        self._output = np.ctypeslib.as_array(self.batch.logits, shape=(capacity,))
        for i in range(capacity):
            self.batch.n_seq_id[i] = 1
            self.batch.seq_id[i][0] = 0
        self._mixed = False

    def fill(self, tokens: Sequence[int], start: int, *, outputs: str | np.ndarray) -> None:
        """Put `tokens` at positions start, start+1, ...; `outputs` ("last", "all", "none", or
        one flag per token) says which positions llama.cpp computes logits for."""
        n = len(tokens)
        if not 0 < n <= self.capacity:
            raise ValueError(f"{n} tokens do not fit a batch of {self.capacity}")
        if self._mixed:  # after fill_parts: every token back to sequence 0
            for i in range(self.capacity):
                self.batch.seq_id[i][0] = 0
            self._mixed = False
        self._token[:n] = tokens
        self._pos[:n] = np.arange(start, start + n)
        self._output[:n] = output_flags(n, outputs)
        self.batch.n_tokens = n

    def fill_parts(self, parts: Sequence[tuple[int, Sequence[int] | np.ndarray, int, np.ndarray]]) -> list[int]:
        """Put several sequences' tokens in one batch: each part is (sequence id, tokens, first
        position, output flags). Returns where each part starts in the batch (for
        `llama_get_logits_ith`). The batched engine's (runtime/batching/batched.py)."""
        n = sum(len(tokens) for _, tokens, _, _ in parts)
        if not 0 < n <= self.capacity:
            raise ValueError(f"{n} tokens do not fit a batch of {self.capacity}")
        starts, at = [], 0
        for seq, tokens, start, outputs in parts:
            k = len(tokens)
            starts.append(at)
            self._token[at : at + k] = tokens
            self._pos[at : at + k] = np.arange(start, start + k)
            self._output[at : at + k] = outputs
            for i in range(at, at + k):
                self.batch.seq_id[i][0] = seq
            at += k
        self.batch.n_tokens = n
        self._mixed = True
        return starts

    def decode(self, ctx: llama_cpp.llama_context_p, governor: ThreadGovernor | None = None) -> None:
        """`llama_decode` the batch; RuntimeError names the status and first position on failure.
        `governor` (the context's) is told how long it took. It runs on the process's decode
        thread (`run_decode`: one OpenMP team, steps a third faster where several threads
        decode)."""
        tick = time.perf_counter()
        status = run_decode(lambda: llama_cpp.llama_decode(ctx, self.batch))
        if governor is not None:
            governor.record(time.perf_counter() - tick, int(self.batch.n_tokens))
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status} at position {int(self._pos[0])}")

    @property
    def tokens(self) -> np.ndarray:
        """A view of the tokens the batch holds now."""
        return self._token[: self.batch.n_tokens]

    def close(self) -> None:
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None

    def __enter__(self) -> TokenBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
