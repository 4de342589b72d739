"""How many episodes at once: sequences of one context (runtime/batching/sequences.py) within a budget.

Each sequence adds what llama.cpp allocates per sequence: its attention cells for the whole
n_ctx, its recurrent state, its logits rows (and, with speculation, its recurrent snapshots).
That is measured, not modelled: calibration creates the chosen settings' context with one and
with two sequences (nothing evaluated) and takes the difference from llama.cpp's buffer log;
that predicts how many fit, and the context with that many is created and checked too (its
compute buffer grows a little faster than the cells).

The budget for several episodes is larger than a lone episode's `MEMORY_ALLOWANCE`, which is
sized so one episode runs on any laptop: running several is a choice of someone with memory to
spare, so they may use a quarter of the memory available when calibrating, up to
`PARALLEL_CAP_BYTES`, never less than the lone budget. At most `MAX_PARALLEL` fit; asking for
more than fit is refused (`check_parallel`).

The default N is measured, not the most that fit: calibration times one token per sequence for
a few steps at 1, 2, 4, 8, 16 sequences (those that fit, and the most that fit) and takes the
fewest whose aggregate tokens per second is within `NEAR_BEST` of the best. Why: a step's cost
is not linear in its tokens. On the vendored llama.cpp, K-quant matrices are multiplied by a
tiled kernel from 8 batch rows on, in microtiles of 16 rows, so 16 sequences cost about what 8
do (2B shape, 2-core EPYC: 530 and 500 ms a step, against 75 ms for one), and the most that fit
is not always the fastest either.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edge_sql.errors import EdgeSqlError
from edge_sql.runtime.batching.sequences import open_sessions
from edge_sql.runtime.options import SessionOptions
from edge_sql.runtime.session import Session
from edge_sql.runtime.text.sampling import SamplingParams
from edge_sql.runtime.tuning.memory import MEMORY_ALLOWANCE
from edge_sql.runtime.tuning.settings import Settings

MAX_PARALLEL = 16
WIDTHS = (1, 2, 4, 8, 16)  # sequences timed for the default N (and the most that fit)
NEAR_BEST = 0.95  # the fewest sequences within this share of the best aggregate speed
PARALLEL_CAP_BYTES = 4 * 1024**3
SPEEDUP_STEPS = 8  # decode steps timed for the speed-up
SPEEDUP_CTX = 512  # a short context for that measurement: only the step's cost matters


@dataclass(frozen=True)
class ParallelFit:
    """The most sequences that fit, what each adds, under which budget; the default N chosen
    from the measured rates, and its gain over one."""

    n_max: int
    sequence_bytes: int
    allowance: int
    rates: tuple[tuple[int, float], ...] = ()  # (sequences, aggregate decode tok/s), measured

    @property
    def n(self) -> int:
        """The default N: the fewest sequences within NEAR_BEST of the best measured rate."""
        if not self.rates:
            return 1
        best = max(rate for _, rate in self.rates)
        return min(width for width, rate in self.rates if rate >= NEAR_BEST * best)

    @property
    def speedup(self) -> float:
        """Aggregate decode tok/s of the default N over one (1.0: not measured)."""
        rates = dict(self.rates)
        return round(rates[self.n] / rates[1], 2) if self.n in rates and rates.get(1) else 1.0


def available_bytes() -> int:
    """Memory the OS could give now (Linux MemAvailable; 0 where unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def parallel_allowance(available: int | None = None) -> int:
    """What several episodes may allocate beyond the file (see the module docstring)."""
    available = available_bytes() if available is None else available
    return max(MEMORY_ALLOWANCE, min(available // 4, PARALLEL_CAP_BYTES))


def allocated_with(model_path: Path, settings: Settings, n_ctx: int, n: int) -> int:
    """llama.cpp's allocations for `n` sequences of `n_ctx` tokens with `settings` (a context
    created, nothing evaluated)."""
    with open_sessions(model_path, settings.session_options(n_ctx=n_ctx, n_gpu_layers=0), n) as group:
        return group.info.buffer_bytes  # llama.cpp's allocations beyond the mapped file


def fit_parallel(
    model_path: Path, settings: Settings, n_ctx: int, one_bound: int, allowance: int, limit: int = MAX_PARALLEL
) -> tuple[int, int]:
    """The most sequences (1..limit) whose bound stays within `allowance`, and the mean bytes
    each sequence beyond the first added there. The one-to-two step predicts the count; that
    context is then created and checked (the compute buffer grows a little faster than the
    cells), one fewer at a time until it fits."""
    one = allocated_with(model_path, settings, n_ctx, 1)
    two = allocated_with(model_path, settings, n_ctx, 2)
    step = max(1, two - one)
    n = max(1, min(limit, 1 + (allowance - one_bound) // step))
    while n > 2:
        added = allocated_with(model_path, settings, n_ctx, n) - one
        if one_bound + added <= allowance:
            return n, added // (n - 1)
        n -= 1
    return n, step


def widths_to_time(n_max: int) -> list[int]:
    """The sequence counts timed for the default N: WIDTHS up to the most that fit, and that."""
    return sorted({w for w in WIDTHS if w <= n_max} | {n_max})


def measure_rates(model_path: Path, settings: Settings, n_max: int) -> tuple[tuple[int, float], ...]:
    """Aggregate decode tokens per second at each of `widths_to_time(n_max)` sequences stepping
    together (greedy, SPEEDUP_STEPS tokens each after a short prompt); () when only one fits."""
    if n_max < 2:
        return ()
    options = settings.session_options(n_ctx=SPEEDUP_CTX, n_gpu_layers=0)
    return tuple((width, round(decode_rate(model_path, options, width), 2)) for width in widths_to_time(n_max))


def decode_rate(model_path: Path, options: SessionOptions, width: int) -> float:
    """Tokens per second of `width` sequences, each decoding SPEEDUP_STEPS tokens at once."""
    with open_sessions(model_path, options, width) as group:
        for session in group:
            session.eval(session.tokenize("SELECT name FROM sqlite_master WHERE type = 'table'"))
        return width * SPEEDUP_STEPS / decode_together(group.sessions, SPEEDUP_STEPS)


def decode_together(sessions: list[Session], steps: int) -> float:
    """Seconds for every session to decode `steps` greedy tokens, each from a thread of its
    own, all started at once: what batching their steps costs."""
    barrier = threading.Barrier(len(sessions))

    def decode(session: Session) -> None:
        barrier.wait()
        session.generate(params=SamplingParams(greedy=True), max_tokens=steps)
        session.context.idle()  # done: the others' last steps do not wait for it

    threads = [threading.Thread(target=decode, args=(s,)) for s in sessions]
    tick = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - tick


def check_parallel(settings: Settings, n: int) -> None:
    """Refuse `n` episodes at once when calibration found fewer fit (`settings.parallel_limit`;
    settings that were not calibrated, 0, refuse nothing)."""
    if n < 1:
        raise EdgeSqlError(f"episodes at once must be at least 1, got {n}")
    limit = settings.parallel_limit
    if limit and n > limit:
        raise EdgeSqlError(
            f"{n} episodes at once do not fit: at most {limit} fit the memory budget for this model "
            f"(each sequence adds {settings.sequence_bytes / 2**20:.0f} MiB of attention cells and recurrent "
            "state); ask for fewer, or a shorter context (`edge-sql tune` shows the figures)"
        )
