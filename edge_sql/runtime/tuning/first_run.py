"""`tuned_settings`: what `run` and `Agent` load a model with: the cached calibration, else a quick one now."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from edge_sql.convert.gguf_file import validate_gguf
from edge_sql.runtime.llama.backend import default_threads
from edge_sql.runtime.tuning import calibration
from edge_sql.runtime.tuning.cache import cached_calibration, save_calibration
from edge_sql.runtime.tuning.plan import Progress
from edge_sql.runtime.tuning.profile import EPISODE_TOKENS
from edge_sql.runtime.tuning.result import Calibration
from edge_sql.runtime.tuning.settings import Settings, candidates


def tuned_settings(
    model_path: str | Path,
    *,
    progress: Progress = lambda _m: None,
    folder: Path | None = None,
    n_ctx: int = EPISODE_TOKENS,
    options: dict | None = None,
    n_threads: int | None = None,
) -> tuple[Settings, str]:
    """The settings `run` uses: cached, else a quick calibration now (then cached), its
    progress in plain words.

    `options` are passed on to `calibrate` (candidates, points...). `n_threads` (a thread
    count the caller fixes) is one of the candidates when this calibrates, and the caller gets
    the chosen settings at that count either way: one calibration per file and machine (the
    memory bound does not depend on the thread count).

    Returns (settings, how): how is "cached" or "calibrated".
    """
    found, how = cached_calibration(model_path, folder), "cached"
    if found is None:
        found = _calibrate_now(Path(model_path), progress, folder, n_ctx, dict(options or {}), n_threads)
        how = "calibrated"
    return (replace(found.chosen, n_threads=n_threads) if n_threads else found.chosen), how


def _calibrate_now(
    model_path: Path, progress: Progress, folder: Path | None, n_ctx: int, options: dict, n_threads: int | None
) -> Calibration:
    """A quick calibration now, saved; its progress and result in plain words."""
    validate_gguf(model_path)  # a bad file is reported as such, not as a calibration that failed
    busy = calibration.is_busy(calibration.other_load(0), default_threads())
    progress(
        f"first run of {model_path.name} on this machine: a quick calibration measures which llama.cpp "
        f"settings run it fastest here, about {calibration.QUICK_SECONDS:.0f} s"
        + (" (longer: other processes keep the CPUs busy)" if busy else "")
        + ", once per file (`--no-tune` skips it; `edge-sql tune` runs the full sweep)"
    )
    if n_threads and "settings" not in options:
        options["settings"] = candidates(n_threads)
    found = calibration.calibrate(
        model_path, progress=progress, n_ctx=min(n_ctx, EPISODE_TOKENS), plain=True, **options
    )
    save_calibration(found, folder)
    progress(f"calibrated in {found.seconds:.0f} s; later runs of this file reuse it")
    if found.note:
        progress(f"note: {found.note}")
    return found
