"""Sampling on synthetic logits: greedy, top-k, temperature, top-p, seeds, the grammar shortcut."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from edge_sql.runtime import SamplingParams
from edge_sql.runtime.text.sampling import CANDIDATES, _top, draw, sample, sample_allowed

VOCAB = 5000


def sample_masked_reference(
    logits: np.ndarray, allowed: np.ndarray, params: SamplingParams, rng: np.random.Generator
) -> int:
    """Plain full-vocabulary masking (slow): the reference `sample_allowed` is tested against."""
    masked = np.where(allowed, logits, -np.inf)
    k = 1 if params.is_greedy else (params.top_k or int(allowed.sum()))
    k = min(k, int(allowed.sum()))
    ids = np.argpartition(masked, -k)[-k:]
    return draw(ids, masked[ids], params, rng)


def _logits(seed: int, n: int = VOCAB) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 3, n).astype(np.float32)


def _frequencies(logits: np.ndarray, params: SamplingParams, n: int = 20000) -> Counter[int]:
    rng = np.random.default_rng(123)
    return Counter(sample(logits, params, rng) for _ in range(n))


def test_greedy_is_argmax() -> None:
    for seed in range(20):
        logits = _logits(seed)
        assert sample(logits, SamplingParams(greedy=True), np.random.default_rng(0)) == int(np.argmax(logits))
        assert sample(logits, SamplingParams(temperature=0.0), np.random.default_rng(0)) == int(np.argmax(logits))


def test_top_k_limits_the_support() -> None:
    logits = np.linspace(0, 1, 100, dtype=np.float32)  # flat-ish: many tokens plausible
    counts = _frequencies(logits, SamplingParams(temperature=5.0, top_k=7, top_p=1.0), n=5000)
    assert set(counts) == set(range(93, 100))


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = np.log(probs).astype(np.float32)
    counts = _frequencies(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.8), n=20000)
    assert set(counts) == {0, 1}  # 0.5 + 0.3 reaches 0.8
    assert abs(counts[0] / 20000 - 0.5 / 0.8) < 0.02
    counts = _frequencies(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.81), n=5000)
    assert set(counts) == {0, 1, 2}


def test_temperature_sharpens_the_distribution() -> None:
    logits = np.log(np.array([0.6, 0.4])).astype(np.float32)
    cold = _frequencies(logits, SamplingParams(temperature=0.5, top_k=0, top_p=1.0))
    expected = 0.6**2 / (0.6**2 + 0.4**2)  # p^(1/T), renormalised
    assert abs(cold[0] / 20000 - expected) < 0.015
    plain = _frequencies(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0))
    assert abs(plain[0] / 20000 - 0.6) < 0.015


def test_temperature_applies_before_top_p() -> None:
    # At T=1 top-p 0.7 keeps {0, 1}; at T=0.25 token 0 alone has p > 0.7.
    logits = np.log(np.array([0.55, 0.3, 0.15])).astype(np.float32)
    counts = _frequencies(logits, SamplingParams(temperature=0.25, top_k=0, top_p=0.7), n=3000)
    assert set(counts) == {0}


def test_seed_reproduces_and_differs() -> None:
    logits = _logits(7)
    params = SamplingParams(temperature=1.5, top_k=50, top_p=0.99)

    def run(seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        return [sample(logits, params, rng) for _ in range(30)]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_draw_is_order_independent() -> None:
    ids = np.arange(20)
    values = _logits(3, 20)
    perm = np.random.default_rng(0).permutation(20)
    params = SamplingParams(temperature=1.0, top_k=20, top_p=0.9)
    for seed in range(50):
        a = draw(ids, values, params, np.random.default_rng(seed))
        b = draw(ids[perm], values[perm], params, np.random.default_rng(seed))
        assert a == b


def _allowed(seed: int, density: float) -> np.ndarray:
    return np.random.default_rng(seed + 1000).random(VOCAB) < density


@pytest.mark.parametrize("density", [0.9, 0.5, 0.3, 0.05, 0.001])
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(),
        SamplingParams(greedy=True),
        SamplingParams(temperature=1.2, top_k=40, top_p=0.99),
        SamplingParams(temperature=0.6, top_k=0, top_p=0.95),
    ],
    ids=["defaults", "greedy", "wide", "no-top-k"],
)
def test_shortcut_equals_full_masking(density: float, params: SamplingParams) -> None:
    """Same logits, same allowed set, same random stream: same token, whichever path ran."""
    shortcuts = 0
    for seed in range(40):
        logits = _logits(seed)
        allowed = _allowed(seed, density)
        if not allowed.any():
            continue
        fast, used_shortcut = sample_allowed(
            logits,
            lambda ids, allowed=allowed: allowed[ids],
            lambda allowed=allowed: allowed,
            params,
            np.random.default_rng(seed),
        )
        slow = sample_masked_reference(logits, allowed, params, np.random.default_rng(seed))
        assert fast == slow
        assert allowed[fast]
        shortcuts += used_shortcut
    if density >= 0.9 and params.top_k:
        assert shortcuts == 40  # dense masks never need the fallback
    if density <= 0.001 and not params.is_greedy:
        assert shortcuts == 0  # too few allowed among the top candidates: full vocabulary


def test_shortcut_never_mutates_logits() -> None:
    logits = _logits(11)
    before = logits.copy()
    allowed = _allowed(11, 0.01)
    sample_allowed(logits, lambda ids: allowed[ids], lambda: allowed, SamplingParams(), np.random.default_rng(0))
    np.testing.assert_array_equal(logits, before)


def test_candidate_pool_covers_top_k() -> None:
    assert CANDIDATES >= SamplingParams().top_k


def test_parameters_are_checked() -> None:
    with pytest.raises(ValueError):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError):
        SamplingParams(top_k=-2)


@pytest.mark.parametrize("size", [100, 49152, 248320])
def test_fast_top_candidates_are_the_true_top(size: int) -> None:
    for seed in range(10):
        logits = np.random.default_rng(seed).standard_normal(size).astype(np.float32) * (seed + 1)
        logits[seed * 7 % size] = 40.0  # one outlier, as real logits have
        for n in (1, 20, CANDIDATES):
            assert set(_top(logits, n).tolist()) == set(np.argpartition(logits, -n)[-n:].tolist())
