"""How llama.cpp's CPU threads wait, and how many run: speed that holds on a busy machine.

Why: the bundled llama.cpp is built with OpenMP. At each of the barriers of a decode step
libgomp's threads spin (300,000 iterations by default, milliseconds) before they sleep. When
another program holds a core, one thread of the step is not running and every barrier waits a
scheduler time slice for it: issue 37 measured decode 80x slower on a 2-core machine (107 ->
1.34 tok/s) with one other busy process. Two parts answer it:

- `apply_wait_policy`: a short spin (`GOMP_SPINCOUNT`), set in the environment before
  llama.cpp's libraries load (edge_sql/__init__.py calls it), unless the user chose OpenMP's
  wait themselves. It keeps (even raises) the quiet rate and makes a waiting thread sleep soon.
- `ThreadGovernor`: one per context, it times each decode step and runs with one thread fewer
  while that is faster (the busy core left to the other program), trying the full count again
  now and then. `llama_set_n_threads` changes the count between two decodes. It compares steps
  of one shape only (their token count): a batched context (runtime/batching/) steps 1 to 16
  sequences in turn, and a step of eight costing more than a step of one is no busy machine.
- And every decode runs on one thread (runtime/llama/decode_thread.py): libgomp keeps a team
  per calling thread and, once they outnumber the CPUs, spins far less at every barrier.

None of them changes the tokens: without flash attention each thread count computes the same sums
(an adapting session runs without it: runtime/llama/loading.py, `attention_for_threads`;
tests check the logits bit for bit). Nothing here imports llama.cpp: this module must be
readable before the library loads.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

# libgomp's spin before a waiting thread sleeps: 10,000 iterations (tens of microseconds) kept
# SmolLM2's quiet rate (123 tok/s against 107 with the default 300,000) and cut its collapse
# under one busy process from 80x to 8x (benchmarks/results/busy/); the governor does the rest.
SPIN_COUNT = "10000"
WAIT_VARIABLES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def apply_wait_policy(environ: MutableMapping[str, str] | None = None) -> str:
    """Set edge-sql's OpenMP spin unless the user set either variable; returns what is in force
    ("GOMP_SPINCOUNT=10000", or the user's own setting). Must run before llama.cpp loads:
    libgomp reads the environment once, when it is loaded."""
    env = os.environ if environ is None else environ
    own = [f"{name}={env[name]}" for name in WAIT_VARIABLES if name in env]
    if own:
        return " ".join(own)
    env["GOMP_SPINCOUNT"] = SPIN_COUNT
    return f"GOMP_SPINCOUNT={SPIN_COUNT}"


STEP_TOKENS = 32  # batches up to this size are decode steps (one token, a verify batch, a
# batched step); larger ones are prefill, run at the current count unmeasured
WINDOW = 4  # steps whose median is one measurement
SLOWER = 1.5  # a measurement this much slower than the best at its count: try one fewer
BETTER = 0.9  # a trial is kept when its median is below this share of the one before
ABORT = 1.5  # an upward trial stops at its first step this much slower than the baseline
DOWN_ABORT = 1.2  # a downward one (kept only when faster) at its first step this much slower: a
# quiet machine's first trial of 1 thread of 2 then costs one slow step (1.4x on a 2-core EPYC,
# 1.8x on a Xeon, for the 2B shape), not a window of them
FIRST_PROBE_S = 2.0  # first upward trial this long after going down; doubles on each failure
LAST_PROBE_S = 32.0
HISTORY = 8  # measurements remembered per count and shape (the best of them is the reference)
TRIAL_STEPS = 4 * WINDOW  # a trial that saw this many steps without a window of its shape ends (not kept)


@dataclass
class _Trial:
    count: int  # the thread count on trial
    back_to: int  # the count to return to when it is not faster
    shape: int  # the step shape (tokens) judged: the one whose window started the trial
    baseline: float  # median step seconds of that shape at `back_to` just before
    steps: list[float] = field(default_factory=list)
    seen: int = 0  # steps of every shape during the trial


class ThreadGovernor:
    """Chooses the thread count of one context step by step, from the steps' own times.

    `set_threads(n)` applies a count (llama_set_n_threads); `clock` is injectable so tests can
    play a machine that slows down. Counts only move by one, so on a machine with more cores and
    one busy program it settles at all but one core.
    """

    def __init__(
        self,
        full: int,
        set_threads: Callable[[int], None],
        *,
        adaptive: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.full = max(1, full)
        self.adaptive = adaptive
        self.count = self.full
        self._set = set_threads
        self._clock = clock
        self._recent: dict[int, list[float]] = {}  # step seconds by shape (tokens), a window each
        self._best: dict[tuple[int, int], deque[float]] = {}  # (count, shape) -> window medians
        self._trial: _Trial | None = None
        self._probe_wait = FIRST_PROBE_S
        self._next_probe = 0.0
        self.decode_tokens: Counter[int] = Counter()  # tokens decoded at each count
        self.prefill_tokens: Counter[int] = Counter()

    def record(self, seconds: float, n_tokens: int) -> None:
        """One llama_decode of `n_tokens` took `seconds` at the current count."""
        if n_tokens > STEP_TOKENS:
            self.prefill_tokens[self.count] += n_tokens
            return
        self.decode_tokens[self.count] += n_tokens
        if self.full == 1 or not self.adaptive:
            return
        if self._trial is not None:
            self._step_trial(self._trial, seconds, n_tokens)
            return
        recent = self._recent.setdefault(n_tokens, [])
        recent.append(seconds)
        if len(recent) < WINDOW:
            return
        median = statistics.median(recent)
        self._recent = {}  # windows of the other shapes were partly at this count, partly not: anew
        history = self._best.setdefault((self.count, n_tokens), deque(maxlen=HISTORY))
        reference = min(history) if history else None
        history.append(median)
        if self.count > 1 and (reference is None or median > SLOWER * reference):
            self._start(_Trial(self.count - 1, self.count, n_tokens, median))
        elif self.count < self.full and self._clock() >= self._next_probe:
            self._start(_Trial(self.count + 1, self.count, n_tokens, median))

    def _start(self, trial: _Trial) -> None:
        self._trial = trial
        self._apply(trial.count)

    def _step_trial(self, trial: _Trial, seconds: float, n_tokens: int) -> None:
        trial.seen += 1
        if n_tokens != trial.shape:  # no baseline to judge it by
            if trial.seen >= TRIAL_STEPS:
                self._end(trial, kept=False, judged=False)
            return
        trial.steps.append(seconds)
        upward = trial.count > trial.back_to
        if seconds > (ABORT if upward else DOWN_ABORT) * trial.baseline:  # slower: no need to wait for the window
            self._end(trial, kept=False)
        elif len(trial.steps) == WINDOW:
            median = statistics.median(trial.steps)
            kept = median < BETTER * trial.baseline
            if kept:
                self._best.setdefault((trial.count, trial.shape), deque(maxlen=HISTORY)).append(median)
            self._end(trial, kept=kept)

    def _end(self, trial: _Trial, *, kept: bool, judged: bool = True) -> None:
        self._trial = None
        upward = trial.count > trial.back_to
        if not kept:
            self._apply(trial.back_to)
            if not upward and judged:  # slower than before, but fewer threads are no better: that is the machine now
                self._best[trial.back_to, trial.shape] = deque([trial.baseline], maxlen=HISTORY)
        if upward and not kept:
            self._probe_wait = min(LAST_PROBE_S, self._probe_wait * 2)
        elif kept:  # the load changed: the next upward trial soon (after going down, or to climb on)
            self._probe_wait = FIRST_PROBE_S
        self._next_probe = self._clock() + self._probe_wait

    def _apply(self, count: int) -> None:
        if count != self.count:
            self.count = count
            self._set(count)
