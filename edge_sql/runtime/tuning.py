"""Calibration: the fastest llama.cpp settings for this model file on this machine, in budget.

Settings never change answers beyond float rounding: another n_ubatch or thread count makes
llama.cpp pick other matmul kernels and split sums differently, and flash attention sums in
another order. The documented tolerance (tests/test_tuning.py): max |logit difference| within
5% of the logits' range and KL below 0.01, so the most likely token changes only between
near-ties (measured: 0.06 on the fixture's range of ~60, up to 1.0 on SmolLM2 Q4_1's ~45).

Which settings decode an episode fastest depends on the CPU (flash attention helps on some and
costs about 30% late in an episode on others; n_ubatch trades prefill speed for memory). So
for a loaded file we measure, for each candidate, the cost per token of prefill and of decode
at several context lengths, predict the time of a typical episode (`episode_profile`: six
rounds growing to the 12,288-token budget) and pick the fastest candidate whose peak memory at
a full 12,288-token context stays within the file plus `MEMORY_ALLOWANCE`.

How it stays short: no candidate prefills the context itself. The full sweep (`edge-sql
tune`) fills it once per flash-attention value with random tokens (speed does not depend on the
values) and saves llama.cpp's sequence state at each measuring point; every candidate restores
those states and times a prefill chunk (best of two) and a few decodes (median) there. The quick
calibration (the first `run` of a file) does not even fill: it evaluates 64 real tokens and
stretches their state to 1,024 and 8,192 cells (`runtime/stretched_state.py`: a step's cost
depends on how many cells attention reads, not on what they hold), times one reference per
decode key at both points with interleaved decodes, and the other n_ubatch values by one chunk
each while its minute lasts (`_time_quick`). A single-token decode does not depend on n_ubatch,
so candidates that differ only in n_ubatch share their decode timings: noise in decode never
picks the n_ubatch. Beyond the last point costs are extrapolated linearly (attention cost grows
linearly with the context).

Memory is estimated, not sampled at a full context: llama.cpp logs every buffer it allocates
for the context (KV cells for the whole n_ctx, recurrent state, the compute buffer reserved for
the worst case of n_ubatch tokens against a full context; repacked weight copies count only
where the file mapping could not be released, see `runtime/mapping.py`); their sum, plus
ggml's work copy of the attention weights when flash attention is off
(`attention_work_bytes`), plus the process's memory before loading, plus what loading the
model allocates besides the mapped file (vocabulary, metadata: measured), plus the file, plus
`UNCOUNTED_BYTES` (what sampling showed the rest to miss) is the estimate of the peak RSS.
Not in it: what the caller allocates later (llguidance's vocabulary view, the saved prompt
state, Python objects of an episode).

The quick calibration (the first `run` of a file) times only the candidates whose bound is
within the budget: the others cannot be chosen (on the 2B Q4_K_M all flash-attention-off
candidates but ubatch 64 are over it). Speculation's memory is fitted the same way: each draft of a verify
batch keeps a snapshot of the recurrent state (llama.cpp's `n_rs_seq`) and a logits row, so the
chosen settings carry the most drafts (`draft_max`, at most 8) that the budget still holds.

Unsafe candidates are never tried: repacked weights only where `backend.repack_is_safe()`.
With layers offloaded to a GPU calibration does not apply (offload keeps its own defaults).
Results are cached per (CPU, llama.cpp build, file fingerprint) under the store's `tuning/`.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from edge_sql.convert.gguf_file import validate_gguf
from edge_sql.runtime.backend import default_threads, init_backend, repack_is_safe
from edge_sql.runtime.identity import cpu_model, file_fingerprint, llama_build, physical_cores
from edge_sql.runtime.options import DEFAULT_DRAFT_MAX, DEFAULT_UBATCH, SessionOptions, SpeculateMode
from edge_sql.runtime.prefix_state import StateSnapshot
from edge_sql.runtime.session import Session
from edge_sql.runtime.stretched_state import stretch_snapshot

EPISODE_TOKENS = 12288
MEMORY_ALLOWANCE = 400 * 1024 * 1024
CACHE_VERSION = 4  # 2: the bound counts ggml's attention work buffer; other_load. 3: draft_max in budget.
# 4: the quick mode measures at stretched 1,024/8,192-token contexts (its earlier choices could be 16% slower)
# What each draft token of a verify batch adds besides a recurrent-state snapshot, per vocabulary
# entry: its logits row (4 bytes) and the graph's output for it (measured on the 2B shape: the
# compute buffer grows 19.0 MiB from draft_max 0 to 16, 5.0 bytes x 248,320 per draft)
DRAFT_ROW_BYTES_PER_TOKEN = 5
# What the bound misses at a full context, measured on the 2B shape (sampled peak RSS minus the
# bound, benchmarks/results/tune-*.md): 3 MiB (Q4_K_M, flash attention on and off) to 7 MiB (BF16,
# off): allocator slack and small allocations llama.cpp's buffer log leaves out
UNCOUNTED_BYTES = 8 * 1024 * 1024
QUICK_POINTS = (1024, 8192)  # stretched states (`_stretched_states`): no prefill to reach them
STRETCH_BASE = 64  # real tokens behind a stretched state
QUICK_SECONDS = 50.0  # the quick calibration stops timing more candidates past this (`_time_quick`)
FULL_POINTS = (512, 4096, 8192, 11776)

Progress = Callable[[str], None]


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

    @property
    def label(self) -> str:
        fa = "auto" if self.flash_attn is None else ("on" if self.flash_attn else "off")
        return f"flash_attn={fa} n_ubatch={self.n_ubatch} n_threads={self.n_threads} repack={'on' if self.repack else 'off'}"

    def session_options(self, speculate: SpeculateMode = "off", **options: Any) -> SessionOptions:
        """`Session` options, speculation within the memory budget: "mtp" and "auto" with the
        drafts that fit beside the MTP drafter's context; "auto" drafts by lookup alone where
        that context does not fit; off where no draft fits. `options`: the fields calibration
        does not choose (n_ctx, n_gpu_layers, ...)."""
        speculate, draft_max = self.speculation(speculate)
        return SessionOptions(flash_attn=self.flash_attn, n_ubatch=self.n_ubatch, n_threads=self.n_threads,
                              repack=self.repack, speculate=speculate, draft_max=draft_max or DEFAULT_DRAFT_MAX,
                              **options)

    def speculation(self, speculate: SpeculateMode) -> tuple[SpeculateMode, int]:
        """The speculation mode and draft_max that `speculate` becomes within the budget."""
        if speculate in ("mtp", "auto") and self.draft_max_mtp:
            return speculate, self.draft_max_mtp
        if speculate in ("lookup", "auto") and self.draft_max:
            return "lookup", self.draft_max
        return "off", 0


def default_settings() -> Settings:
    """What runs without calibration (`--no-tune`): llama.cpp's flash-attention choice, ubatch 256, all CPUs."""
    return Settings(flash_attn=None, n_ubatch=DEFAULT_UBATCH, n_threads=default_threads())


