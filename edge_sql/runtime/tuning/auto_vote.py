"""`--vote auto`: the largest vote this machine answers within `VOTE_FACTOR` times one episode.

How it predicts: the K episodes of a vote decode together, K sequences of one context, so each
runs at the width-K aggregate rate shared K ways, which calibration measures (`parallel_rates`:
aggregate decode tok/s at 1, 2, 4, 8, 16 sequences; widths in between are interpolated
linearly). Episodes of the same question do comparable work, and decoding is most of an
episode's time on a CPU (the opening is evaluated once for all K), so a vote of K takes about
K * rate(1) / rate(K) times one episode: the machine's limit without an early stop. The early
stop (agent/majority_vote.py) only takes it below that. Where that limit is within `VOTE_FACTOR` for no
K >= 2 (or nothing was measured: `--no-tune`, one sequence fits), `auto` is no vote at all.

Why 2.0: on the 2-core AVX-512 Xeon this was measured on, 4 sequences decode about twice the
tokens per second of one, so a vote of 4 costs about 2x one episode; a vote of 3, the smallest
with a majority of two against one, stays within 2x wherever two sequences gain anything.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

VOTE_FACTOR = 2.0


def rate_at(rates: Sequence[Sequence[float]], k: int) -> float | None:
    """Aggregate decode tok/s at `k` sequences: measured, interpolated between the measured
    widths around it, or None beyond them."""
    points = sorted((int(w), float(r)) for w, r in rates)
    for (w0, r0), (w1, r1) in itertools.pairwise(points):
        if w0 <= k <= w1:
            return r0 + (r1 - r0) * (k - w0) / (w1 - w0)
    return points[0][1] if points and points[0][0] == k else None


def vote_cost(rates: Sequence[Sequence[float]], k: int) -> float | None:
    """A vote of `k` over one episode, predicted: k * rate(1) / rate(k) (None: not measured)."""
    one, at_k = rate_at(rates, 1), rate_at(rates, k)
    if not one or not at_k:
        return None
    return k * one / at_k


def auto_vote(rates: Sequence[Sequence[float]], limit: int, factor: float = VOTE_FACTOR) -> int:
    """The largest K (2..limit) whose predicted vote stays within `factor` times one episode;
    1 (no vote) when none does."""
    fitting = [k for k in range(2, limit + 1) if (cost := vote_cost(rates, k)) is not None and cost <= factor]
    return max(fitting, default=1)


def auto_vote_line(rates: Sequence[Sequence[float]], limit: int, factor: float = VOTE_FACTOR) -> str:
    """What `--vote auto` picks here and why, for `edge-sql tune` and `run`."""
    k = auto_vote(rates, limit, factor)
    if k < 2:
        best = min(
            ((c, j) for j in range(2, max(2, limit) + 1) if (c := vote_cost(rates, j)) is not None), default=None
        )
        why = (
            f"a vote of {best[1]} is predicted at {best[0]:.2f}x one episode"
            if best
            else "no decode rate of several sequences was measured"
        )
        return f"--vote auto: no vote ({why}; the limit is {factor:.1f}x)"
    return (
        f"--vote auto: {k} (a vote of {k} predicted at {vote_cost(rates, k):.2f}x one episode from the "
        f"measured decode rates, within {factor:.1f}x; the early stop takes it lower when episodes agree)"
    )
