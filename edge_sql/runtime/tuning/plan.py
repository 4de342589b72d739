"""What one calibration run measures with: the model and its context, the tokens, the clock, the voice.

The timing functions (`timing.py`) take one `RunPlan` instead of a long list of arguments.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

Progress = Callable[[str], None]


@dataclass
class Budget:
    """The time a calibration may take (`seconds=None`: no limit, the full sweep).

    Steps that a choice can do without start only if their estimated cost fits in what is
    left after `reserve_s` (kept for the last step, measuring the MTP drafter's memory).
    """

    seconds: float | None
    started: float = field(default_factory=time.perf_counter)
    reserve_s: float = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        """Seconds left for optional steps (inf without a limit)."""
        return math.inf if self.seconds is None else self.seconds - self.elapsed() - self.reserve_s

    def allows(self, estimate_s: float) -> bool:
        return estimate_s <= self.left()


@dataclass
class Inputs:
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


@dataclass
class Reporter:
    """Progress lines in one of two voices: the detail `edge-sql tune` shows (settings by their
    llama.cpp names) or, for a first run (`plain`), what is happening in plain words."""

    emit: Progress
    plain: bool = False

    def detail(self, text: str) -> None:
        if not self.plain:
            self.emit(text)

    def say(self, text: str) -> None:
        if self.plain:
            self.emit(text)


@dataclass
class RunPlan:
    """One calibration's fixed inputs: where it measures, with which tokens, within what time."""

    model_path: Path
    n_ctx: int
    points: Sequence[int]
    inputs: Inputs
    baseline: int  # process memory besides llama.cpp's context buffers
    budget: Budget
    report: Reporter
    n_timed: int = 0  # candidates to time, for the progress lines' counts
    counted: int = 0  # of them, those a progress line has named
    time_is_up: bool = False  # a step was left out for time: no candidate is timed after

    @property
    def name(self) -> str:
        return self.model_path.name

    def timing(self, label: str) -> None:
        """One more candidate is being timed: its number (and settings) in the progress."""
        self.counted += 1
        number = self.counted
        self.report.detail(f"calibrating {self.name}: {number}/{self.n_timed} {label}")
        self.report.say(
            f"calibrating {self.name}: timing setting {number} of {self.n_timed} (how fast it reads "
            f"a prompt and writes tokens with it){self._time_spent()}"
        )

    def _time_spent(self) -> str:
        """`; 12 s so far, about 50 s in all`, or what it means when the plan is overrun."""
        planned, elapsed = self.budget.seconds, self.budget.elapsed()
        if planned is None:
            return ""
        if elapsed <= planned:
            return f"; {elapsed:.0f} s so far, about {planned:.0f} s in all"
        return f"; {elapsed:.0f} s so far, more than the {planned:.0f} s planned: the CPUs are slower or busier than expected"

    def out_of_time(self, label: str) -> None:
        """A candidate is left untimed: the budget does not hold it (said once in plain words)."""
        self.report.detail(f"calibrating {self.name}: {label} not timed (the quick calibration's time is up)")
        if not self.time_is_up:
            self.report.say(f"calibrating {self.name}: time is up, choosing among the settings timed so far")
        self.time_is_up = True
