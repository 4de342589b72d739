"""One decoding thread against several: what a step of eight sequences costs when the threads
that call llama_decode take turns, as episodes at once did before runtime/llama/decode_thread.py.

    python -m benchmarks.runtime.bench_decode_threads MODEL.gguf [--sequences 8] [--threads 2]
        [--shallow 414] [--deep 1391] [--steps 24] [--rounds 2]

One process, one context laid out as the agent's (a KV stream per sequence, flash attention
off, a fixed thread count), every sequence filled to its own depth (spread from --shallow to
--deep, the agent's steps of eight on Chinook). Then steps of one token for every sequence,
median ms, in rounds of three runs:

  one thread      every step through `run_decode` (edge-sql today);
  taking turns    each step called by the next of `--sequences` threads that stay alive, each
                  calling llama_decode itself (how the batched engine decoded before: the thread
                  that completed a step ran it), so each leaves an OpenMP team behind;
  one thread      again, once those threads have ended (their teams with them).

The taking-turns run against the mean of the two one-thread runs around it is the cost, drift
cancelled. The figures are the same tokens: only the calling thread differs.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import llama_cpp
import numpy as np

from edge_sql.bench.machine import cpu_model
from edge_sql.runtime import SessionOptions
from edge_sql.runtime.llama.batch import TokenBatch
from edge_sql.runtime.llama.decode_thread import run_decode
from edge_sql.runtime.llama.loading import open_model
from edge_sql.runtime.llama.shared_models import release


class TakingTurns:
    """`count` live threads; `call(job)` runs `job` on the next one in turn and waits for it."""

    def __init__(self, count: int) -> None:
        self._inboxes: list[queue.SimpleQueue[Callable[[], None] | None]] = [queue.SimpleQueue() for _ in range(count)]
        self._done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, args=(inbox,)) for inbox in self._inboxes]
        self._next = 0
        for thread in self._threads:
            thread.start()

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (job := inbox.get()) is not None:
            try:
                job()
                self._done.put(None)
            except BaseException as exc:  # raised again in the caller
                self._done.put(exc)

    def call(self, job: Callable[[], None]) -> None:
        self._inboxes[self._next].put(job)
        self._next = (self._next + 1) % len(self._inboxes)
        error = self._done.get()
        if error is not None:
            raise error

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        for thread in self._threads:
            thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads (fixed)")
    parser.add_argument("--shallow", type=int, default=414, help="the shallowest sequence's tokens")
    parser.add_argument("--deep", type=int, default=1391, help="the deepest sequence's tokens")
    parser.add_argument("--steps", type=int, default=24, help="steps a run (the first 4 not counted)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    n = args.sequences
    ctx = args.deep + args.steps * args.rounds * 3 + 16  # every step adds a token to each sequence
    options = SessionOptions(n_ctx=ctx, n_threads=args.threads, flash_attn=False, adapt_threads=False)
    loaded, context, _info = open_model(args.model, options, n_seq=n)
    ptr, memory, rng = context.ptr, context.memory, np.random.default_rng(0)
    depths = [int(d) for d in np.linspace(args.shallow, args.deep, n)]
    print(f"CPU: {cpu_model()}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}")
    print(f"{n} sequences at depths {depths[0]}-{depths[-1]}, {args.threads} llama.cpp threads, flash attention off")
    try:
        with TokenBatch(context.n_batch) as batch:
            for seq, depth in enumerate(depths):
                for at in range(0, depth, context.n_batch):
                    k = min(context.n_batch, depth - at)
                    batch.fill_parts([(seq, rng.integers(100, 40_000, k).astype(np.int32), at, np.zeros(k, bool))])
                    batch.decode(ptr)
            done = [0]

            def steps(call: Callable[[Callable[[], None]], None]) -> float:
                """Median ms of a step of one token for every sequence, each step run by `call`."""
                times = []
                for _ in range(args.steps):
                    step = done[0]
                    batch.fill_parts(
                        [(s, np.array([500], np.int32), depths[s] + step, np.ones(1, bool)) for s in range(n)]
                    )
                    tick = time.perf_counter()
                    call(lambda: None if llama_cpp.llama_decode(ptr, batch.batch) == 0 else _fail())
                    times.append(1000 * (time.perf_counter() - tick))
                    done[0] += 1
                return statistics.median(times[4:])

            rows = []
            for _round in range(args.rounds):
                one = steps(run_decode)
                turns = TakingTurns(n)
                try:
                    taking = steps(turns.call)
                finally:
                    turns.close()
                again = steps(run_decode)
                rows.append((one, taking, again))
                print(
                    f"one thread {one:.1f} ms | {n} threads taking turns {taking:.1f} ms | one thread again {again:.1f} ms"
                )
            cost = statistics.median(t / ((a + b) / 2) for a, t, b in rows)
            print(f"a step from {n} threads taking turns costs {cost:.2f}x a step on one thread")
            llama_cpp.llama_memory_clear(memory, True)
    finally:
        context.close()
        release(loaded)


def _fail() -> None:
    raise RuntimeError("llama_decode failed")


if __name__ == "__main__":
    main()
