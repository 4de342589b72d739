"""Measurement: each candidate's cost per token of prefill and decode at a few context lengths.

No candidate prefills the context itself. The full sweep (`time_sweep`) fills it once per
flash-attention value with random tokens (speed does not depend on the values) and saves
llama.cpp's sequence state at each measuring point; every candidate restores those states and
times a prefill chunk (best of two) and a few decodes (median) there. The quick calibration
(`time_quick`) does not even fill: it evaluates 64 real tokens and stretches their state to the
points (`runtime/state/stretched_state.py`: a step's cost depends on how many cells attention reads,
not on what they hold). A single-token decode does not depend on n_ubatch, so candidates that
differ only in n_ubatch share their decode timings (`pool_decode`): noise in decode never picks
the n_ubatch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from edge_sql.runtime.llama.backend import default_threads
from edge_sql.runtime.session import Session
from edge_sql.runtime.state.prefix_state import StateSnapshot
from edge_sql.runtime.state.stretched_state import stretch_snapshot
from edge_sql.runtime.tuning.memory import memory_bound
from edge_sql.runtime.tuning.plan import RunPlan
from edge_sql.runtime.tuning.result import Measurement
from edge_sql.runtime.tuning.settings import Settings

STRETCH_BASE = 64  # real tokens behind a stretched state


def _filled_states(
    base: Session, points: Sequence[int], rng: np.random.Generator, pool: np.ndarray
) -> dict[int, StateSnapshot]:
    """The context filled for real (random tokens) to each point, a snapshot at each."""
    base.reset()
    states, filled = {}, 0
    for point in points:
        base.eval(rng.choice(pool, point - filled).tolist())
        filled = point
        states[point] = base.snapshot()
    return states


def _stretched_states(
    base: Session, points: Sequence[int], rng: np.random.Generator, pool: np.ndarray
) -> dict[int, StateSnapshot] | None:
    """The quick mode's contexts: `STRETCH_BASE` real tokens, their state stretched to each
    point, so measuring at 8,192 tokens costs no 8,192-token prefill. None where llama.cpp's
    state is not in the format stretching knows, or it refuses it."""
    base.reset()
    base.eval(rng.choice(pool, min(STRETCH_BASE, points[0])).tolist())
    short = base.snapshot()
    stretched = {point: stretch_snapshot(short, point) for point in points}
    states = {point: state for point, state in stretched.items() if state is not None}
    if len(states) < len(stretched) or not base.restore(states[points[-1]]):
        return None
    base.eval(rng.choice(pool, 1).tolist())  # llama.cpp accepts a step after the longest
    return states


def _contexts(plan: RunPlan, flash_attn: bool | None, *, stretch: bool) -> dict[int, StateSnapshot]:
    """A snapshot at each point, filled for real or (`stretch`) stretched from a short real one.
    Per flash-attention value: llama.cpp lays the V cache out transposed without flash
    attention, and refuses a state saved with the other layout."""
    inputs = plan.inputs
    with Session(
        plan.model_path,
        n_ctx=plan.n_ctx,
        n_threads=default_threads(),
        n_gpu_layers=0,
        adapt_threads=False,
        flash_attn=flash_attn,
    ) as base:
        inputs.draw(base.n_vocab)
        assert inputs.pool is not None  # drawn
        states = _stretched_states(base, plan.points, inputs.rng, inputs.pool) if stretch else None
        return states if states is not None else _filled_states(base, plan.points, inputs.rng, inputs.pool)


def decode_key(settings: Settings) -> tuple:
    """What a single-token decode's speed depends on: not n_ubatch (one token is one ubatch)."""
    return settings.flash_attn, settings.n_threads, settings.repack


def pool_decode(measurements: dict[Settings, Measurement]) -> None:
    """Give candidates that decode alike (same `decode_key`) the median of their decode
    timings: differences between them are noise, and noise must not choose the n_ubatch."""
    groups: dict[tuple, list[Measurement]] = {}
    for m in measurements.values():
        if m.points:
            groups.setdefault(decode_key(m.settings), []).append(m)
    for group in groups.values():
        timed = [m.decode_s for m in group if m.decode_s]
        pooled = [float(np.median(column)) for column in zip(*timed)]
        for m in group:
            m.decode_s = list(pooled)


def _fa_label(settings: Settings) -> str:
    return settings.label.split()[0]


