"""One llama.cpp model and context on the low-level bindings: eval each token once, sample.

Why not `llama_cpp.Llama`: it re-evaluates the whole prompt of hybrid models (whose recurrent
state cannot be rolled back to a common prefix) on every call, checks grammars against the
whole vocabulary per token, and allocates an n_batch x n_vocab score buffer. Here the context
is append-only:
`eval` adds prompt tokens, `generate` adds sampled tokens, and every token is decoded
exactly once. The last sampled token of a completion is decoded lazily, together with the
next `eval` batch, so no decode call is spent on it alone.

A Session is not thread-safe: use it from one thread at a time.
"""

from __future__ import annotations

import codecs
import ctypes
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import llama_cpp
import numpy as np

from edge_sql.convert.gguf_file import validate_gguf
from edge_sql.errors import ContextFullError, EdgeSqlError, ModelFileError
from edge_sql.runtime.backend import (
    Closing,
    buffer_sizes,
    capture_log,
    default_threads,
    gpu_backend_name,
    init_backend,
    repack_is_safe,
)
from edge_sql.runtime.batch import TokenBatch
from edge_sql.runtime.constrained import GrammarConstraint, build_lltokenizer
from edge_sql.runtime import shared_models
from edge_sql.runtime.prefix_state import PrefixStore, StateSnapshot, prefix_key
from edge_sql.runtime.sampling import NoAllowedToken, SamplingParams, sample, sample_allowed
from edge_sql.runtime.speculative import DEFAULT_DRAFT_MAX, DraftCounts, Drafter, Speculator, make_drafters

StopReason = Literal["stop", "grammar_done", "max_tokens", "cancelled", "context_full"]
_GRAMMAR_CACHE_SIZE = 16
# Physical batch: 256 measured 40 MiB less peak RSS than 512 at a 12,288-token context and
# equal or faster prefill on the 2B shape (benchmarks/results/runtime.md).
DEFAULT_UBATCH = 256


@dataclass(frozen=True)
class SessionInfo:
    """How the model was loaded: what `edge-sql run` reports at start."""

    model_path: Path
    architecture: str
    model_bytes: int
    backend: str          # "CPU" or the GPU backend's name ("CUDA", "Metal", ...)
    gpu_layers: int       # layers offloaded to the GPU (0 on CPU)
    n_layers: int
    n_threads: int
    n_ctx: int
    n_batch: int
    n_ubatch: int
    repack: bool
    n_vocab: int
    flash_attn: str = "auto"  # "on", "off" or "auto" (llama.cpp decides)
    mtp_layers: int = 0       # multi-token-prediction layers loaded (Session(mtp=True): llama.cpp's load_mtp)
    speculate: str = "off"    # "off", "lookup", "auto" (see runtime/speculative.py)
    draft_max: int = 0        # most draft tokens in one verify batch (0: speculation off)
    rollback: str = ""        # how rejected drafts leave memory: "kv" (attention only) or "kv+n_rs_seq"
    # bytes llama.cpp allocated beyond the mapped file, by kind ("CPU KV", "CPU compute", ...)
    buffers: dict[str, int] = field(default_factory=dict)
    # repacked weights: the file's mapping was released after loading (runtime/mapping.py), so
    # the repacked copies take the place of their mapped originals instead of adding to them
    mapping_released: bool = False

    @property
    def settings(self) -> str:
        """The speed-relevant llama.cpp settings in one short line (what `--json` stats name)."""
        line = (f"flash_attn={self.flash_attn} n_ubatch={self.n_ubatch} n_threads={self.n_threads} "
                f"repack={'on' if self.repack else 'off'} gpu_layers={self.gpu_layers}")
        return line + (f" speculate={self.speculate} draft_max={self.draft_max}" if self.draft_max else "")

    @property
    def buffer_bytes(self) -> int:
        """llama.cpp's own allocations that are not the memory-mapped model file (nor, once the
        mapping is released, the repacked copies that stand in for its pages)."""
        return sum(size for kind, size in self.buffers.items()
                   if not kind.endswith("_Mapped model")
                   and not (self.mapping_released and kind.endswith("_REPACK model")))

    def describe(self) -> str:
        where = f"{self.backend}, {self.gpu_layers}/{self.n_layers} layers on GPU" if self.gpu_layers else "CPU"
        return (
            f"{self.model_path.name} ({self.architecture}, {self.model_bytes / 1e9:.2f} GB) on {where}, "
            f"{self.n_threads} threads, context {self.n_ctx} tokens"
        )


