"""`calibrate`: measure the candidates on one model file and choose the fastest that fits.

The quick calibration (the first `run` of a file) has a budget of `QUICK_SECONDS` from start
to result. What a choice cannot do without is measured whatever the budget: each candidate's
memory bound (a context created, nothing evaluated), one reference per flash-attention value
at every point, and last the MTP drafter's memory (time is kept for it from the start; its
model load is the one `run` then reuses). Everything else starts only if its estimated cost
(from what the same kind of step took so far) fits in the time left: the references of the
other thread counts and of repacked weights, the second round of decodes, the other
candidates' prefill chunks. On a busy machine the part measured whatever the budget can
itself take longer than the budget; the note then says the machine was busy.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from edge_sql.convert.gguf_file import validate_gguf
from edge_sql.runtime.llama.backend import default_threads, init_backend
from edge_sql.runtime.session import Session
from edge_sql.runtime.tuning.cache import cache_key
from edge_sql.runtime.tuning.memory import (
    MEMORY_ALLOWANCE,
    fit_draft_max,
    has_mtp_head,
    memory_bound,
    model_load_bytes,
    mtp_context_bytes,
    process_rss_bytes,
)
from edge_sql.runtime.tuning.parallel import (
    ParallelFit,
    fit_parallel,
    measure_rates,
    parallel_allowance,
)
from edge_sql.runtime.tuning.plan import Budget, Inputs, Progress, Reporter, RunPlan
from edge_sql.runtime.tuning.profile import EPISODE_TOKENS, Segment, episode_profile, predict
from edge_sql.runtime.tuning.result import Calibration, Measurement
from edge_sql.runtime.tuning.settings import Settings, candidates, runnable
from edge_sql.runtime.tuning.timing import pool_decode, time_quick, time_sweep

QUICK_POINTS = (1024, 8192)  # stretched states: no prefill to reach them
QUICK_SECONDS = 50.0  # the quick calibration's budget, from start to result
FULL_POINTS = (512, 4096, 8192, 11776)


def calibrate(
    model_path: str | Path,
    *,
    full: bool = False,
    settings: Sequence[Settings] | None = None,
    points: Sequence[int] | None = None,
    n_ctx: int = EPISODE_TOKENS,
    prefill_chunk: int | None = None,
    decode_tokens: int | None = None,
    memory_allowance: int = MEMORY_ALLOWANCE,
    parallel_memory: int | None = None,
    process_bytes: int | None = None,
    profile: Sequence[Segment] | None = None,
    progress: Progress = lambda _m: None,
    plain: bool = False,
) -> Calibration:
    """Measure `settings` (default: `candidates()`) on `model_path` and choose one.

    `process_bytes` is the memory the process holds besides llama.cpp's context buffers
    (default: its RSS now, before anything is loaded, plus what loading the model adds besides
    the mapped file); it counts against `memory_allowance` like llama.cpp's buffers.
    When no candidate fits, the one with the smallest bound is chosen and `note` says so.
    `parallel_memory`: the budget for several episodes at once (default `parallel_allowance()`).
    `plain` words the progress for a first run instead of naming llama.cpp's settings.
    """
    init_backend()
    budget = Budget(None if full else QUICK_SECONDS)
    model_path = Path(model_path)
    validate_gguf(model_path)  # a file llama.cpp cannot load is reported before any progress line
    settings = runnable(settings or candidates())
    if not settings:
        raise ValueError("no candidate settings to measure (repacked weights are unsafe with this build)")
    chunk = prefill_chunk or (512 if full else 256)  # episode prefills are tool results of hundreds of tokens
    n_decode = decode_tokens or (16 if full else 8)
    points = sorted(points or (FULL_POINTS if full else QUICK_POINTS))
    points = [p for p in points if p + chunk + n_decode + 1 <= n_ctx] or [max(1, n_ctx - chunk - n_decode - 1)]
    tick = time.perf_counter()
    baseline = process_rss_bytes() + model_load_bytes(model_path) if process_bytes is None else process_bytes
    load_s = time.perf_counter() - tick
    plan = RunPlan(
        model_path,
        n_ctx,
        points,
        Inputs(np.random.default_rng(0), chunk, n_decode),
        baseline,
        budget,
        Reporter(progress, plain),
    )
    profile = list(profile or episode_profile(min(EPISODE_TOKENS, n_ctx)))

    measured: dict[Settings, Measurement] = {}
    bounds: dict[Settings, Measurement] = {}
    context_s: dict[Settings, float] = {}
    timed = settings
    if not full:  # quick: a candidate over the memory budget is not timed (nor its context filled)
        plan.report.say(f"calibrating {model_path.name}: measuring the memory of {len(settings)} candidate settings")
        bounds, context_s = _bounds(plan, settings)
        measured = {s: m for s, m in bounds.items() if m.memory_bytes > memory_allowance}
        timed = [s for s in settings if s not in measured]
        if not timed:  # none fits: the smallest bound will be chosen, so time that one only
            smallest = min(measured.values(), key=lambda m: m.memory_bytes).settings
            del measured[smallest]
            timed = [smallest]
        if has_mtp_head(model_path):  # kept for the last step: a model load and a context
            budget.reserve_s = load_s + float(np.median(list(context_s.values())))
    over = len(settings) - len(timed)
    plan.n_timed = len(timed)
    plan.report.detail(
        f"calibrating {model_path.name}: {len(timed)} candidates"
        + (f" ({over} more over the memory budget, not timed)" if over else "")
    )
    measured.update(time_sweep(plan, timed) if full else time_quick(plan, timed, bounds, context_s))
    pool_decode(measured)  # quick: decode timed once per decode key (prefill scaled); full: their median
    measurements = [measured.get(s) or bounds[s] for s in settings]  # quick: some left untimed
    chosen, note = _choose(measurements, profile, memory_allowance)
    chosen, mtp = _fit_speculation(plan, measured[chosen], memory_allowance)
    fit = _fit_parallel(plan, chosen, measured[chosen], parallel_memory)
    chosen = replace(chosen, parallel=fit.n, parallel_max=fit.n_max, sequence_bytes=fit.sequence_bytes)
    load = other_load(max(s.n_threads for s in settings))
    note = "; ".join(part for part in (note, busy_note(load, default_threads())) if part)
    return Calibration(
        key=cache_key(model_path),
        model_path=str(model_path),
        mode="full" if full else "quick",
        chosen=chosen,
        measurements=measurements,
        memory_allowance=memory_allowance,
        seconds=round(budget.elapsed(), 2),
        note=note,
        other_load=load,
        mtp_bytes=mtp,
        parallel_allowance=fit.allowance,
        parallel_speedup=fit.speedup,
        parallel_rates=[list(r) for r in fit.rates],
    )


def _bounds(plan: RunPlan, settings: Sequence[Settings]) -> tuple[dict[Settings, Measurement], dict[Settings, float]]:
    """Each candidate's memory bound (a context created, nothing evaluated), and what creating
    its context took (a model load included where the candidate needed one)."""
    bounds, seconds = {}, {}
    for candidate in settings:
        tick = time.perf_counter()
        with Session(
            plan.model_path, candidate.session_options(n_ctx=plan.n_ctx, n_gpu_layers=0, adapt_threads=False)
        ) as session:
            bounds[candidate] = memory_bound(session, candidate, plan.n_ctx, plan.baseline)
        seconds[candidate] = time.perf_counter() - tick
    return bounds, seconds


def _fit_speculation(plan: RunPlan, chosen: Measurement, memory_allowance: int) -> tuple[Settings, int]:
    """The chosen settings with the most drafts that fit what they leave of the budget, without
    and with the MTP drafter's context (measured now, on the model loaded with its head, which
    `run` then reuses); that context's bytes."""
    plan.budget.reserve_s = 0.0  # what was kept for this step
    mtp = mtp_context_bytes(plan.model_path, chosen.settings, plan.n_ctx)
    fitted = replace(
        chosen.settings,
        draft_max=fit_draft_max(chosen, memory_allowance),
        draft_max_mtp=fit_draft_max(chosen, memory_allowance - mtp),
    )
    return fitted, mtp


