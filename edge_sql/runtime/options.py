"""What a session is asked for: one frozen record of its llama.cpp settings, and the speculation modes.

Why one record: the same settings make the session's context, the MTP drafter's context and
teacher forcing's (`context.create_context`), say what calibration chose (`tuning.Settings`),
and key the saved prompt states (`prefix_state.prefix_key`). This module imports nothing
heavy (no llama.cpp), so the CLI can offer the modes without loading it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Literal, TypedDict, get_args

from edge_sql.errors import EdgeSqlError

SpeculateMode = Literal["off", "lookup", "auto", "mtp"]
SPECULATE_MODES: tuple[SpeculateMode, ...] = get_args(SpeculateMode)
# the modes that draft with the model's MTP head: a drafter context per episode (runtime/speculation/mtp.py)
MTP_MODES: frozenset[SpeculateMode] = frozenset({"mtp", "auto"})
DEFAULT_DRAFT_MAX = 8
# The protocol's episode budget (agent.Budget.max_tokens), so one episode fills the default context.
DEFAULT_CONTEXT_TOKENS = 12288
# Physical batch: 256 measured 40 MiB less peak RSS than 512 at a 12,288-token context and
# equal or faster prefill on the 2B shape (benchmarks/results/runtime.md).
DEFAULT_UBATCH = 256
# fields that change what the model loads or how it drafts, not the context's saved state
_NOT_STATE = {"state": False}


@dataclass(frozen=True)
class SessionOptions:
    """A session's llama.cpp settings; `None` means "let the session decide".

    `n_gpu_layers=None` (or -1) offloads every layer when llama.cpp has a GPU backend (CUDA,
    Metal...) and none otherwise; `n_threads=None` uses every CPU this process may run on;
    `repack=False` keeps llama.cpp's weights as mapped from the file; `repack=True` uses its
    repacked CPU copies (faster decode on some CPUs, slower prefill on others) and releases the
    file mapping's pages after loading, so the copies replace the mapped originals in memory
    instead of adding about 590 MB; on AMX builds repacked weights crash (`repack=True` is then
    refused, see `backend.repack_is_safe`). `n_ubatch=None` is 256 (`DEFAULT_UBATCH`);
    `flash_attn=None` lets llama.cpp decide (on for CPU) where the thread count is fixed and is
    off where it adapts, True/False force it (`tuning` picks these per machine). `mtp=True`
    also loads the file's multi-token-prediction head, for an `MTPDrafter`. `adapt_threads=True` lets each context run with fewer threads while the
    machine is busy (runtime/llama/threads.py), on the CPU, above one thread and without flash
    attention (`flash_attn=True` keeps the count fixed: runtime/llama/loading.py,
    `attention_for_threads`); False keeps `n_threads` fixed (calibration's timings, the
    busy-machine benchmark's fixed rows).

    Speculative decoding (`speculate` "lookup", "auto" or "mtp") sizes the context for verify
    batches of up to `draft_max` drafts: logits for `draft_max + 1` positions, and for
    recurrent layers `draft_max` snapshots of their state (llama.cpp's `n_rs_seq`), about
    (1 + draft_max) times the recurrent state's memory. "off" (the default) changes nothing.

    A session keeps the resolved copy (`Session.options`): every `None` replaced by what was
    chosen, `draft_max` 0 when speculation is off, `mtp` True only when the MTP head loaded.
    """

    n_ctx: int = DEFAULT_CONTEXT_TOKENS
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    n_batch: int = 512
    n_ubatch: int | None = None
    repack: bool = False
    flash_attn: bool | None = None
    mtp: bool = field(default=False, metadata=_NOT_STATE)
    speculate: SpeculateMode = field(default="off", metadata=_NOT_STATE)
    draft_max: int = DEFAULT_DRAFT_MAX
    verbose: bool = field(default=False, compare=False, metadata=_NOT_STATE)
    adapt_threads: bool = field(default=True, metadata=_NOT_STATE)

    def checked(self) -> SessionOptions:
        """These options with `draft_max` 0 when speculation is off; ValueError (EdgeSqlError for
        an unknown mode) before anything is loaded when they cannot work."""
        if self.n_ctx < 16 or self.n_batch < 1 or (self.n_ubatch is not None and self.n_ubatch < 1):
            raise ValueError("n_ctx must be >= 16 and n_batch, n_ubatch >= 1")
        if self.speculate not in SPECULATE_MODES:
            raise EdgeSqlError(f"unknown speculation mode {self.speculate!r}: use one of {', '.join(SPECULATE_MODES)}")
        if self.speculate != "off" and not 1 <= self.draft_max < self.n_batch:
            raise ValueError(f"draft_max must be in 1..n_batch-1, got {self.draft_max}")
        if self.n_threads is not None and self.n_threads < 1:
            raise ValueError("n_threads must be >= 1")
        return self if self.speculate != "off" else replace(self, draft_max=0)

    def state_fields(self) -> dict[str, object]:
        """The settings a saved context state depends on (what `prefix_key` hashes)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("state", True)}

    @property
    def flash_attn_label(self) -> str:
        """ "on", "off" or "auto" (llama.cpp decides)."""
        return flash_attn_label(self.flash_attn)


class CallerSettings(TypedDict, total=False):
    """The `SessionOptions` fields a machine's calibration does not choose (the caller's: the
    context, the GPU offload, ...), as keywords: `Settings.session_options(n_ctx=2048)`."""

    n_ctx: int
    n_gpu_layers: int | None
    n_batch: int
    mtp: bool
    verbose: bool
    adapt_threads: bool


class SessionSettings(CallerSettings, total=False):
    """All of `SessionOptions`' fields as keywords (`Session(path, n_ctx=2048, n_threads=1)`),
    typed: a misspelt or mistyped keyword is mypy's finding, not a TypeError at load time."""

    n_threads: int | None
    n_ubatch: int | None
    repack: bool
    flash_attn: bool | None
    speculate: SpeculateMode
    draft_max: int


def uses_mtp(speculate: SpeculateMode) -> bool:
    """Whether `speculate` drafts with the MTP head (which then loads, with a context of its own)."""
    return speculate in MTP_MODES


def check_episodes_at_once(
    speculate: SpeculateMode, n: int, *, asked: str = "", error: type[EdgeSqlError] = EdgeSqlError
) -> None:
    """Refuse `n` > 1 episodes at once with a mode that drafts with the MTP head: its drafter is a
    context per episode, which the batched engine (runtime/batching/) does not have. `asked`
    says where `n` came from in the message; `error`, what to raise (a caller's own family)."""
    if n > 1 and uses_mtp(speculate):
        raise error(
            f"--speculate {speculate} runs one episode per context (its MTP drafter's): several at "
            f"once ({n}{asked}) need --speculate lookup or off"
        )


def episodes_at_once(parallel: int, vote: int | None) -> int:
    """The sessions to open for `parallel` episodes at once and votes of `vote`: a vote of K runs
    its K episodes together, so it needs K sessions."""
    return max(parallel, vote or 1)


def flash_attn_label(flash_attn: bool | str | None) -> str:
    """ "on", "off" or "auto" (None: llama.cpp decides); a label already made passes through."""
    if isinstance(flash_attn, str):
        return flash_attn
    return "auto" if flash_attn is None else ("on" if flash_attn else "off")


def settings_line(
    *,
    flash_attn: bool | str | None,
    n_ubatch: int,
    n_threads: int,
    repack: bool,
    gpu_layers: int | None = None,
    speculate: SpeculateMode = "off",
    draft_max: int = 0,
) -> str:
    """The speed-relevant llama.cpp settings in one short line, the one spelling of what calibration
    chose (`tuning.Settings.label`) and what a session runs with (`SessionInfo.settings`, which
    `--json` stats name): GPU layers and speculation where the caller knows them."""
    line = (
        f"flash_attn={flash_attn_label(flash_attn)} n_ubatch={n_ubatch} n_threads={n_threads} "
        f"repack={'on' if repack else 'off'}"
    )
    if gpu_layers is not None:
        line += f" gpu_layers={gpu_layers}"
    return line + (f" speculate={speculate} draft_max={draft_max}" if draft_max else "")