def candidates() -> list[Settings]:
    """The settings to try: flash attention on/off x ubatch 64/128/256/512 (and physical cores,
    repack where safe). Quick and full differ in how they are measured, not in what: on the 2B
    Q4_K_M only ubatch 64 keeps flash attention off (the fastest here) within the budget."""
    threads = sorted({default_threads(), physical_cores()}, reverse=True)
    ubatches = (64, 128, 256, 512)
    found = [Settings(fa, ub, threads[0]) for fa in (True, False) for ub in ubatches]
    found += [Settings(fa, DEFAULT_UBATCH, n) for n in threads[1:] for fa in (True, False)]
    if repack_is_safe():
        found += [Settings(fa, DEFAULT_UBATCH, threads[0], repack=True) for fa in (True, False)]
    return found


@dataclass(frozen=True)
class Segment:
    """Part of an episode: `prefill` prompt tokens then `decode` sampled ones, from `context`."""

    context: int
    prefill: int
    decode: int


def episode_profile(budget: int = EPISODE_TOKENS, rounds: int = 6, prompt: int = 700, decode_per_round: int = 640,
                    final: int = 700) -> list[Segment]:
    """A typical episode under the protocol: the prompt, then per round the model's turn (think
    and calls, ~640 tokens) and the results turn, growing to `budget`; then the final answer."""
    results = max(0, (budget - prompt - final) // rounds - decode_per_round)
    segments, context = [Segment(0, prompt, 0)], prompt
    for _ in range(rounds):
        segments.append(Segment(context, results if segments[-1].decode else 0, decode_per_round))
        context += segments[-1].prefill + decode_per_round
    segments.append(Segment(context, results, final))
    return segments


@dataclass
class Measurement:
    """One candidate's measured costs (seconds per token at each context length) and memory bound."""

    settings: Settings
    points: list[int]
    prefill_s: list[float]
    decode_s: list[float]
    memory_bytes: int          # bound on peak RSS beyond the model file, at n_ctx
    episode_s: float = 0.0     # predicted time of `episode_profile()`
    fits: bool = True
    state_bytes: int = 0       # llama.cpp's recurrent state of one sequence (0: attention only)
    n_vocab: int = 0

    def to_json(self) -> dict:
        return {**asdict(self), "settings": asdict(self.settings)}

    @classmethod
    def from_json(cls, data: dict) -> Measurement:
        return cls(**{**data, "settings": Settings(**data["settings"])})


@dataclass
class Calibration:
    """The result: what was measured, under which budget, and the chosen settings."""

    key: str
    model_path: str
    mode: str                    # "quick" or "full"
    chosen: Settings
    measurements: list[Measurement]
    memory_allowance: int
    seconds: float
    machine: str = field(default_factory=cpu_model)
    build: str = field(default_factory=llama_build)
    note: str = ""
    threads: int | None = None   # the thread count the caller fixed (None: candidates chose)
    other_load: float | None = None  # run-queue length of other processes when it ended (None: unknown)
    mtp_bytes: int = 0  # the MTP drafter's own context (files with an MTP head): counted before fitting draft_max

    def best(self) -> Measurement:
        """The fastest measured candidate regardless of memory."""
        return min(self.measurements, key=lambda m: m.episode_s)

    def chosen_measurement(self) -> Measurement:
        return next(m for m in self.measurements if m.settings == self.chosen)

    def to_json(self) -> dict:
        data = asdict(self)
        data["chosen"] = asdict(self.chosen)
        data["measurements"] = [m.to_json() for m in self.measurements]
        data["version"] = CACHE_VERSION
        return data

    @classmethod
    def from_json(cls, data: dict) -> Calibration:
        data = dict(data)
        if data.pop("version", None) != CACHE_VERSION:
            raise ValueError("another cache version")
        data["chosen"] = Settings(**data["chosen"])
        data["measurements"] = [Measurement.from_json(m) for m in data["measurements"]]
        return cls(**data)

    def table(self) -> str:
        """The sweep as a text table, fastest first; `*` marks the chosen setting."""
        points = next((m.points for m in self.measurements if m.points), [])  # candidates over budget: untimed
        lines = [f"{'':2}{'settings':<52} {'episode s':>9} {'memory MiB':>10}  "
                 + "  ".join(f"{'@' + str(p):>13}" for p in points),
                 f"{'':2}{'':<52} {'':>9} {'':>10}  " + "  ".join(f"{'prefill/decode':>13}" for _ in points)]
        for m in sorted(self.measurements, key=lambda m: m.episode_s):
            mark = "* " if m.settings == self.chosen else "  "
            speeds = "  ".join(f"{1 / p:6.0f}/{1 / d:6.1f}" for p, d in zip(m.prefill_s, m.decode_s))
            over = "" if m.fits else " (over)"
            if not m.points:
                over = "(over: not timed)" if not m.fits else "(not timed: the quick calibration's time was up)"
            episode = f"{m.episode_s:9.1f}" if m.points else f"{'-':>9}"
            lines.append(f"{mark}{m.settings.label:<52} {episode} {m.memory_bytes / 2**20:10.0f}  {speeds}{over}")
        lines.append(f"(tok/s at each context length; memory: bound beyond the file at a {EPISODE_TOKENS}-token "
                     f"context, budget {self.memory_allowance / 2**20:.0f} MiB)")
        chosen = self.chosen_measurement()
        per_draft = speculation_bytes(1, chosen.state_bytes, chosen.n_vocab) / 2**20
        mtp = (f"; with the MTP drafter's context ({self.mtp_bytes / 2**20:.0f} MiB): "
               + (f"draft_max {self.chosen.draft_max_mtp}" if self.chosen.draft_max_mtp else "none, auto drafts by lookup alone")
               if self.mtp_bytes else "")
        lines.append(f"(speculation within the budget, {per_draft:.1f} MiB per draft: "
                     + (f"draft_max {self.chosen.draft_max}" if self.chosen.draft_max else "no draft fits, --speculate stays off")
                     + f"{mtp})")
        return "\n".join(lines)


def per_token(points: Sequence[int], costs: Sequence[float], context: float) -> float:
    """Cost per token at `context`: piecewise linear through the points, extrapolated linearly
    past either end (past the last never below its cost, anywhere never below half the
    cheapest: noise can make a longer context look cheaper)."""
    if len(points) == 1:
        return costs[0]
    i = 1
    while i < len(points) - 1 and context > points[i]:
        i += 1
    x0, x1, y0, y1 = points[i - 1], points[i], costs[i - 1], costs[i]
    value = y0 + (y1 - y0) * (context - x0) / (x1 - x0)
    if context > points[-1]:  # a longer context never costs less than the last point measured
        value = max(value, costs[-1])
    return max(value, 0.5 * min(costs))


def predict(measurement: Measurement, profile: Sequence[Segment]) -> float:
    """Seconds for the episode profile under one candidate's measured costs."""
    total = 0.0
    for seg in profile:
        if seg.prefill:
            total += seg.prefill * per_token(measurement.points, measurement.prefill_s, seg.context + seg.prefill / 2)
        if seg.decode:
            start = seg.context + seg.prefill
            total += seg.decode * per_token(measurement.points, measurement.decode_s, start + seg.decode / 2)
    return total


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
    import llama_cpp

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
    process_bytes: int | None = None,
    profile: Sequence[Segment] | None = None,
    threads: int | None = None,
    progress: Progress = lambda _m: None,
) -> Calibration:
    """Measure `settings` (default: `candidates()`) on `model_path` and choose one.

    `process_bytes` is the memory the process holds besides llama.cpp's context buffers
    (default: its RSS now, before anything is loaded, plus what loading the model adds besides
    the mapped file); it counts against `memory_allowance` like llama.cpp's buffers.
    When no candidate fits, the one with the smallest bound is chosen and `note` says so.
    """
    init_backend()
    started = time.perf_counter()
    model_path = Path(model_path)
    validate_gguf(model_path)  # a file llama.cpp cannot load is reported before any progress line
    settings = [s for s in (settings or candidates()) if not s.repack or repack_is_safe()]
    if not settings:
        raise ValueError("no candidate settings to measure (repacked weights are unsafe with this build)")
    chunk = prefill_chunk or (512 if full else 256)  # episode prefills are tool results of hundreds of tokens
    n_decode = decode_tokens or (16 if full else 8)
    points = sorted(points or (FULL_POINTS if full else QUICK_POINTS))
    points = [p for p in points if p + chunk + n_decode + 1 <= n_ctx] or [max(1, n_ctx - chunk - n_decode - 1)]
    baseline = process_rss_bytes() + model_load_bytes(model_path) if process_bytes is None else process_bytes
    profile = list(profile or episode_profile(min(EPISODE_TOKENS, n_ctx)))

    inputs = _Inputs(np.random.default_rng(0), chunk, n_decode)
    measured: dict[Settings, Measurement] = {}
    bounds: dict[Settings, Measurement] = {}
    timed = settings
    if not full:  # quick: a candidate over the memory budget is not timed (nor its context filled)
        for candidate in settings:
            with Session(model_path, candidate.session_options(n_ctx=n_ctx, n_gpu_layers=0)) as session:
                bounds[candidate] = _memory_bound(session, candidate, n_ctx, baseline)
            if bounds[candidate].memory_bytes > memory_allowance:
                measured[candidate] = bounds[candidate]
        timed = [s for s in settings if s not in measured]
        if not timed:  # none fits: the smallest bound will be chosen, so time that one only
            smallest = min(measured.values(), key=lambda m: m.memory_bytes).settings
            del measured[smallest]
            timed = [smallest]
    over = len(settings) - len(timed)
    progress(f"calibrating {model_path.name}: {len(timed)} candidates"
             + (f" ({over} more over the memory budget, not timed)" if over else ""))
    timing = _time_sweep if full else _time_quick
    measured.update(timing(model_path, timed, points, n_ctx, inputs, baseline, bounds, progress, started))
    _pool_decode(measured)  # quick: decode timed once per decode key (prefill scaled); full: their median
    measurements = [measured.get(s) or bounds[s] for s in settings]  # quick: some left untimed

    for m in measurements:
        m.episode_s = predict(m, profile) if m.points else math.inf
        m.fits = m.memory_bytes <= memory_allowance
    fitting = [m for m in measurements if m.fits]
    note = ""
    if fitting:
        chosen = min(fitting, key=lambda m: (m.episode_s, m.memory_bytes)).settings
    else:
        chosen = min(measurements, key=lambda m: (m.memory_bytes, m.episode_s)).settings
        note = (f"no candidate fits {memory_allowance / 2**20:.0f} MiB beyond the file: chose the smallest "
                "memory bound")
    mtp = mtp_context_bytes(model_path, chosen, n_ctx)
    chosen = replace(chosen, draft_max=fit_draft_max(measured[chosen], memory_allowance),
                     draft_max_mtp=fit_draft_max(measured[chosen], memory_allowance - mtp))
    load = other_load(max(s.n_threads for s in settings))
    note = "; ".join(part for part in (note, busy_note(load, default_threads())) if part)
    return Calibration(
        key=cache_key(model_path, threads), model_path=str(model_path), mode="full" if full else "quick",
        chosen=chosen, threads=threads,
        measurements=measurements, memory_allowance=memory_allowance,
        seconds=round(time.perf_counter() - started, 2), note=note, other_load=load, mtp_bytes=mtp,
    )


