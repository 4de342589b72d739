"""Token sampling on numpy logits: top-k, temperature, top-p, then a seeded draw.

Order: top-k on the raw logits, softmax with temperature over those k, top-p on that
distribution, renormalise, draw. This is the order of vLLM and transformers (the engines the
model was trained and evaluated with); llama.cpp's default chain applies temperature last.

Under a grammar only allowed tokens may be drawn. Masking the whole 248k vocabulary costs
milliseconds per token, so `sample_allowed` first looks at the raw top candidates
(`CANDIDATES`) and only falls back to the full vocabulary when too few of them are allowed.

Why the shortcut is exact: let C be the M highest raw logits (M >= k) and A the allowed set.
Every token outside C has a logit <= min(C). If |C & A| >= k, the k best tokens of C & A all
have logits >= min(C), so no allowed token outside C can beat any of them: they are the top-k
of the masked distribution. Top-k, temperature, top-p and the draw then only look at those k
tokens (sorted by logit, ties by token id in both paths), so the drawn token is the same as
with full masking for the same random number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

CANDIDATES = 64  # raw top candidates examined before falling back to the full vocabulary


class NoAllowedToken(RuntimeError):
    """The mask allows no token at all."""


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings; the defaults are the ones the model was trained with."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    seed: int | None = None
    greedy: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0 (0 = no top-k)")

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature == 0


def _order(ids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort candidates by logit (descending), ties by token id: one order for every path."""
    order = np.lexsort((ids, -values))
    return ids[order], values[order]


_SUBSAMPLE_STRIDE = 16


def _top(logits: np.ndarray, n: int) -> np.ndarray:
    """Ids of the n largest logits (unordered); all ids when n covers the vocabulary.

    On a large vocabulary a full argpartition costs about 1 ms. Instead take the n-th
    largest value of every 16th logit as a threshold: those n values are in the full array,
    so the n-th largest overall is >= the threshold, and every top-n logit passes the
    comparison. One vectorised comparison plus an argpartition over about 16 n survivors
    gives the same set about four times faster.
    """
    size = logits.shape[0]
    if n >= size:
        return np.arange(size)
    if size >= 64 * n * _SUBSAMPLE_STRIDE:
        threshold = np.partition(logits[::_SUBSAMPLE_STRIDE], -n)[-n]
        survivors = np.flatnonzero(logits >= threshold)
        return survivors[np.argpartition(logits[survivors], -n)[-n:]]
    return np.argpartition(logits, -n)[-n:]


def draw(ids: np.ndarray, values: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Sample from candidates already cut to top-k: temperature, top-p, draw.

    `ids`/`values` may be in any order; they are put in canonical order here.
    """
    ids, values = _order(np.asarray(ids), np.asarray(values, dtype=np.float64))
    if params.is_greedy:
        return int(ids[0])
    scaled = (values - values[0]) / params.temperature
    probs = np.exp(scaled)
    probs /= probs.sum()
    if params.top_p < 1.0:
        cumulative = np.cumsum(probs)
        keep = int(np.searchsorted(cumulative, params.top_p, side="left")) + 1
        probs = probs[:keep] / probs[:keep].sum()
        ids = ids[:keep]
    return int(ids[rng.choice(len(ids), p=probs)]) if len(ids) > 1 else int(ids[0])


def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Sample one token from unconstrained logits."""
    if params.is_greedy:
        return int(np.argmax(logits))
    k = params.top_k or logits.shape[0]
    ids = _top(logits, k)
    return draw(ids, logits[ids], params, rng)


def sample_allowed(
    logits: np.ndarray,
    is_allowed: Callable[[np.ndarray], np.ndarray],
    allowed_mask: Callable[[], np.ndarray],
    params: SamplingParams,
    rng: np.random.Generator,
    candidates: int = CANDIDATES,
) -> tuple[int, bool]:
    """Sample one token among the allowed ones; returns (token, used_shortcut).

    `is_allowed(ids)` answers for a few ids; `allowed_mask()` gives a boolean array over the
    whole vocabulary (only called on the fallback path). `logits` is never modified.
    """
    k = 1 if params.is_greedy else params.top_k
    if k and k <= candidates:
        top = _top(logits, candidates)
        top = top[is_allowed(top)]
        if len(top) >= k:
            keep = top if len(top) == k else top[np.argpartition(logits[top], -k)[-k:]]
            return draw(keep, logits[keep], params, rng), True
    allowed = np.flatnonzero(allowed_mask())
    if len(allowed) == 0:
        raise NoAllowedToken("the grammar allows no token at this point")
    values = logits[allowed]
    if k and len(allowed) > k:
        part = np.argpartition(values, -k)[-k:]
        allowed, values = allowed[part], values[part]
    return draw(allowed, values, params, rng), False
