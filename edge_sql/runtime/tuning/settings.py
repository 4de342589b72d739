"""The llama.cpp settings calibration chooses between, and the candidates it tries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Unpack

from edge_sql.runtime.llama.backend import default_threads, repack_is_safe
from edge_sql.runtime.options import (
    DEFAULT_DRAFT_MAX,
    DEFAULT_UBATCH,
    CallerSettings,
    SessionOptions,
    SpeculateMode,
    settings_line,
    uses_mtp,
)
from edge_sql.runtime.state.identity import physical_cores

UBATCHES = (64, 128, 256, 512)


@dataclass(frozen=True)
class Settings:
    """The llama.cpp settings calibration chooses between. `flash_attn=None`: llama.cpp decides."""

    flash_attn: bool | None
    n_ubatch: int
    n_threads: int
    repack: bool = False
    # most drafts per verify batch when speculation is on: not candidates (they do not change
    # speed when off), fitted to the memory left under the budget (`fit_draft_max`), without and
    # with the MTP drafter's context (files with an MTP head); 0: none fits
    draft_max: int = field(default=DEFAULT_DRAFT_MAX, compare=False)
    draft_max_mtp: int = field(default=DEFAULT_DRAFT_MAX, compare=False)
    # episodes at once (sequences of one context, runtime/batching/sequences.py), fitted after the choice
    # (tuning/parallel.py): the default N (the fewest near the best measured speed), the most
    # within the budget for several (0: `parallel`), and what each sequence adds; 0: not
    # calibrated (then nothing is refused)
    parallel: int = field(default=0, compare=False)
    sequence_bytes: int = field(default=0, compare=False)
    parallel_max: int = field(default=0, compare=False)

    @property
    def parallel_limit(self) -> int:
        """The most episodes at once calibration found room for (0: not calibrated)."""
        return self.parallel_max or self.parallel

    @property
    def label(self) -> str:
        return settings_line(
            flash_attn=self.flash_attn, n_ubatch=self.n_ubatch, n_threads=self.n_threads, repack=self.repack
        )

    def session_options(self, speculate: SpeculateMode = "off", **options: Unpack[CallerSettings]) -> SessionOptions:
        """`Session` options, speculation within the memory budget: "mtp" and "auto" with the
        drafts that fit beside the MTP drafter's context; "auto" drafts by lookup alone where
        that context does not fit; off where no draft fits. `options`: the fields calibration
        does not choose (n_ctx, n_gpu_layers, ...)."""
        speculate, draft_max = self.speculation(speculate)
        return SessionOptions(
            flash_attn=self.flash_attn,
            n_ubatch=self.n_ubatch,
            n_threads=self.n_threads,
            repack=self.repack,
            speculate=speculate,
            draft_max=draft_max or DEFAULT_DRAFT_MAX,
            **options,
        )

    def speculation(self, speculate: SpeculateMode) -> tuple[SpeculateMode, int]:
        """The speculation mode and draft_max that `speculate` becomes within the budget."""
        if uses_mtp(speculate) and self.draft_max_mtp:
            return speculate, self.draft_max_mtp
        if speculate in ("lookup", "auto") and self.draft_max:
            return "lookup", self.draft_max
        return "off", 0


def default_settings() -> Settings:
    """What runs without calibration (`--no-tune`): llama.cpp's flash-attention choice, ubatch 256, all CPUs."""
    return Settings(flash_attn=None, n_ubatch=DEFAULT_UBATCH, n_threads=default_threads())


def candidates(n_threads: int | None = None) -> list[Settings]:
    """The settings to try: ubatch 64/128/256/512 at the most threads, the other thread counts
    (all CPUs, physical cores, and `n_threads` when a caller fixes one) at ubatch 256, repack
    where safe. Flash attention is off wherever more than one thread runs: the thread count then
    follows the machine's load, which flash attention's sums would feel (`flash_options`); on
    one thread both are tried. Quick and full differ in how they are measured, not in what."""
    threads = sorted({default_threads(), physical_cores(), *([n_threads] if n_threads else [])}, reverse=True)
    found = [Settings(fa, ub, threads[0]) for fa in flash_options(threads[0]) for ub in UBATCHES]
    found += [Settings(fa, DEFAULT_UBATCH, n) for n in threads[1:] for fa in flash_options(n)]
    if repack_is_safe():
        found += [Settings(fa, DEFAULT_UBATCH, threads[0], repack=True) for fa in flash_options(threads[0])]
    return found


def flash_options(n_threads: int) -> tuple[bool, ...]:
    """The flash-attention values worth timing at `n_threads`. Why only off above one thread: an
    adapting thread count (runtime/llama/threads.py) needs attention whose sums do not depend on
    the count, which ggml's CPU flash attention is not from 257 tokens on (a session resolves the
    two together, runtime/llama/loading.py); a choice of "on" would give up adapting, and with it
    the speed on a busy machine (9x slower beside one busy program, issue 37)."""
    return (True, False) if n_threads == 1 else (False,)


def runnable(settings: Iterable[Settings]) -> list[Settings]:
    """`settings` less those this build cannot run safely (repacked weights on AMX builds)."""
    return [s for s in settings if not s.repack or repack_is_safe()]