def speculation_bytes(draft_max: int, state_bytes: int, n_vocab: int) -> int:
    """What speculation with `draft_max` adds to a session: llama.cpp keeps `draft_max`
    snapshots of the recurrent state (`n_rs_seq`) and logits for `draft_max` more positions."""
    return draft_max * (state_bytes + DRAFT_ROW_BYTES_PER_TOKEN * n_vocab)


def fit_draft_max(measurement: Measurement, memory_allowance: int, limit: int = DEFAULT_DRAFT_MAX) -> int:
    """The most drafts per verify batch that keep `measurement`'s bound within the budget
    (0 when not even one fits: speculation then stays off)."""
    room = memory_allowance - measurement.memory_bytes
    return next((k for k in range(limit, 0, -1)
                 if speculation_bytes(k, measurement.state_bytes, measurement.n_vocab) <= room), 0)


def mtp_context_bytes(model_path: Path, settings: Settings, n_ctx: int) -> int:
    """What the MTP drafter's context allocates (its layer's KV for n_ctx, its compute buffer)
    with `settings`, for a file with an MTP head; 0 without one. Speculation with "mtp" or "auto"
    adds it, so draft_max is fitted to what is left after it."""
    if not validate_gguf(model_path).mtp_layers:
        return 0
    fitted = replace(settings, draft_max=1)
    with Session(model_path, fitted.session_options("mtp", n_ctx=n_ctx, n_gpu_layers=0)) as session:
        return sum(size for kind, size in session.info.buffers.items() if kind.startswith("MTP "))


