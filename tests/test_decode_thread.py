"""Every llama_decode of the process runs on one thread (runtime/llama/decode_thread.py), so
libgomp keeps one team of threads however many threads decode: with a team per decoding
thread it throttles the spin at every barrier (a step of eight sequences 100 ms instead of 76
on a 2-core Xeon)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from edge_sql.runtime import SessionOptions
from edge_sql.runtime.llama.decode_thread import run_decode
from edge_sql.runtime.llama.loading import open_model
from edge_sql.runtime.llama.shared_models import release

T = TypeVar("T")


def _in_threads(count: int, job: Callable[[], T]) -> list[T]:
    """`job()` in `count` threads at once; the results in thread order."""
    results: dict[int, T] = {}
    barrier = threading.Barrier(count)

    def run(i: int) -> None:
        barrier.wait()
        results[i] = job()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[i] for i in range(count)]


def test_calls_from_several_threads_run_on_one_thread_not_theirs() -> None:
    callers = _in_threads(4, lambda: (threading.get_ident(), run_decode(threading.get_ident)))
    ran_on = {on for _, on in callers}
    assert len(ran_on) == 1
    assert ran_on.isdisjoint(caller for caller, _ in callers)
    assert run_decode(threading.get_ident) in ran_on  # the main thread's calls too
    assert run_decode(lambda: 6 * 7) == 42


def test_an_error_is_raised_in_the_caller_and_the_thread_goes_on() -> None:
    def fails() -> None:
        raise RuntimeError("decode failed")

    with pytest.raises(RuntimeError, match="decode failed"):
        run_decode(fails)
    assert run_decode(lambda: "still there") == "still there"


def test_a_call_made_on_the_decode_thread_runs_in_place() -> None:
    outer = run_decode(lambda: (threading.get_ident(), run_decode(threading.get_ident)))
    assert outer[0] == outer[1]  # no deadlock waiting for itself


def _native_threads() -> int:
    """OS threads of this process that Python did not start (OpenMP's workers among them)."""
    return len(os.listdir("/proc/self/task")) - threading.active_count()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc (Linux)")
def test_decodes_from_several_live_threads_add_no_openmp_team(tiny_gguf_fast: Path) -> None:
    """Four threads decode (two llama.cpp threads each) and stay alive while the process's
    threads are counted: one team of OpenMP workers at most (one worker), not one per thread."""
    options = SessionOptions(n_ctx=64, n_threads=2, adapt_threads=False)
    loaded, context, _info = open_model(tiny_gguf_fast, options)
    try:
        context.decode([1, 2, 3], 0, outputs="last")  # the decode thread's team exists from here
        before = _native_threads()
        lock, decoded, counted = threading.Lock(), threading.Barrier(5, timeout=120), threading.Event()
        errors: list[BaseException] = []

        def decode_and_stay() -> None:
            try:
                with lock:  # one context: its decodes one after another, at the next position
                    context.decode([10], len(context.tokens), outputs="last")
            except BaseException as exc:  # reported below; the barrier still completes
                errors.append(exc)
            decoded.wait()
            counted.wait(timeout=120)

        threads = [threading.Thread(target=decode_and_stay) for _ in range(4)]
        for thread in threads:
            thread.start()
        decoded.wait()
        added = _native_threads() - before
        counted.set()
        for thread in threads:
            thread.join()
        decoded_tokens = len(context.tokens)
    finally:
        context.close()
        release(loaded)
    assert not errors, errors
    assert decoded_tokens == 7
    assert added == 0, f"{added} OS threads added by decodes from four live threads (a team each)"