def _fit_parallel(plan: RunPlan, chosen: Settings, measured: Measurement, allowance: int | None) -> ParallelFit:
    """The most episodes at once that fit the budget for several with the chosen settings, their
    measured speeds, and the default N they give (tuning/parallel.py)."""
    allowance = parallel_allowance() if allowance is None else allowance
    n_max, per_sequence = fit_parallel(plan.model_path, chosen, plan.n_ctx, measured.memory_bytes, allowance)
    if n_max > 1:
        plan.report.detail(f"measuring up to {n_max} episodes at once against one")
    return ParallelFit(n_max, per_sequence, allowance, measure_rates(plan.model_path, chosen, n_max))


def _choose(
    measurements: Sequence[Measurement], profile: Sequence[Segment], memory_allowance: int
) -> tuple[Settings, str]:
    """Predict each timed candidate's episode and choose the fastest that fits (the smallest
    bound, with a note, when none does)."""
    for m in measurements:
        m.episode_s = predict(m, profile) if m.points else math.inf
        m.fits = m.memory_bytes <= memory_allowance
    fitting = [m for m in measurements if m.fits]
    if fitting:
        return min(fitting, key=lambda m: (m.episode_s, m.memory_bytes)).settings, ""
    chosen = min(measurements, key=lambda m: (m.memory_bytes, m.episode_s)).settings
    return chosen, (
        f"no candidate fits {memory_allowance / 2**20:.0f} MiB beyond the file: chose the smallest memory bound"
    )


def other_load(own_threads: int) -> float | None:
    """How many runnable threads other processes had, on average over the last minute: the
    1-minute load average less this calibration's own threads (None where the OS has none)."""
    try:
        return max(0.0, os.getloadavg()[0] - own_threads)
    except (AttributeError, OSError):
        return None


def is_busy(load: float | None, cpus: int) -> bool:
    """Whether other processes keep more than half the CPUs busy (`other_load`)."""
    return load is not None and load > cpus / 2


def busy_note(load: float | None, cpus: int) -> str:
    """A warning when other processes kept more than half the CPUs busy while measuring.

    llama.cpp's threads wait for each other at every step, so sharing the cores with other work
    slows them far more than proportionally (measured here: 2B decode at 0.3 tok/s instead of
    about 20 with two other llama.cpp processes on 2 cores); the choice is then noise.
    """
    if not is_busy(load, cpus):
        return ""
    return (
        f"the machine was busy while measuring (other processes' load {load:.1f} on {cpus} CPUs): "
        "the speeds are unreliable; run `edge-sql tune` again when it is quiet"
    )
