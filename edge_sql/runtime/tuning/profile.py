"""The typical episode calibration optimises for, and its predicted time under measured costs.

Pure functions: which candidate is fastest is decided here, from seconds per token measured
at a few context lengths (`timing.py`), without touching llama.cpp.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edge_sql.runtime.options import DEFAULT_CONTEXT_TOKENS

if TYPE_CHECKING:
    from edge_sql.runtime.tuning.result import Measurement

EPISODE_TOKENS = DEFAULT_CONTEXT_TOKENS


@dataclass(frozen=True)
class Segment:
    """Part of an episode: `prefill` prompt tokens then `decode` sampled ones, from `context`."""

    context: int
    prefill: int
    decode: int


def episode_profile(
    budget: int = EPISODE_TOKENS, rounds: int = 6, prompt: int = 700, decode_per_round: int = 640, final: int = 700
) -> list[Segment]:
    """A typical episode under the protocol: the prompt, then per round the model's turn (think
    and calls, ~640 tokens) and the results turn, growing to `budget`; then the final answer."""
    results = max(0, (budget - prompt - final) // rounds - decode_per_round)
    segments, context = [Segment(0, prompt, 0)], prompt
    for _ in range(rounds):
        segments.append(Segment(context, results if segments[-1].decode else 0, decode_per_round))
        context += segments[-1].prefill + decode_per_round
    segments.append(Segment(context, results, final))
    return segments


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