def attention_work_bytes(n_ctx: int, settings: Settings, n_head: int) -> int:
    """ggml's CPU work buffer at a full context, which llama.cpp's buffer log leaves out.

    Without flash attention the weighted sum over V multiplies the (transposed, F16) V cache by
    the F32 attention weights, which ggml first converts to F16 in its work buffer:
    n_ctx x n_ubatch x n_head x 2 bytes (24 MiB on the 2B shape at n_ubatch 128). Measured
    (benchmarks/results/tune-Q4_K_M.md): without it the bound was 37 MiB under the sampled peak
    with flash attention off and within 4 MiB with it on. Flash attention (on, or auto on CPU)
    works in tiles and needs no such copy.
    """
    return 0 if settings.flash_attn is not False else n_ctx * settings.n_ubatch * n_head * 2


def other_load(own_threads: int) -> float | None:
    """How many runnable threads other processes had, on average over the last minute: the
    1-minute load average less this calibration's own threads (None where the OS has none)."""
    try:
        return max(0.0, os.getloadavg()[0] - own_threads)
    except (AttributeError, OSError):
        return None


def busy_note(load: float | None, cpus: int) -> str:
    """A warning when other processes kept more than half the CPUs busy while measuring.

    llama.cpp's threads wait for each other at every step, so sharing the cores with other work
    slows them far more than proportionally (measured here: 2B decode at 0.3 tok/s instead of
    about 20 with two other llama.cpp processes on 2 cores); the choice is then noise.
    """
    if load is None or load <= cpus / 2:
        return ""
    return (f"the machine was busy while measuring (other processes' load {load:.1f} on {cpus} CPUs): "
            "the speeds are unreliable; run `edge-sql tune` again when it is quiet")


