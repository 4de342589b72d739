"""MTP drafting: the model's own multi-token-prediction head proposes the next tokens.

Why a second llama.cpp context: llama.cpp runs the MTP head (the GGUF's extra `nextn` block,
loaded with `load_mtp`: `Session(..., mtp=True)`) as its own graph, in a context of type
`LLAMA_CONTEXT_TYPE_MTP` on the session's loaded weights (nothing is loaded twice), with
`ctx_other` = the session's context as llama-server sets it. The drafter knows that target
`LlamaContext`, not the session: the tokens its memory holds are all it compares with. For
Qwen3.5 the MTP context's memory is an attention KV cache for the MTP layer alone (llama.cpp
filters it to blocks >= n_layer): one layer of n_ctx positions, never a second copy of the
trunk's cache or recurrent state. The trunk's hidden states come from the target context,
which is asked to keep them for every token of every batch
(`llama_set_embeddings_nextn(ctx, True, masked=False)`, the bindings in `llama_cpp_ext`).

How it follows the target, as llama-server's `--spec-type draft-mtp` does (common/speculative):
- after every llama_decode of the target (a decode listener), the MTP context evaluates the
  same tokens, the token at position p paired with the trunk's hidden state at p - 1, so its
  KV cache mirrors the target's. Its entries from the batch's first position on are
  removed first, which also drops earlier drafts and tokens the session rolled back;
- `draft(context_tokens, k)`: the last context token (position p, usually sampled and not
  decoded yet) with the trunk's state at p - 1 gives the head's most likely next token; that
  token with the head's own output state gives the one after, k times (k one-token decodes,
  each with a full-vocabulary output projection: the cost that makes a draft step expensive);
- `observe(accepted, proposed)` keeps the running acceptance an adaptive caller reads;
  `name` and `reset()` complete the `Drafter` protocol of speculative decoding.

Drafts are argmax tokens, deterministic for a given context. They are proposals only: the
session's verification decides what is kept, so a bad draft costs time, never correctness.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, replace

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from edge_sql.convert.gguf_file import validate_gguf
from edge_sql.errors import ClosedError, EdgeSqlError
from edge_sql.runtime.llama.backend import Closing
from edge_sql.runtime.llama.context import DecodeContext, LlamaContext, create_context
from edge_sql.runtime.records import DraftCounts


@dataclass
class MTPWork:
    """What the drafter did since it was made (its cost, which tests check): draft calls, MTP
    decodes and target tokens mirrored into its own context. The outcome of its drafts is
    counted where verification counts every source's (`DraftCounts`)."""

    drafts: int = 0
    draft_tokens: int = 0  # tokens proposed
    draft_steps: int = 0  # one-token MTP decodes (a token each, one more when p_min stopped it)
    mirrored_tokens: int = 0  # target tokens evaluated by the MTP context to follow it


