"""One OS thread runs every `llama_decode` of the process, so OpenMP keeps one team of threads.

Why: the bundled llama.cpp computes a decode as an OpenMP parallel region of the thread that
calls it, and libgomp gives each calling thread a team of its own that lives as long as that
thread. Once the process's OpenMP threads outnumber the CPUs, libgomp cuts the spin at every
barrier to a throttled count (`gomp_throttled_spin_count_var`, 100 to 1,000 iterations), so the
hundreds of barriers of a step sleep and wake instead of spinning. Episodes at once run each in
a thread of its own and whichever completes a batch runs the step (runtime/batching/); a server
answers on its handler threads. Measured (issue 54; 2-core Intel Xeon, SmolLM2-135M Q8_0, eight
sequences one token each at depths 414-1,391): 76 ms a step while one thread had ever decoded,
100 ms from the moment a second one had, whichever thread decoded after that; the thread
governor then ran one-sequence steps at one thread, where no barrier waits.

So `run_decode` hands the call to this module's thread and waits for it; a call already on it
runs in place (an eval callback that decodes). The arithmetic is the same whatever thread runs
it: the tokens do not change. Nothing but `llama_decode` needs it: no other llama.cpp call of
edge-sql computes a graph (state reads and writes, sampling and tokenizing run no OpenMP).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_here = threading.local()  # `on` is True on the decode thread


def _mark_thread() -> None:
    _here.on = True


def _forget_after_fork() -> None:
    """A forked child has no copy of the thread: it starts its own on its first decode."""
    global _executor, _lock
    _lock, _executor = threading.Lock(), None


os.register_at_fork(after_in_child=_forget_after_fork)


def release_decode_thread() -> None:
    """End the decode thread once its decodes are done (the last Agent closed: no thread of
    edge-sql's outlives it); the next decode starts a new one."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
    if executor is not None:
        executor.shutdown(wait=True)


def run_decode(call: Callable[[], T]) -> T:
    """`call()` on the process's decode thread; its result, or its exception raised here.

    Ctrl-C (or a termination signal) while waiting is raised once the call has returned, as it
    was when llama_decode ran in the caller's thread: the context and batch it reads must not
    be freed under it."""
    if getattr(_here, "on", False):
        return call()
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(1, thread_name_prefix="edge-sql-decode", initializer=_mark_thread)
        future: Future[T] = _executor.submit(call)
    interrupted: BaseException | None = None
    while not future.done():
        try:
            wait([future])
        except BaseException as exc:  # KeyboardInterrupt, Terminated: wait for the decode first
            interrupted = exc
    if interrupted is not None:
        raise interrupted
    return future.result()
