"""Calibration: the fastest llama.cpp settings for this model file on this machine, in budget.

Settings never change answers beyond float rounding: another n_ubatch or thread count makes
llama.cpp pick other matmul kernels and split sums differently, and flash attention sums in
another order. The documented tolerance (tests/test_tuning.py): max |logit difference| within
5% of the logits' range and KL below 0.01, so the most likely token changes only between
near-ties (measured: 0.06 on the fixture's range of ~60, up to 1.0 on SmolLM2 Q4_1's ~45).

Which settings decode an episode fastest depends on the CPU (flash attention helps on some and
costs about 30% late in an episode on others; n_ubatch trades prefill speed for memory). So
for a loaded file we measure, for each candidate, the cost per token of prefill and of decode
at several context lengths, predict the time of a typical episode (six rounds growing to the
12,288-token budget) and pick the fastest candidate whose peak memory at a full 12,288-token
context stays within the file plus `MEMORY_ALLOWANCE`. Unsafe candidates are never tried:
repacked weights only where `backend.repack_is_safe()`. With layers offloaded to a GPU
calibration does not apply (offload keeps its own defaults). Results are cached per (CPU,
llama.cpp build, file fingerprint) under the store's `tuning/`: one calibration per file and
machine, whatever thread count a caller fixes.

The parts, in import order:
    settings     `Settings` (what is chosen) and the candidates
    profile      the typical episode and its predicted time under measured costs (pure)
    result       `Measurement`, `Calibration`: the records the cache stores
    memory       the bound on a candidate's peak memory; what speculation's drafts add
    parallel     episodes at once: what a sequence adds, how many fit, what they gain
    plan         `RunPlan`: the model, context, tokens, time budget and progress of one run
    timing       prefill and decode timed at each point (the full sweep; the quick mode)
    cache        the cached calibrations (written atomically)
    calibration  `calibrate`: measure, then choose
    first_run    `tuned_settings`: cached, else a quick calibration now
    busy         the chosen settings' decode rate quiet and beside one busy program (`tune` shows it)
`edge-sql tune` (`commands/tune.py`) shows a calibration as a table.
"""

from edge_sql.runtime.tuning.busy import BusyCheck, busy_check
from edge_sql.runtime.tuning.cache import cache_key, cached_calibration, save_calibration, tuning_dir
from edge_sql.runtime.tuning.calibration import busy_note, calibrate, other_load
from edge_sql.runtime.tuning.first_run import tuned_settings
from edge_sql.runtime.tuning.memory import (
    MEMORY_ALLOWANCE,
    UNCOUNTED_BYTES,
    attention_work_bytes,
    fit_draft_max,
    mtp_context_bytes,
    speculation_bytes,
)
from edge_sql.runtime.tuning.parallel import MAX_PARALLEL, check_parallel, parallel_allowance
from edge_sql.runtime.tuning.profile import EPISODE_TOKENS, Segment, episode_profile, per_token, predict
from edge_sql.runtime.tuning.result import CACHE_VERSION, Calibration, Measurement
from edge_sql.runtime.tuning.settings import Settings, candidates, default_settings

__all__ = [
    "CACHE_VERSION",
    "EPISODE_TOKENS",
    "MAX_PARALLEL",
    "MEMORY_ALLOWANCE",
    "UNCOUNTED_BYTES",
    "BusyCheck",
    "Calibration",
    "Measurement",
    "Segment",
    "Settings",
    "attention_work_bytes",
    "busy_check",
    "busy_note",
    "cache_key",
    "cached_calibration",
    "calibrate",
    "candidates",
    "check_parallel",
    "default_settings",
    "episode_profile",
    "fit_draft_max",
    "mtp_context_bytes",
    "other_load",
    "parallel_allowance",
    "per_token",
    "predict",
    "save_calibration",
    "speculation_bytes",
    "tuned_settings",
    "tuning_dir",
]