@dataclass
class Timings:
    """Token counts and seconds; `Session.timings` sums them since the last reset."""

    prompt_tokens: int = 0
    prompt_s: float = 0.0      # eval(): decoding prompt tokens (and a pending sampled token)
    restored_tokens: int = 0   # prompt tokens restored from a saved prefix state, not evaluated
    restore_s: float = 0.0     # of eval()'s time, restoring them
    generated_tokens: int = 0  # sampled + forced
    forced_tokens: int = 0     # of which the grammar forced
    generate_s: float = 0.0    # wall time inside generate()
    decode_s: float = 0.0      # of which llama_decode
    sample_s: float = 0.0      # of which sampling and grammar masks
    # speculative decoding, per draft source: drafted (evaluated), accepted, rolled back
    drafts: dict[str, DraftCounts] = field(default_factory=dict)

    @property
    def prompt_tok_s(self) -> float:
        return self.prompt_tokens / self.prompt_s if self.prompt_s else 0.0

    @property
    def decode_tok_s(self) -> float:
        return self.generated_tokens / self.generate_s if self.generate_s else 0.0

    @property
    def draft_tokens(self) -> int:
        return sum(counts.drafted for counts in self.drafts.values())

    @property
    def accepted_draft_tokens(self) -> int:
        return sum(counts.accepted for counts in self.drafts.values())

    @property
    def rolled_back_tokens(self) -> int:
        """Draft tokens evaluated and then removed again (not part of the context)."""
        return self.draft_tokens - self.accepted_draft_tokens

    def add(self, other: Timings) -> None:
        for name in self.__dataclass_fields__:
            if name == "drafts":
                for source, counts in other.drafts.items():
                    self.drafts.setdefault(source, DraftCounts()).add(counts)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Completion:
    """What one `generate` call added to the context.

    `tokens` are all tokens appended (including a final stop token); `text` is their text
    without that stop token. `ended_turn` says whether a stop token closed the turn.
    """

    tokens: list[int]
    text: str
    stop_reason: StopReason
    n_forced: int
    ended_turn: bool
    timings: Timings = field(default_factory=Timings)
    # with generate(audit=True): grammar steps checked, and how many of them the grammar
    # overruled the model's own top token (its raw argmax was not allowed)
    n_audited: int = 0
    n_overruled: int = 0


@dataclass
class _Verify:
    """A verify batch in flight: drafts at positions base.., logits[i] after i accepted drafts."""

    source: str
    drafts: list[int]
    logits: list[np.ndarray]
    base: int
    seconds: float = 0.0  # drafting it and the verify batch's decode
    accepted: int = 0