def _restore(session: Session, state: StateSnapshot) -> None:
    if not session.restore(state):
        raise RuntimeError(f"calibration could not restore its {len(state.tokens)}-token state")


def _time_at(
    session: Session, state: StateSnapshot, chunk: Sequence[int], *, prefill_runs: int, decode: Sequence[int]
) -> tuple[float, list[float]]:
    """At one filled state: prefill seconds per token (the fastest of `prefill_runs` chunks:
    other processes only ever add time; inf for none) and the seconds of each `decode` step."""
    best = math.inf
    for _ in range(prefill_runs):
        _restore(session, state)
        tick = time.perf_counter()
        session.eval(list(chunk))
        best = min(best, (time.perf_counter() - tick) / len(chunk))
    _restore(session, state)
    ticks = []
    for token in decode:
        tick = time.perf_counter()
        session.eval([token])
        ticks.append(time.perf_counter() - tick)
    return best, ticks


def _warmed(plan: RunPlan, candidate: Settings, state: StateSnapshot) -> Session:
    """A session for `candidate`, its first-touch costs paid (a step at `state`)."""
    session = Session(plan.model_path, candidate.session_options(n_ctx=plan.n_ctx, n_gpu_layers=0, adapt_threads=False))
    _restore(session, state)
    session.eval(plan.inputs.decode[:1])
    return session


def time_sweep(plan: RunPlan, timed: Sequence[Settings]) -> dict[Settings, Measurement]:
    """`edge-sql tune`: contexts filled for real; every candidate at every point, prefill the
    best of two chunks, decode the median of its own steps (pooled afterwards)."""
    measured, points, inputs = {}, list(plan.points), plan.inputs
    for flash_attn in dict.fromkeys(s.flash_attn for s in timed):
        group = [s for s in timed if s.flash_attn == flash_attn]
        plan.report.detail(f"calibrating {plan.name}: filling a {points[-1]}-token context ({_fa_label(group[0])}) ...")
        plan.report.say(f"calibrating {plan.name}: filling a long context to measure speeds in")
        states = _contexts(plan, flash_attn, stretch=False)
        for candidate in group:
            plan.timing(candidate.label)
            with _warmed(plan, candidate, states[points[0]]) as session:
                timings = [
                    _time_at(session, states[p], inputs.chunk, prefill_runs=2, decode=inputs.decode[1:]) for p in points
                ]
                measured[candidate] = replace(
                    memory_bound(session, candidate, plan.n_ctx, plan.baseline),
                    points=points,
                    prefill_s=[prefill for prefill, _ in timings],
                    decode_s=[float(np.median(ticks)) for _, ticks in timings],
                )
        del states
    return measured


def time_quick(
    plan: RunPlan, timed: Sequence[Settings], bounds: dict[Settings, Measurement], context_s: dict[Settings, float]
) -> dict[Settings, Measurement]:
    """The first run's calibration, within `plan.budget`.

    Contexts are stretched (`_stretched_states`), not filled. A reference candidate per decode
    key (the first: the smallest n_ubatch) is timed at every point, the first of each
    flash-attention value whatever the budget, the others while it holds them
    (`_time_references`). Then,
    while the budget holds them, the other candidates' prefill at the first point (the
    cheapest chunk), scaled along their reference's curve: n_ubatch moves the curve; one whose
    n_ubatch is at least the chunk computes it as the candidate with n_ubatch equal to the
    chunk does, and gets that timing. Candidates left untimed cannot be chosen; `edge-sql
    tune` times them all. `context_s`: what creating each candidate's context took while its
    memory was bounded (its model's load included where it needed one), to estimate steps by."""
    points, inputs = list(plan.points), plan.inputs
    refs = list({decode_key(s): s for s in reversed(timed)}.values())[::-1]  # the first of each key
    core = list({s.flash_attn: s for s in reversed(refs)}.values())[::-1]  # the first of each flash value
    refs = core + [r for r in refs if r not in core]
    states: dict[bool | None, dict[int, StateSnapshot]] = {}
    for ref in core:
        plan.report.detail(f"calibrating {plan.name}: a {points[-1]}-token context ({_fa_label(ref)}) ...")
        states[ref.flash_attn] = _contexts(plan, ref.flash_attn, stretch=True)
    timings = _time_references(plan, refs, len(core), states, context_s)
    measured = {
        ref: replace(
            bounds[ref], points=points, prefill_s=prefill, decode_s=[float(np.median(ticks)) for ticks in decodes]
        )
        for ref, (prefill, decodes) in timings.items()
    }

    chunk = inputs.chunk_size
    for candidate in (s for s in timed if s not in measured and s not in refs):  # refs: timed or said
        key = decode_key(candidate)
        same = next(
            (
                m
                for s, m in measured.items()
                if decode_key(s) == key and min(s.n_ubatch, chunk) == min(candidate.n_ubatch, chunk)
            ),
            None,
        )
        if same is not None:  # the same ubatches of the chunk: the same computation
            measured[candidate] = replace(bounds[candidate], points=points, prefill_s=list(same.prefill_s))
            continue
        reference = next((m for s, m in measured.items() if s in timings and decode_key(s) == key), None)
        if (
            plan.time_is_up
            or reference is None
            or not plan.budget.allows(context_s.get(candidate, 0.0) + reference.prefill_s[0] * chunk)
        ):
            plan.out_of_time(candidate.label)
            continue
        plan.timing(candidate.label)
        with _warmed(plan, candidate, states[candidate.flash_attn][points[0]]) as session:
            cost, _ = _time_at(
                session, states[candidate.flash_attn][points[0]], inputs.chunk, prefill_runs=1, decode=()
            )
            scale = cost / reference.prefill_s[0]
            measured[candidate] = replace(
                bounds[candidate], points=points, prefill_s=[c * scale for c in reference.prefill_s]
            )
    return measured