class MTPDrafter(Closing):
    """Drafts tokens with the target context's MTP head; see the module docstring.

    Attach it right after making the target (a session's `context`): it mirrors only decodes
    that happen while it is attached. Tokens evaluated before, or restored from a saved state
    it has not seen, are missing from its cache, which makes drafts worse, not wrong; a
    restored prefix it has seen keeps its entries (see `reset`). `close()` (or `with`) detaches and frees it; close it
    before the target.
    """

    name = "mtp"  # the draft source's name in speculation stats
    # Each draft token is a decode of the head (0.31 of a 2B decode here), so short drafts pay
    # best: with verify batches of 1 + 0.1 k decodes, 1-token drafts break even at 41% acceptance
    # and 2-token drafts at about 55% (benchmarks/results/mtp.md).
    max_k = 2

    def __init__(self, target: DecodeContext, *, p_min: float = 0.0) -> None:
        """`p_min`: stop a draft at the first token the head gives less than this probability
        (llama-server's `--draft-p-min`; 0 never stops). Each step costs about a third of a
        decode on the 2B shape, so a step that will likely be rejected is a loss."""
        if not 0.0 <= p_min <= 1.0:
            raise ValueError(f"p_min must lie in 0..1, got {p_min}")
        self.p_min = p_min
        if not isinstance(target, LlamaContext):  # a sequence of a batched context (see DecodeContext)
            raise EdgeSqlError(
                "an MTP drafter needs a context of its own: a sequence of a batched context "
                "shares its batches' hidden states with the other sequences"
            )
        if not target.options.mtp:  # resolved options: the head was loaded
            if validate_gguf(target.loaded.path).mtp_layers:
                raise EdgeSqlError("the session did not load the MTP head: make it with Session(..., mtp=True)")
            raise EdgeSqlError(
                f"{target.loaded.path.name} has no MTP head; convert the checkpoint without --no-mtp to draft with it"
            )
        self._target = target
        # the target's options and context size: it mirrors the target's batches as they come,
        # one draft position at a time
        self._context = create_context(
            target.loaded,
            replace(target.options, n_ctx=target.n_ctx),
            what=f"the MTP context for {target.loaded.path}",
            reads=target,
        )
        self.buffers = self._context.buffers  # what the MTP context allocated ("CPU KV", "CPU compute", ...)
        self._ctx: llama_cpp.llama_context_p | None = self._context.ptr  # None once closed
        self._batch = llama_cpp.llama_batch_ext_init(self._ctx)
        self._n_embd = llama_cpp.llama_model_n_embd_out(target.model)
        self._n_vocab = target.n_vocab
        self._pos = (llama_cpp.llama_pos * 4)()
        llama_cpp_ext.llama_set_embeddings_nextn(self._ctx, True, True)
        llama_cpp_ext.llama_set_embeddings_nextn(target.ptr, True, False)
        # the trunk's hidden states of the target's last decode: row i is position rows_start + i
        self._rows = np.zeros((0, self._n_embd), dtype=np.float32)
        self._rows_start = 0
        self._fed: list[int] = []  # token the MTP cache holds per position (-1: none)
        self.stats = MTPWork()
        self.outcome = DraftCounts()  # what verification kept of its drafts (`observe`)
        target.add_listener(self._mirror)

    # ---- following the target ----------------------------------------------------------

    def _state_at(self, pos: int) -> np.ndarray | None:
        """The trunk's hidden state at `pos`, if the target's last decode produced it."""
        i = pos - self._rows_start
        return self._rows[i] if 0 <= i < len(self._rows) else None

    def _mirror(self, tokens: np.ndarray, start: int) -> None:
        """Evaluate a batch the target just decoded: token at p with the trunk's state at p - 1."""
        n = len(tokens)
        pointer = llama_cpp_ext.llama_get_embeddings_nextn_ith(self._target.ptr, 0)
        rows = np.ctypeslib.as_array(pointer, shape=(n, self._n_embd)).copy()
        # position 0 has no state before it: llama-server pairs it with zeros, and so does this
        before = np.zeros(self._n_embd, dtype=np.float32) if start == 0 else self._state_at(start - 1)
        self._forget_from(self._first_stale(start))
        llama_cpp.llama_batch_ext_clear(self._batch)
        for i in range(n):
            state = before if i == 0 else rows[i - 1]
            if state is not None:
                self._add(int(tokens[i]), start + i, state, output=False)
        if before is not None or n > 1:
            self._process()
        self._fed.extend([-1] * (start - len(self._fed)))
        self._fed.extend(int(t) for t in tokens)
        if before is None:
            self._fed[start] = -1
        self._rows, self._rows_start = rows, start
        self.stats.mirrored_tokens += n

    def _first_stale(self, start: int) -> int:
        """Where the MTP cache stops matching the target's memory before `start` (or `start`).

        A batch right after the last one appends: nothing before it changed. Otherwise (a
        rollback, a reset, a restored state) the cache is compared with the target's tokens."""
        if start == self._rows_start + len(self._rows):
            return start
        known = min(start, len(self._fed))
        if known == 0:
            return 0 if self._fed else start
        context = self._target.tokens[:known]
        fed = np.asarray(self._fed[:known])
        differ = np.flatnonzero((fed != -1) & (fed != np.asarray(context)))
        return int(differ[0]) if len(differ) else start

    def _forget_from(self, pos: int) -> None:
        self._context.remove_from(pos)
        del self._fed[pos:]

    # ---- drafting -------------------------------------------------------------------------

    def draft(self, context_tokens: Sequence[int], k: int) -> list[int]:
        """Up to `k` tokens the MTP head expects after `context_tokens` (the target's context,
        whose last token may still be undecoded). Empty when k < 1, when the target has not
        decoded the position before the last token (no trunk state to start from), or when the
        head's first token is below `p_min`."""
        p = len(context_tokens) - 1
        state = self._state_at(p - 1) if p >= 1 else None
        k = min(k, self._target.n_ctx - p)
        if k < 1 or state is None:
            return []
        self._forget_from(p)
        token, drafted = int(context_tokens[-1]), []
        for i in range(k):
            llama_cpp.llama_batch_ext_clear(self._batch)
            self._add(token, p + i, state, output=True)
            self._process()
            self.stats.draft_steps += 1
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, 0), shape=(self._n_vocab,))
            token = int(np.argmax(logits))
            if self.p_min > 0.0 and 1.0 / np.exp(logits - logits[token], dtype=np.float64).sum() < self.p_min:
                break  # the head is not sure enough: what is drafted so far is the draft
            drafted.append(token)
            pointer = llama_cpp_ext.llama_get_embeddings_nextn_ith(self._ctx, 0)
            state = np.ctypeslib.as_array(pointer, shape=(self._n_embd,)).copy()
        # the cache now holds draft entries from p on: the next mirrored batch replaces them
        self._fed.extend([-1] * (p - len(self._fed)))
        self._fed.extend([-1] * len(drafted))
        self.stats.drafts += 1
        self.stats.draft_tokens += len(drafted)
        return drafted

    def observe(self, accepted: int, proposed: int) -> None:
        """Record that verification kept `accepted` of `proposed` drafted tokens."""
        if not 0 <= accepted <= proposed:
            raise ValueError(f"accepted ({accepted}) must lie within 0..proposed ({proposed})")
        self.outcome.record(accepted, proposed)

    def reset(self) -> None:
        """The target was emptied or replaced: forget its hidden states.

        The MTP cache itself is kept until the next mirrored batch compares it with the new
        context: entries of a prefix the new context shares (an episode's system prompt,
        restored from a saved state without decoding) stay valid and keep drafting good."""
        self._rows = np.zeros((0, self._n_embd), dtype=np.float32)
        self._rows_start = 0

    @property
    def acceptance(self) -> float:
        """Accepted / observed proposals (0.0 before any observation)."""
        return self.outcome.acceptance

    @property
    def cache_span(self) -> tuple[int, int]:
        """First and last position the MTP context's KV cache holds ((-1, -1) when empty)."""
        return self._context.span

    # ---- llama.cpp calls ------------------------------------------------------------------

    def _add(self, token: int, pos: int, state: np.ndarray, *, output: bool) -> None:
        """One batch entry: a token id with the hidden state it is paired with (copied by llama.cpp)."""
        idx = llama_cpp.llama_batch_ext_add_token(self._batch, 0, token)
        if idx < 0:
            raise RuntimeError(f"llama_batch_ext_add_token failed ({idx}) at position {pos}")
        self._pos[0] = pos
        llama_cpp.llama_batch_ext_set_pos(self._batch, idx, self._pos)
        data = state.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        if not llama_cpp.llama_batch_ext_set_embd_token(self._batch, idx, llama_cpp.llama_embd(data, 1, self._n_embd)):
            raise RuntimeError(f"llama.cpp refused the hidden state at position {pos}")
        if output:
            llama_cpp.llama_batch_ext_set_output_logits(self._batch, idx, True)

    def _process(self) -> None:
        status = llama_cpp.llama_process(self._ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, self._batch)
        if status != 0:
            raise RuntimeError(f"the MTP context's llama_process failed with status {status}")

    # ---- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Detach from the target (which stops keeping hidden states) and free the MTP context."""
        if self._ctx:
            self._target.remove_listener(self._mirror)
            try:
                llama_cpp_ext.llama_set_embeddings_nextn(self._target.ptr, False, False)
            except ClosedError:
                pass  # the target is already closed
            llama_cpp.llama_batch_ext_free(self._batch)
            self._context.close()
            self._ctx = None
