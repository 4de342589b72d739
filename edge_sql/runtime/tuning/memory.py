"""The memory model: a bound on a candidate's peak RSS at a full context, and what speculation adds.

Memory is estimated, not sampled at a full context: llama.cpp logs every buffer it allocates
for the context (KV cells for the whole n_ctx, recurrent state, the compute buffer reserved for
the worst case of n_ubatch tokens against a full context; repacked weight copies count only
where the file mapping could not be released, see `runtime/llama/mapping.py`); their sum, plus
ggml's work copy of the attention weights when flash attention is off
(`attention_work_bytes`), plus the process's memory before loading, plus what loading the
model allocates besides the mapped file (vocabulary, metadata: measured), plus the file, plus
`UNCOUNTED_BYTES` (what sampling showed the rest to miss) is the estimate of the peak RSS.
Not in it: what the caller allocates later (llguidance's vocabulary view, the saved prompt
state, Python objects of an episode).

Speculation's memory is fitted the same way: each draft of a verify batch keeps a snapshot of
the recurrent state (llama.cpp's `n_rs_seq`) and a logits row, so the chosen settings carry the
most drafts (`draft_max`, at most 8) that the budget still holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import llama_cpp

from edge_sql.convert.gguf_file import validate_gguf
from edge_sql.runtime.llama.backend import init_backend
from edge_sql.runtime.llama.loading import attention_for_threads
from edge_sql.runtime.options import DEFAULT_DRAFT_MAX
from edge_sql.runtime.records import SessionInfo, buffer_role
from edge_sql.runtime.session import Session
from edge_sql.runtime.tuning.result import Measurement
from edge_sql.runtime.tuning.settings import Settings

MEMORY_ALLOWANCE = 400 * 1024 * 1024
# What each draft token of a verify batch adds besides a recurrent-state snapshot, per vocabulary
# entry: its logits row (4 bytes) and the graph's output for it (measured on the 2B shape: the
# compute buffer grows 19.0 MiB from draft_max 0 to 16, 5.0 bytes x 248,320 per draft)
DRAFT_ROW_BYTES_PER_TOKEN = 5
# What the bound misses at a full context, measured on the 2B shape (sampled peak RSS minus the
# bound, benchmarks/results/tune-*.md): 3 MiB (Q4_K_M, flash attention on and off) to 7 MiB (BF16,
# off): allocator slack and small allocations llama.cpp's buffer log leaves out
UNCOUNTED_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ContextMemory:
    """What llama.cpp allocated for one session, by what it holds (bytes).

    Read from the buffer sizes llama.cpp logs (`SessionInfo.buffers`): its C API has no
    per-buffer sizes (`llama_get_memory_breakdown` is C++ only; `llama_state_seq_get_size`
    counts a state's serialized bytes, not what is allocated), so this is the one place in
    calibration that sorts them (by `records.buffer_role`, which alone knows the log's labels).
    """

    allocated: int  # beyond the mapped file: what counts against the budget
    recurrent_state: int  # the main context's recurrent state of its one sequence (0: attention only)
    mtp_context: int  # the MTP drafter's own context: its layer's KV, its compute buffer

    @classmethod
    def of(cls, info: SessionInfo) -> ContextMemory:
        roles = [(buffer_role(label), size) for label, size in info.buffers.items()]
        return cls(
            allocated=info.buffer_bytes,
            recurrent_state=sum(s for role, s in roles if role == "recurrent"),
            mtp_context=sum(s for role, s in roles if role == "mtp"),
        )


def attention_work_bytes(n_ctx: int, settings: Settings, n_head: int) -> int:
    """ggml's CPU work buffer at a full context, which llama.cpp's buffer log leaves out.

    Without flash attention the weighted sum over V multiplies the (transposed, F16) V cache by
    the F32 attention weights, which ggml first converts to F16 in its work buffer:
    n_ctx x n_ubatch x n_head x 2 bytes (24 MiB on the 2B shape at n_ubatch 128). Measured
    (benchmarks/results/tune-Q4_K_M.md): without it the bound was 37 MiB under the sampled peak
    with flash attention off and within 4 MiB with it on. Flash attention (on, or auto on CPU)
    works in tiles and needs no such copy; "auto" above one thread is off (the count adapts,
    runtime/llama/loading.py's `attention_for_threads`).
    """
    flash_attn, _ = attention_for_threads(settings.flash_attn, adapt=settings.n_threads > 1)
    return 0 if flash_attn is not False else n_ctx * settings.n_ubatch * n_head * 2


def memory_bound(session: Session, candidate: Settings, n_ctx: int, baseline: int) -> Measurement:
    """An untimed measurement: the memory bound of `candidate` loaded as `session`."""
    n_head = llama_cpp.llama_model_n_head(session.llama_model)
    memory = ContextMemory.of(session.info)
    bound = baseline + memory.allocated + attention_work_bytes(n_ctx, candidate, n_head) + UNCOUNTED_BYTES
    return Measurement(candidate, [], [], [], bound, state_bytes=memory.recurrent_state, n_vocab=session.n_vocab)


def speculation_bytes(draft_max: int, state_bytes: int, n_vocab: int) -> int:
    """What speculation with `draft_max` adds to a session: llama.cpp keeps `draft_max`
    snapshots of the recurrent state (`n_rs_seq`) and logits for `draft_max` more positions."""
    return draft_max * (state_bytes + DRAFT_ROW_BYTES_PER_TOKEN * n_vocab)


def fit_draft_max(measurement: Measurement, memory_allowance: int, limit: int = DEFAULT_DRAFT_MAX) -> int:
    """The most drafts per verify batch that keep `measurement`'s bound within the budget
    (0 when not even one fits: speculation then stays off)."""
    room = memory_allowance - measurement.memory_bytes
    return next(
        (k for k in range(limit, 0, -1) if speculation_bytes(k, measurement.state_bytes, measurement.n_vocab) <= room),
        0,
    )


def has_mtp_head(model_path: Path) -> bool:
    return bool(validate_gguf(model_path).mtp_layers)


def mtp_context_bytes(model_path: Path, settings: Settings, n_ctx: int) -> int:
    """What the MTP drafter's context allocates (its layer's KV for n_ctx, its compute buffer)
    with `settings`, for a file with an MTP head; 0 without one. Speculation with "mtp" or "auto"
    adds it, so draft_max is fitted to what is left after it."""
    if not has_mtp_head(model_path):
        return 0
    fitted = replace(settings, draft_max=1)
    with Session(model_path, fitted.session_options("mtp", n_ctx=n_ctx, n_gpu_layers=0)) as session:
        return ContextMemory.of(session.info).mtp_context


def process_rss_bytes(field: str = "VmRSS") -> int:
    """This process's resident memory now (Linux /proc; 0 where unknown). `RssAnon` leaves
    out file-backed pages such as the mapped model."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def model_load_bytes(model_path: Path) -> int:
    """Anonymous memory llama.cpp keeps for a loaded model besides the mapped file (the
    vocabulary, metadata, tensor descriptions): not in its buffer-size log lines."""
    init_backend()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    params.use_extra_bufts = False
    before = process_rss_bytes("RssAnon")
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), params)
    after = process_rss_bytes("RssAnon")
    if model:
        llama_cpp.llama_model_free(model)
    return max(0, after - before)