def _time_references(
    plan: RunPlan,
    refs: Sequence[Settings],
    n_core: int,
    states: dict[bool | None, dict[int, StateSnapshot]],
    context_s: dict[Settings, float],
) -> dict[Settings, tuple[list[float], list[list[float]]]]:
    """Each timed reference's prefill cost and decode steps at every point.

    The first `n_core` references (one per flash-attention value: on against off, decided by
    decode late in an episode, is the choice that matters most) are timed whatever the budget:
    the least a choice needs. The others only while the budget holds one more (what creating
    its context took, plus the longest round so far). Then, within the budget, a second round
    of decodes in reverse order (A B B A: the machine's speed drifts over a minute).
    """
    points, inputs = list(plan.points), plan.inputs
    half = max(1, inputs.n_decode // 2)
    prefill: dict[Settings, list[float]] = {}
    ticks: dict[tuple[Settings, int], list[float]] = {}
    warm_s: dict[Settings, float] = {}  # what creating each reference's session took, in the first round
    rounds_s: list[float] = []

    def visit(session: Session, ref: Settings, first: bool) -> None:
        steps = inputs.decode[1:][:half] if first else inputs.decode[1:][half:]
        for point in points:
            cost, steps_s = _time_at(
                session, states[ref.flash_attn][point], inputs.chunk, prefill_runs=int(first), decode=steps
            )
            if first:
                prefill.setdefault(ref, []).append(cost)
            ticks.setdefault((ref, point), []).extend(steps_s)

    session = None
    try:
        for number, ref in enumerate(refs):
            if number >= n_core and not plan.budget.allows(context_s.get(ref, 0.0) + max(rounds_s)):
                plan.out_of_time(ref.label)
                continue
            if session is not None:
                session.close()
            plan.timing(ref.label)
            tick = time.perf_counter()
            session = _warmed(plan, ref, states[ref.flash_attn][points[0]])
            warm_s[ref] = time.perf_counter() - tick
            visit(session, ref, first=True)
            rounds_s.append(time.perf_counter() - tick)
        done = list(warm_s)
        rest = max(0, len(inputs.decode) - 1 - half) / half
        second = sum(sum(ticks[ref, p]) for ref in done for p in points) * rest + sum(warm_s.values())
        if rest and plan.budget.allows(second):
            assert session is not None  # the first round opened one (done is not empty)
            for ref in done[::-1]:
                if ref != done[-1]:  # the last reference's session is still open
                    session.close()
                    session = _warmed(plan, ref, states[ref.flash_attn][points[0]])
                visit(session, ref, first=False)
        elif rest:
            plan.report.detail(
                f"calibrating {plan.name}: the second round of decodes skipped (the time left does not hold it)"
            )
    finally:
        if session is not None:
            session.close()
    return {ref: (prefill[ref], [ticks[ref, p] for p in points]) for ref in done}