def _filled_states(base: Session, points: Sequence[int], rng: np.random.Generator,
                   pool: np.ndarray) -> dict[int, StateSnapshot]:
    """The context filled for real (random tokens) to each point, a snapshot at each."""
    base.reset()
    states, filled = {}, 0
    for point in points:
        base.eval(rng.choice(pool, point - filled).tolist())
        filled = point
        states[point] = base.snapshot()
    return states


def _stretched_states(base: Session, points: Sequence[int], rng: np.random.Generator,
                      pool: np.ndarray) -> dict[int, StateSnapshot] | None:
    """The quick mode's contexts: `STRETCH_BASE` real tokens, their state stretched to each
    point (`runtime/stretched_state.py`: a step's cost depends on how many cells attention
    reads, not on what they hold), so measuring at 8,192 tokens costs no 8,192-token prefill.
    None where llama.cpp's state is not in the format stretching knows, or it refuses it."""
    base.reset()
    base.eval(rng.choice(pool, min(STRETCH_BASE, points[0])).tolist())
    short = base.snapshot()
    states = {point: stretch_snapshot(short, point) for point in points}
    if any(state is None for state in states.values()) or not base.restore(states[points[-1]]):
        return None
    base.eval(rng.choice(pool, 1).tolist())  # llama.cpp accepts a step after the longest
    return states


