"""The trained fixture's rounds (tests/fixture_training.py): train until the check passes, keep
the best round when none does and it reaches the floor, fail below it. A fake trainer whose
"weights" are the number of steps trained stands in for torch."""

from __future__ import annotations

import pytest

import fixture_training
from fixture_training import CHECK_FLOOR, CHECK_PASS, EXTRA_ROUNDS, EXTRA_STEPS, train_until_checked


class CountingTrainer:
    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.written: list[int] = []

    def train(self, steps: int, peak_rate: float) -> None:
        assert steps == EXTRA_STEPS and 0 < peak_rate < fixture_training.LEARNING_RATE
        self.steps += steps

    def snapshot(self) -> int:
        return self.steps

    def restore(self, state: object) -> None:
        assert isinstance(state, int)
        self.steps = state

    def write(self) -> None:
        self.written.append(self.steps)


def run(shares: dict[int, float]) -> tuple[float, CountingTrainer, list[str]]:
    """`train_until_checked` where the check's share depends on the steps written last."""
    trainer, log = CountingTrainer(160), []
    trainer.write()
    share = train_until_checked(trainer, trainer.write, lambda: shares[trainer.written[-1]], log.append)
    return share, trainer, log


def steps_after(rounds: int) -> int:
    return 160 + rounds * EXTRA_STEPS


def test_training_stops_at_the_first_round_that_passes():
    shares = {steps_after(0): 0.71, steps_after(1): 0.83, steps_after(2): 1.0, steps_after(3): 0.5}
    share, trainer, log = run(shares)
    assert share == 1.0 and trainer.written == [steps_after(0), steps_after(1), steps_after(2)]
    assert log == [f"check: {s} of the probes answered with SQL that runs" for s in ("71%", "83%", "100%")]


def test_without_a_pass_the_best_round_is_written_back():
    below = CHECK_PASS - 0.01
    shares = {steps_after(r): CHECK_FLOOR for r in range(EXTRA_ROUNDS + 1)} | {steps_after(2): below}
    share, trainer, log = run(shares)
    assert share == below and trainer.steps == steps_after(2)
    assert trainer.written == [steps_after(r) for r in range(EXTRA_ROUNDS + 1)] + [steps_after(2)]
    assert log[-1] == f"check: no round reached {CHECK_PASS:.0%}; kept the best, {below:.0%}"


def test_below_the_floor_the_build_fails_with_the_best_share():
    shares = {steps_after(r): CHECK_FLOOR - 0.05 for r in range(EXTRA_ROUNDS + 1)}
    with pytest.raises(RuntimeError, match=rf"at best {CHECK_FLOOR - 0.05:.0%} of .* \(needs {CHECK_FLOOR:.0%}\)"):
        run(shares)