class Session(Closing):
    """A loaded model with one append-only context.

    `n_gpu_layers=None` offloads every layer when llama.cpp has a GPU backend (CUDA, Metal...)
    and none otherwise; `n_threads=None` uses every CPU this process may run on;
    `repack=False` keeps llama.cpp's weights as mapped from the file; `repack=True` uses its
    repacked CPU copies (faster decode on some CPUs, slower prefill on others) and releases the
    file mapping's pages after loading, so the copies replace the mapped originals in memory
    instead of adding about 590 MB; on AMX builds repacked weights crash (`repack=True` is then
    refused, see `backend.repack_is_safe`).
    `n_ubatch=None` is 256 (`DEFAULT_UBATCH`); `flash_attn=None` lets llama.cpp decide (on
    for CPU), True/False force it (`tuning` picks these per machine). `mtp=True` also loads the
    file's multi-token-prediction head, for an `MTPDrafter` (`info.mtp_layers` says whether it
    did). `info` says what was chosen.

    Speculative decoding (`speculate` "lookup" or "auto", see `generate`) sizes the context
    for verify batches of up to `draft_max` drafts: logits for `draft_max + 1` positions, and
    for recurrent layers `draft_max` snapshots of their state (llama.cpp's `n_rs_seq`), about
    (1 + draft_max) times the recurrent state's memory. "off" (the default) changes nothing.

    Shared prefix: after `shared_prefix(tokens)`, the next `eval` on an empty context that
    starts with `tokens` restores their saved state (attention KV and recurrent state) instead
    of evaluating them, or evaluates them alone and saves the state. The last prefix is kept in
    memory; `prefix_cache_dir` also keeps states on disk for later processes (keyed by model
    file, tokens, settings and llama.cpp build; at most `prefix_cache_bytes` in all).
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        n_ctx: int = 12288,
        n_threads: int | None = None,
        n_gpu_layers: int | None = None,
        n_batch: int = 512,
        n_ubatch: int | None = None,
        repack: bool = False,
        verbose: bool = False,
        flash_attn: bool | None = None,
        prefix_cache_dir: str | Path | None = None,
        prefix_cache_bytes: int = 512 * 1024 * 1024,
        log: Callable[[str], None] | None = None,
        mtp: bool = False,
        speculate: str = "off",
        draft_max: int = DEFAULT_DRAFT_MAX,
    ) -> None:
        if n_ctx < 16 or n_batch < 1 or (n_ubatch is not None and n_ubatch < 1):
            raise ValueError("n_ctx must be >= 16 and n_batch, n_ubatch >= 1")
        drafters = make_drafters(speculate)  # an unknown mode fails before loading
        if speculate != "off" and not 1 <= draft_max < n_batch:
            raise ValueError(f"draft_max must be in 1..n_batch-1, got {draft_max}")
        draft_max = draft_max if speculate != "off" else 0
        if n_threads is not None and n_threads < 1:
            raise ValueError("n_threads must be >= 1")
        gguf = validate_gguf(model_path)
        if speculate == "mtp" and not gguf.mtp_layers:
            raise EdgeSqlError(f"--speculate mtp: {gguf.path.name} has no MTP head (convert the checkpoint again "
                               "without --no-mtp), use --speculate lookup")
        init_backend(verbose=verbose)
        self._model = self._ctx = self._loaded = None
        self._batch: TokenBatch | None = None
        gpu = gpu_backend_name()
        n_layers = gguf.block_count or 0
        if n_gpu_layers is None:
            n_gpu_layers = n_layers + 1 if gpu else 0
        n_gpu_layers = max(0, min(n_gpu_layers, n_layers + 1)) if gpu else 0
        n_threads = n_threads or default_threads()
        n_ubatch = min(n_ubatch or DEFAULT_UBATCH, n_batch)
        if repack and not repack_is_safe():
            raise EdgeSqlError(
                "repacked weights crash with this llama.cpp build (AMX kernels); use repack=False or "
                "rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_AMX_INT8=OFF"
            )

        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = n_gpu_layers
        model_params.use_extra_bufts = repack
        # the MTP head (an extra block that only an MTP drafter's context runs; the main graph
        # never does) on request: loading it keeps its weights in memory (36 MiB on the 2B Q4_K_M)
        # (speculation with "mtp" or "auto" drafts with it when the file has one)
        model_params.load_mtp = (mtp or speculate in ("mtp", "auto")) and gguf.mtp_layers > 0
        # shared with other sessions of this file and parameters (and their vocabulary view)
        self._loaded = shared_models.acquire(gguf.path, model_params)
        self._model = self._loaded.model
        load_lines, mapping_released = self._loaded.load_log, self._loaded.mapping_released

        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = n_ctx
        ctx_params.n_batch = n_batch
        ctx_params.n_ubatch = n_ubatch
        ctx_params.n_seq_max = 1
        ctx_params.n_outputs_max = 1  # only the last position's logits: no n_batch x vocab buffer
        if draft_max:  # verify batches: logits at every draft position, recurrent snapshots to roll back
            ctx_params.n_outputs_max = draft_max + 1
            ctx_params.n_rs_seq = draft_max
        ctx_params.n_threads = n_threads
        ctx_params.n_threads_batch = n_threads
        ctx_params.no_perf = False  # keep llama.cpp's own decode counters (llama_perf_counts)
        if flash_attn is not None:
            ctx_params.flash_attn_type = (
                llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        with capture_log() as lines:
            self._ctx = llama_cpp.llama_init_from_model(self._model, ctx_params)
        self._buffers = buffer_sizes(lines)
        if not self._ctx:
            self.close()
            raise ModelFileError(f"llama.cpp could not create a {n_ctx}-token context for {gguf.path} (out of memory?)")

        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self._n_batch = n_batch
        self._batch = TokenBatch(n_batch)
        recurrent = llama_cpp.llama_model_is_recurrent(self._model) or llama_cpp.llama_model_is_hybrid(self._model)
        if draft_max and recurrent and llama_cpp.llama_n_rs_seq(self._ctx) < draft_max:
            self.close()
            raise EdgeSqlError(f"--speculate {speculate}: llama.cpp cannot roll back the recurrent state of "
                               f"{gguf.architecture} models; use --speculate off")
        self._draft_max = draft_max
        self._single_decode_s: float | None = None  # running mean, for the speculator's cost model
        self._speculator: Speculator | None = None
        self._mtp_drafter = None

        self.info = SessionInfo(
            model_path=gguf.path, architecture=gguf.architecture, model_bytes=gguf.file_size,
            backend=gpu if gpu and n_gpu_layers else "CPU", gpu_layers=n_gpu_layers,
            n_layers=llama_cpp.llama_model_n_layer(self._model), n_threads=n_threads,
            n_ctx=self._n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, repack=repack, n_vocab=self._n_vocab,
            flash_attn="auto" if flash_attn is None else ("on" if flash_attn else "off"),
            buffers={**buffer_sizes(load_lines), **self._buffers}, mapping_released=mapping_released,
            mtp_layers=llama_cpp.llama_model_n_layer_nextn(self._model) if model_params.load_mtp else 0,
            speculate=speculate if draft_max else "off", draft_max=draft_max,
            rollback=("kv+n_rs_seq" if recurrent else "kv") if draft_max else "",
        )
        if model_params.load_mtp and speculate in ("mtp", "auto"):
            from edge_sql.runtime.mtp import MTPDrafter  # its context reads this one's: made after it

            self._mtp_drafter = MTPDrafter(self)
            drafters.append(self._mtp_drafter)  # after lookup: drafts when no earlier text matches
            self.info.buffers.update({f"MTP {kind}": size for kind, size in self._mtp_drafter.buffers.items()
                                      if not kind.endswith("_Mapped model")})  # its own context: KV, compute
        if drafters:
            self._speculator = Speculator(drafters, max_k=draft_max, auto=speculate == "auto")
        self._log = log or (lambda _message: None)
        self._prefix_store = PrefixStore(prefix_cache_dir, max_bytes=prefix_cache_bytes, log=self._log)
        self._pending_prefix: list[int] | None = None
        self._pieces = self._loaded.pieces  # token bytes, shared by the sessions of this model
        self._piece_buffer = ctypes.create_string_buffer(256)
        self._lltokenizer = None
        self._grammars: OrderedDict[str, GrammarConstraint] = OrderedDict()
        self.reset()

    # ---- context state -------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the context and zero the counters; the next generate re-seeds the sampler."""
        llama_cpp.llama_memory_clear(self._memory, True)
        llama_cpp.llama_perf_context_reset(self._ctx)
        self._tokens: list[int] = []
        self._n_evaluated = 0
        self._n_restored = 0
        self._n_rolled_back = 0
        self._logits: np.ndarray | None = None
        self._rng: np.random.Generator | None = None
        self._pending_prefix = None
        self.timings = Timings()
        if self._speculator is not None:
            self._speculator.reset()

    def seed(self, seed: int | None) -> None:
        """Re-seed the sampler now (otherwise the first generate after reset seeds it)."""
        self._rng = np.random.default_rng(seed)

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def n_past(self) -> int:
        """Tokens in the context: prompt tokens evaluated plus tokens generated."""
        return len(self._tokens)

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def llama_model(self) -> llama_cpp.llama_model_p:
        """The loaded llama.cpp model, to open another context on the same weights (as
        `teacher_forcing` does). Sessions of the same file share it (runtime/shared_models.py):
        never free it, and free any context made from it before `close()`. Raises RuntimeError
        once the session is closed."""
        if not self._model:
            raise RuntimeError("the session is closed: its model has been freed")
        return self._model

    @property
    def llama_context(self) -> llama_cpp.llama_context_p:
        """The session's llama.cpp context, for a context that reads it (an MTP drafter's
        `ctx_other`). The session owns it; free dependent contexts before `close()`."""
        if not self._ctx:
            raise RuntimeError("the session is closed: its context has been freed")
        return self._ctx

    def add_decode_listener(self, listener: Callable[[np.ndarray, int], None]) -> None:
        """Call `listener(tokens, first_position)` after every llama_decode of this context
        (`tokens` is a view, valid during the call): how an MTP drafter sees each hidden state."""
        self._batch.listeners.append(listener)

    def remove_decode_listener(self, listener: Callable[[np.ndarray, int], None]) -> None:
        if self._batch is not None and listener in self._batch.listeners:
            self._batch.listeners.remove(listener)

    @property
    def tokens(self) -> list[int]:
        return list(self._tokens)

    @property
    def prompt_tokens_evaluated(self) -> int:
        return self.timings.prompt_tokens

    @property
    def generated_tokens(self) -> int:
        return self.timings.generated_tokens

    @property
    def prefix_tokens_restored(self) -> int:
        """Prompt tokens restored from a saved prefix state since the last reset (not evaluated)."""
        return self.timings.restored_tokens

    @property
    def decoded_tokens(self) -> int:
        """Tokens passed to llama_decode since the last reset (n_past minus a pending token,
        minus restored prefix tokens, plus draft tokens that were rolled back)."""
        return self._n_evaluated - self._n_restored + self._n_rolled_back

    @property
    def draft_tokens_rolled_back(self) -> int:
        """Draft tokens evaluated and removed again since the last reset (see `generate`)."""
        return self._n_rolled_back

    @property
    def speculator(self) -> Speculator | None:
        """Who drafts for `generate` (None: speculation is off for this session)."""
        return self._speculator

    def use_drafters(self, drafters: list[Drafter], *, auto: bool = False, max_k: int | None = None,
                     adaptive: bool = True) -> None:
        """Draft with `drafters` (priority order) from now on, at most `max_k` tokens a batch
        (default and limit: the session's `draft_max`); the session must have been loaded with
        speculation on (its context is sized for verify batches then)."""
        if not self._draft_max:
            raise RuntimeError("speculation is off for this session: load it with speculate='lookup' or 'auto'")
        max_k = self._draft_max if max_k is None else max_k
        if not 1 <= max_k <= self._draft_max:
            raise ValueError(f"max_k must be in 1..{self._draft_max}")
        self._speculator = Speculator(drafters, max_k=max_k, auto=auto, adaptive=adaptive)

    def llama_perf_counts(self) -> tuple[int, int]:
        """llama.cpp's own counters since the last reset: (batch tokens, single-token decodes).

        llama.cpp reports each as at least 1.
        """
        perf = llama_cpp.llama_perf_context(self._ctx)
        return perf.n_p_eval, perf.n_eval

    # ---- tokens and text -----------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids of `text` (no BOS added); `special` parses `<|im_end|>`-style tokens."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buffer = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buffer, capacity, False, special)
        if n < 0:
            capacity = -n
            buffer = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buffer, capacity, False, special)
        return list(buffer[:n])

    def token_bytes(self, token: int) -> bytes:
        """The exact bytes of one token (special tokens rendered as their text)."""
        piece = self._pieces.get(token)
        if piece is None:
            n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece_buffer, 256, 0, True)
            if n < 0:
                big = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, big, -n, 0, True)
                piece = big.raw[:n]
            else:
                piece = self._piece_buffer.raw[:n]
            self._pieces[token] = piece
        return piece

    def detokenize(self, tokens: Iterable[int]) -> str:
        """Text of tokens; bytes are joined first so characters split across tokens survive."""
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def is_special_token(self, token: int) -> bool:
        """Control tokens and `<...>` user-defined tokens: what llguidance matches only by id."""
        attr = llama_cpp.llama_vocab_get_attr(self._vocab, token)
        if attr & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL:
            return True
        piece = self.token_bytes(token)
        return bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED) and piece.startswith(b"<") and piece.endswith(b">")

    def grammar_token(self, text: str) -> str:
        """A Lark fragment matching `text` as the model emits it.

        A single special token (Qwen3.5's `</think>`, `<|im_end|>`) becomes `<[ID]>`, which
        llguidance matches by token id; anything else becomes a quoted string literal.
        """
        ids = self.tokenize(text, special=True)
        if len(ids) == 1 and self.is_special_token(ids[0]) and self.token_bytes(ids[0]) == text.encode():
            return f"<[{ids[0]}]>"
        return json.dumps(text, ensure_ascii=False)

    # ---- evaluation ----------------------------------------------------------------------

    def eval(self, tokens: Iterable[int]) -> None:
        """Append prompt tokens to the context and evaluate them (each exactly once)."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            return
        if len(self._tokens) + len(tokens) > self._n_ctx:
            raise ContextFullError(
                f"context full: {len(self._tokens)} + {len(tokens)} tokens exceed the {self._n_ctx}-token window"
            )
        bad = [t for t in tokens if not 0 <= t < self._n_vocab]
        if bad:
            raise ValueError(f"token ids out of range: {bad[:5]}")
        start = time.perf_counter()
        prefix, self._pending_prefix = self._pending_prefix, None
        if prefix and not self._tokens and tokens[:len(prefix)] == prefix:
            if self._restore_prefix(prefix):
                self.timings.restore_s += time.perf_counter() - start
            else:  # evaluate the prefix alone, so its state can be saved
                self._tokens.extend(prefix)
                self._flush()
                self.timings.prompt_tokens += len(prefix)
                self._save_prefix()
            tokens = tokens[len(prefix):]
        self._tokens.extend(tokens)
        self._flush()
        self.timings.prompt_s += time.perf_counter() - start
        self.timings.prompt_tokens += len(tokens)

    # ---- saved states ----------------------------------------------------------------------

    def shared_prefix(self, tokens: Iterable[int]) -> None:
        """Declare that the next `eval` on this empty context starts with `tokens`, a prefix
        many episodes share (system prompt and tool list): restore its saved state if there
        is one, else evaluate it alone and save it. Ignored when the context is not empty."""
        self._pending_prefix = [int(t) for t in tokens] if not self._tokens else None

    def snapshot(self) -> StateSnapshot:
        """The whole context: its tokens, llama.cpp's sequence state and the last logits."""
        self._flush()
        if self._logits is None:
            raise RuntimeError("the context is empty: nothing to snapshot")
        size = llama_cpp.llama_state_seq_get_size(self._ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx, buffer, size, 0)
        if written != size:
            raise RuntimeError(f"llama_state_seq_get_data wrote {written} of {size} bytes")
        return StateSnapshot(tokens=tuple(self._tokens), state=bytes(buffer), logits=self._logits.copy())

    def restore(self, snapshot: StateSnapshot) -> bool:
        """Replace the context with a snapshot's (counted as restored, not evaluated tokens).

        Returns False, leaving the context empty, when llama.cpp rejects the state (made with
        another model or settings) or it does not fit this context. Counters and the sampler's
        seed are kept.
        """
        llama_cpp.llama_memory_clear(self._memory, True)
        self._tokens, self._n_evaluated, self._n_restored, self._logits = [], 0, 0, None
        if len(snapshot.tokens) > self._n_ctx or snapshot.logits.shape != (self._n_vocab,):
            return False
        buffer = (ctypes.c_uint8 * len(snapshot.state)).from_buffer_copy(snapshot.state)
        if llama_cpp.llama_state_seq_set_data(self._ctx, buffer, len(snapshot.state), 0) != len(snapshot.state):
            llama_cpp.llama_memory_clear(self._memory, True)
            return False
        if llama_cpp.llama_memory_seq_pos_max(self._memory, 0) != len(snapshot.tokens) - 1:
            llama_cpp.llama_memory_clear(self._memory, True)
            return False
        self._tokens = list(snapshot.tokens)
        self._n_evaluated = self._n_restored = len(self._tokens)
        self._logits = np.array(snapshot.logits, dtype=np.float32)
        self.timings.restored_tokens += len(self._tokens)
        return True

    def _prefix_key(self, prefix: list[int]) -> str:
        return prefix_key(self.info, prefix)

    def _restore_prefix(self, prefix: list[int]) -> bool:
        key = self._prefix_key(prefix)
        snapshot = self._prefix_store.get(key, prefix)
        if snapshot is None:
            return False
        if self.restore(snapshot):
            return True
        self._log(f"note: the saved prompt state {key[:12]} did not load; evaluating the prompt instead")
        self._prefix_store.discard(key)
        return False

    def _save_prefix(self) -> None:
        self._prefix_store.put(self._prefix_key(self._tokens), self.snapshot())

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
            chunk = self._tokens[self._n_evaluated:min(n_total, self._n_evaluated + self._n_batch)]
            n = len(chunk)
            last_chunk = self._n_evaluated + n == len(self._tokens)
            self._batch.fill(chunk, self._n_evaluated, outputs="last" if last_chunk else "none")
            self._logits = None
            tick = time.perf_counter()
            self._batch.decode(self._ctx)
            if n == 1 and self._speculator is not None:
                seconds = time.perf_counter() - tick
                mean = self._single_decode_s
                self._single_decode_s = seconds if mean is None else 0.9 * mean + 0.1 * seconds
            self._n_evaluated += n
            if last_chunk:
                pointer = llama_cpp.llama_get_logits_ith(self._ctx, -1)
                self._logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))

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

        Speculation (a session loaded with `speculate` on; not with `audit`): at a sampling
        step with a token pending, the speculator may propose drafts d1..dk. The pending
        token(s) and the drafts are decoded in one batch with logits at every draft position.
        Then the loop runs exactly as without drafts, except that a step takes its logits
        from that batch instead of decoding: the same checks (cancel, room, grammar, forced
        tokens), the same grammar mask, the same sampler and random numbers. A sampled token
        equal to the next draft is already evaluated (accepted); at the first one that is not,
        the rest of the drafts leave llama.cpp's memory (`llama_memory_seq_rm`: attention
        cells, and the recurrent state falls back to its `n_rs_seq` snapshot) and the sampled
        token stays pending, as usual. The grammar only ever consumes appended tokens. So the
        appended tokens are the ones non-speculative decoding appends for the same logits
        (greedy: token-identical up to batch-vs-single rounding; sampling: the same
        distribution and, for a seed, the same draws); drafts only change how many decodes
        they cost.
        """
        if not self._tokens:
            raise ValueError("generate() needs a prompt: eval() some tokens first")
        if self._rng is None:
            self.seed(params.seed)
        rng = self._rng
        constraint = self._constraint(grammar) if grammar is not None else None
        stop_set = frozenset(int(t) for t in stop_tokens)
        if constraint is not None:
            constraint.start(list(stop_tokens))
        timings = Timings()
        new_tokens: list[int] = []
        chunks: list[str] = []
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        n_forced = n_audited = n_overruled = 0
        speculator = self._speculator if not audit else None
        inflight: _Verify | None = None  # drafts decoded and not yet accepted or rolled back
        started = time.perf_counter()

        def append(tokens: list[int], forced: bool, visible: bool = True) -> None:
            self._tokens.extend(tokens)
            new_tokens.extend(tokens)
            if visible:
                text = decoder.decode(b"".join(self.token_bytes(t) for t in tokens))
                if text:
                    chunks.append(text)
                    if on_text is not None:
                        on_text(text)

        reason: StopReason
        while True:
            if should_stop is not None and should_stop():
                reason = "cancelled"
                break
            room = min(max_tokens - len(new_tokens), self._n_ctx - len(self._tokens))
            if constraint is not None and constraint.is_stopped:
                reason = "grammar_done"
                break
            if room <= 0:
                reason = "max_tokens" if len(new_tokens) >= max_tokens else "context_full"
                break
            if constraint is not None and not (stop_set and constraint.is_accepting):
                tick = time.perf_counter()
                forced = constraint.forced_tokens()[:1 if audit else room]
                timings.sample_s += time.perf_counter() - tick
                if forced and audit:
                    self._flush()
                    constraint.compute_mask()
                    n_audited += 1
                    n_overruled += not constraint.is_allowed(np.array([int(np.argmax(self._logits))]))[0]
                if forced:
                    if inflight is not None:  # non-speculative decoding would not sample here either
                        inflight = self._end_verify(inflight, timings)
                    constraint.consume(forced)
                    append(forced, forced=True)
                    n_forced += len(forced)
                    continue
            tick = time.perf_counter()
            if inflight is None and speculator is not None and self._n_evaluated < len(self._tokens):
                drafting = time.perf_counter()
                proposal = speculator.propose(self._tokens, min(room - 1, self._draft_max))
                if proposal is not None:  # the batch's cost includes drafting it (MTP: k decodes)
                    inflight = self._verify(*proposal, draft_s=time.perf_counter() - drafting)
            if inflight is None:
                self._flush()
            tock = time.perf_counter()
            timings.decode_s += tock - tick
            logits = self._logits
            if constraint is None:
                token = sample(logits, params, rng)
            else:
                constraint.compute_mask()
                if audit:
                    n_audited += 1
                    n_overruled += not constraint.is_allowed(np.array([int(np.argmax(logits))]))[0]
                try:
                    token, _ = sample_allowed(logits, constraint.is_allowed, constraint.allowed_mask, params, rng)
                except NoAllowedToken:
                    if not constraint.is_accepting:
                        raise
                    reason = "grammar_done"  # complete; only llguidance's own EOS was left
                    break
            timings.sample_s += time.perf_counter() - tock
            stop = token in stop_set
            if constraint is not None and not stop:
                constraint.consume([token])
            append([token], forced=False, visible=not stop)
            if inflight is not None:
                hit = token == inflight.drafts[inflight.accepted]
                if hit:  # the draft was evaluated in the batch: nothing is pending now
                    inflight.accepted += 1
                    self._n_evaluated += 1
                    self._logits = inflight.logits[inflight.accepted]
                if not hit or inflight.accepted == len(inflight.drafts):
                    inflight = self._end_verify(inflight, timings)
            if stop:
                reason = "stop"
                break

        if inflight is not None:
            self._end_verify(inflight, timings)
        tail = decoder.decode(b"", final=True)
        if tail:
            chunks.append(tail)
            if on_text is not None:
                on_text(tail)
        timings.generate_s = time.perf_counter() - started
        timings.generated_tokens = len(new_tokens)
        timings.forced_tokens = n_forced
        self.timings.add(timings)
        return Completion(
            tokens=new_tokens,
            text="".join(chunks),
            stop_reason=reason,
            n_forced=n_forced,
            n_audited=n_audited,
            n_overruled=n_overruled,
            ended_turn=bool(new_tokens) and new_tokens[-1] in stop_set,
            timings=timings,
        )

    def _verify(self, source: str, drafts: list[int], draft_s: float = 0.0) -> _Verify:
        """Decode the pending tokens and `drafts` in one batch, with logits after the last
        pending token and after each draft (pending tokens that do not fit go first)."""
        keep = min(len(self._tokens) - self._n_evaluated, self._n_batch - len(drafts))
        self._flush(upto=len(self._tokens) - keep)
        batch = self._tokens[self._n_evaluated:] + drafts
        outputs = np.zeros(len(batch), dtype=bool)
        outputs[keep - 1:] = True
        self._batch.fill(batch, self._n_evaluated, outputs=outputs)
        self._logits = None
        tick = time.perf_counter()
        self._batch.decode(self._ctx)
        seconds = time.perf_counter() - tick
        self._n_evaluated = len(self._tokens)
        logits = [np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, i), shape=(self._n_vocab,))
                  for i in range(keep - 1, len(batch))]
        self._logits = logits[0]
        return _Verify(source=source, drafts=drafts, logits=logits, base=len(self._tokens), seconds=draft_s + seconds)

    def _end_verify(self, verify: _Verify, timings: Timings) -> None:
        """Remove the drafts that were not accepted from llama.cpp's memory; count them."""
        rejected = len(verify.drafts) - verify.accepted
        if rejected:
            start = verify.base + verify.accepted
            if not llama_cpp.llama_memory_seq_rm(self._memory, 0, start, -1):
                raise RuntimeError(f"llama.cpp could not roll back {rejected} draft tokens from position {start}")
            self._n_rolled_back += rejected
        counts = timings.drafts.setdefault(verify.source, DraftCounts())
        counts.drafted += len(verify.drafts)
        counts.accepted += verify.accepted
        counts.batches += 1
        cost = verify.seconds / self._single_decode_s if self._single_decode_s else None
        self._speculator.record(verify.source, len(verify.drafts), verify.accepted, cost)
        return None

    def _constraint(self, lark: str) -> GrammarConstraint:
        """The compiled grammar for `lark` (cached; the llguidance tokenizer is built once)."""
        constraint = self._grammars.get(lark)
        if constraint is None:
            constraint = GrammarConstraint(self.lltokenizer(), lark, self._n_vocab)
            self._grammars[lark] = constraint
            if len(self._grammars) > _GRAMMAR_CACHE_SIZE:
                self._grammars.popitem(last=False)
        else:
            self._grammars.move_to_end(lark)
        return constraint

    def lltokenizer(self):
        """llguidance's view of this vocabulary (built on first use: seconds for 248k tokens;
        shared by the sessions of one loaded model, see runtime/shared_models.py)."""
        if self._lltokenizer is None:
            ids = range(self._n_vocab)
            self._lltokenizer = self._loaded.shared_lltokenizer(lambda: build_lltokenizer(
                self._vocab,
                pieces=[self.token_bytes(t) for t in ids],
                special=[self.is_special_token(t) for t in ids],
                eos_token=llama_cpp.llama_vocab_eos(self._vocab),
            ))
        return self._lltokenizer

    # ---- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Free the context, batch and model; the session is unusable afterwards."""
        self._grammars = OrderedDict()
        self._lltokenizer = None
        if getattr(self, "_mtp_drafter", None) is not None:  # its context reads this one's: freed first
            self._mtp_drafter.close()
            self._mtp_drafter = None
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            shared_models.release(self._loaded)  # freed when no session uses it (or kept idle)
            self._model = None