def _decode_key(settings: Settings) -> tuple:
    """What a single-token decode's speed depends on: not n_ubatch (one token is one ubatch)."""
    return settings.flash_attn, settings.n_threads, settings.repack


def _pool_decode(measurements: dict[Settings, Measurement]) -> None:
    """Give candidates that decode alike (same `_decode_key`) the median of their decode
    timings: differences between them are noise, and noise must not choose the n_ubatch."""
    groups: dict[tuple, list[Measurement]] = {}
    for m in measurements.values():
        if m.points:
            groups.setdefault(_decode_key(m.settings), []).append(m)
    for group in groups.values():
        timed = [m.decode_s for m in group if m.decode_s]
        pooled = [float(np.median(column)) for column in zip(*timed)]
        for m in group:
            m.decode_s = list(pooled)


@dataclass
class _Inputs:
    """The random tokens every candidate is timed with (drawn once the vocabulary is known)."""

    rng: np.random.Generator
    chunk_size: int
    n_decode: int
    chunk: list[int] = field(default_factory=list)
    decode: list[int] = field(default_factory=list)
    pool: np.ndarray | None = None

    def draw(self, n_vocab: int) -> None:
        if self.pool is None:
            self.pool = np.arange(min(n_vocab, 100_000))  # ordinary text tokens: no control tokens
            self.chunk = self.rng.choice(self.pool, self.chunk_size).tolist()
            self.decode = self.rng.choice(self.pool, self.n_decode + 1).tolist()


def _contexts(model_path: Path, flash_attn: bool | None, points: Sequence[int], n_ctx: int, inputs: _Inputs,
              *, stretch: bool) -> dict[int, StateSnapshot]:
    """A snapshot at each point, filled for real or (`stretch`) stretched from a short real one.
    Per flash-attention value: llama.cpp lays the V cache out transposed without flash
    attention, and refuses a state saved with the other layout."""
    with Session(model_path, n_ctx=n_ctx, n_threads=default_threads(), n_gpu_layers=0, flash_attn=flash_attn) as base:
        inputs.draw(base.n_vocab)
        states = _stretched_states(base, points, inputs.rng, inputs.pool) if stretch else None
        return states if states is not None else _filled_states(base, points, inputs.rng, inputs.pool)


def _fa_label(settings: Settings) -> str:
    return settings.label.split()[0]


def _restore(session: Session, state: StateSnapshot) -> None:
    if not session.restore(state):
        raise RuntimeError(f"calibration could not restore its {len(state.tokens)}-token state")


def _time_at(session: Session, state: StateSnapshot, inputs: _Inputs, *, prefill_runs: int,
             decode: Sequence[int]) -> tuple[float, list[float]]:
    """At one filled state: prefill seconds per token (the fastest of `prefill_runs` chunks:
    other processes only ever add time; inf for none) and the seconds of each `decode` step."""
    best = math.inf
    for _ in range(prefill_runs):
        _restore(session, state)
        tick = time.perf_counter()
        session.eval(inputs.chunk)
        best = min(best, (time.perf_counter() - tick) / len(inputs.chunk))
    _restore(session, state)
    ticks = []
    for token in decode:
        tick = time.perf_counter()
        session.eval([token])
        ticks.append(time.perf_counter() - tick)
    return best, ticks


def _warmed(model_path: Path, candidate: Settings, n_ctx: int, state: StateSnapshot, inputs: _Inputs) -> Session:
    """A session for `candidate`, its first-touch costs paid (a step at `state`)."""
    session = Session(model_path, candidate.session_options(n_ctx=n_ctx, n_gpu_layers=0))
    _restore(session, state)
    session.eval(inputs.decode[:1])
    return session


def _time_sweep(model_path: Path, timed: Sequence[Settings], points: Sequence[int], n_ctx: int, inputs: _Inputs,
                baseline: int, bounds: dict[Settings, Measurement], progress: Progress,
                started: float) -> dict[Settings, Measurement]:
    """`edge-sql tune`: contexts filled for real; every candidate at every point, prefill the
    best of two chunks, decode the median of its own steps (pooled afterwards)."""
    measured = {}
    for flash_attn in dict.fromkeys(s.flash_attn for s in timed):
        group = [s for s in timed if s.flash_attn == flash_attn]
        progress(f"calibrating {model_path.name}: filling a {points[-1]}-token context ({_fa_label(group[0])}) ...")
        states = _contexts(model_path, flash_attn, points, n_ctx, inputs, stretch=False)
        for candidate in group:
            progress(f"calibrating {model_path.name}: {timed.index(candidate) + 1}/{len(timed)} {candidate.label}")
            with _warmed(model_path, candidate, n_ctx, states[points[0]], inputs) as session:
                timings = [_time_at(session, states[p], inputs, prefill_runs=2, decode=inputs.decode[1:]) for p in points]
                measured[candidate] = replace(_memory_bound(session, candidate, n_ctx, baseline), points=list(points),
                                              prefill_s=[prefill for prefill, _ in timings],
                                              decode_s=[float(np.median(ticks)) for _, ticks in timings])
        del states
    return measured


def _time_quick(model_path: Path, timed: Sequence[Settings], points: Sequence[int], n_ctx: int, inputs: _Inputs,
                baseline: int, bounds: dict[Settings, Measurement], progress: Progress,
                started: float) -> dict[Settings, Measurement]:
    """The first run's calibration, within `QUICK_SECONDS` of starting.

    Contexts are stretched (`_stretched_states`), not filled. One reference candidate per
    decode key (the first: the smallest n_ubatch) is timed at every point; the references'
    decodes are interleaved A B B A, since the machine's speed drifts over a minute and flash
    attention on against off, decided by decode late in an episode, is the choice that matters
    most. Then, while time is left, the other candidates' prefill at the first point (the
    cheapest chunk), scaled along their reference's curve: n_ubatch moves the curve; one whose
    n_ubatch is at least the chunk computes it as the candidate with n_ubatch equal to the
    chunk does, and gets that timing. Candidates left untimed cannot be chosen; `edge-sql
    tune` times them all."""
    name = model_path.name
    numbers = iter(range(1, len(timed) + 1))  # the progress lines count the candidates timed
    refs = list({_decode_key(s): s for s in reversed(timed)}.values())[::-1]  # the first of each key
    states: dict = {}
    for ref in refs:
        if ref.flash_attn not in states:
            progress(f"calibrating {name}: a {points[-1]}-token context ({_fa_label(ref)}) ...")
            states[ref.flash_attn] = _contexts(model_path, ref.flash_attn, points, n_ctx, inputs, stretch=True)
    half = max(1, inputs.n_decode // 2)
    prefill: dict[Settings, list[float]] = {}
    ticks: dict[tuple[Settings, int], list[float]] = {}
    session, current = None, None
    try:
        for visit, ref in enumerate(refs + refs[::-1]):
            first = visit < len(refs)
            if ref != current:
                if session is not None:
                    session.close()
                if first:
                    progress(f"calibrating {name}: {next(numbers)}/{len(timed)} {ref.label}")
                session, current = _warmed(model_path, ref, n_ctx, states[ref.flash_attn][points[0]], inputs), ref
            steps = inputs.decode[1:][:half] if first else inputs.decode[1:][half:]
            for point in points:
                cost, steps_s = _time_at(session, states[ref.flash_attn][point], inputs, prefill_runs=int(first),
                                         decode=steps)
                if first:
                    prefill.setdefault(ref, []).append(cost)
                ticks.setdefault((ref, point), []).extend(steps_s)
    finally:
        if session is not None:
            session.close()
    measured = {ref: replace(bounds[ref], points=list(points), prefill_s=prefill[ref],
                             decode_s=[float(np.median(ticks[ref, p])) for p in points]) for ref in refs}

    chunk = inputs.chunk_size
    for candidate in (s for s in timed if s not in measured):
        ref = measured[next(r for r in refs if _decode_key(r) == _decode_key(candidate))]
        same = next((m for s, m in measured.items() if _decode_key(s) == _decode_key(candidate)
                     and min(s.n_ubatch, chunk) == min(candidate.n_ubatch, chunk)), None)
        if same is not None:  # the same ubatches of the chunk: the same computation
            measured[candidate] = replace(bounds[candidate], points=list(points), prefill_s=list(same.prefill_s))
            continue
        needed = ref.prefill_s[0] * chunk + 1.0  # a chunk at the first point and a context
        if time.perf_counter() - started + needed > QUICK_SECONDS:
            progress(f"calibrating {name}: {candidate.label} not timed (the quick calibration's time is up)")
            continue
        progress(f"calibrating {name}: {next(numbers)}/{len(timed)} {candidate.label}")
        with _warmed(model_path, candidate, n_ctx, states[candidate.flash_attn][points[0]], inputs) as session:
            cost, _ = _time_at(session, states[candidate.flash_attn][points[0]], inputs, prefill_runs=1, decode=())
            scale = cost / ref.prefill_s[0]
            measured[candidate] = replace(bounds[candidate], points=list(points),
                                          prefill_s=[c * scale for c in ref.prefill_s])
    return measured


def _memory_bound(session: Session, candidate: Settings, n_ctx: int, baseline: int) -> Measurement:
    """An untimed measurement: the memory bound of `candidate` loaded as `session`."""
    n_head = llama_cpp.llama_model_n_head(session.llama_model)
    memory = baseline + session.info.buffer_bytes + attention_work_bytes(n_ctx, candidate, n_head) + UNCOUNTED_BYTES
    state = sum(size for kind, size in session.info.buffers.items() if kind.endswith(" RS"))
    return Measurement(candidate, [], [], [], memory, state_bytes=state, n_vocab=session.n_vocab)


# ---- the cache -----------------------------------------------------------------------------


def cache_key(model_path: str | Path, n_threads: int | None = None) -> str:
    """What a calibration is valid for: this CPU, this llama.cpp build, this exact file (and a
    thread count, when the caller fixed one)."""
    import hashlib

    text = json.dumps([cpu_model(), llama_build(), file_fingerprint(model_path), CACHE_VERSION]
                      + ([n_threads] if n_threads else []))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def tuning_dir() -> Path:
    from edge_sql.store.home import store_root

    return store_root() / "tuning"


def cached_calibration(model_path: str | Path, folder: Path | None = None,
                       n_threads: int | None = None) -> Calibration | None:
    """The cached calibration for this file on this machine and build, or None."""
    folder = folder or tuning_dir()
    path = folder / f"{cache_key(model_path, n_threads)}.json"
    try:
        return Calibration.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_calibration(calibration: Calibration, folder: Path | None = None) -> Path:
    """Write the calibration (atomically) and drop older ones for the same file path."""
    folder = folder or tuning_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        try:
            data = json.loads(old.read_text(encoding="utf-8"))
            if data.get("model_path") == calibration.model_path and data.get("threads") == calibration.threads:
                old.unlink()
        except (OSError, ValueError):
            continue
    path = folder / f"{calibration.key}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(calibration.to_json(), indent=1), encoding="utf-8")
    tmp.replace(path)
    return path


def tuned_settings(model_path: str | Path, *, progress: Progress = lambda _m: None,
                   folder: Path | None = None, n_ctx: int = EPISODE_TOKENS,
                   options: dict | None = None, n_threads: int | None = None) -> tuple[Settings, str]:
    """The settings `run` uses: cached, else a quick calibration now (then cached).

    `options` are passed on to `calibrate` (candidates, points...). `n_threads` (the caller's
    fixed thread count) calibrates only that count, cached apart.

    Returns (settings, how): how is "cached" or "calibrated".
    """
    cached = cached_calibration(model_path, folder, n_threads)
    if cached is not None:
        return cached.chosen, "cached"
    validate_gguf(Path(model_path))  # a bad file is reported as such, not as a calibration that failed
    progress(f"first run of {Path(model_path).name} on this machine: a quick calibration "
             "(`--no-tune` skips it; `edge-sql tune` runs the full sweep)")
    options = dict(options or {})
    if n_threads and "settings" not in options:
        options["settings"] = list(dict.fromkeys(replace(s, n_threads=n_threads) for s in candidates()))
    calibration = calibrate(model_path, progress=progress, n_ctx=min(n_ctx, EPISODE_TOKENS), threads=n_threads,
                            **options)
    save_calibration(calibration, folder)
    progress(f"calibrated in {calibration.seconds:.0f} s: {calibration.chosen.label}")
    if calibration.note:
        progress(f"note: {calibration.note}")
    return calibration.chosen, "calibrated"
