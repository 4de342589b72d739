"""Several sessions on one model, each its own sequence of one llama.cpp context: what runs
several episodes at once (`Agent(parallel=N)`, `serve --parallel`, `bench --parallel`, votes).

`open_sessions(path, options, n)` returns a `SessionGroup` of `n` sessions. Each has the
`Session` interface (eval, generate, shared_prefix, reset, timings, ...) and is used from its
own thread; their decode steps are batched together by the engine (runtime/batched.py): one
llama.cpp batch holds every waiting sequence's next tokens. One session is used by one thread
at a time, as a plain `Session` is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from edge_sql.runtime.backend import Closing
from edge_sql.runtime.options import SessionOptions
from edge_sql.runtime.prefix_state import PrefixCache
from edge_sql.runtime.records import SessionInfo
from edge_sql.runtime.session import Session


class SessionGroup(Closing):
    """`n` sessions that decode together; `info` describes the shared context."""

    def __init__(self, sessions: list[Session], info: SessionInfo) -> None:
        self.sessions = sessions
        self.info = info

    def __len__(self) -> int:
        return len(self.sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(self.sessions)

    def close(self) -> None:
        """Free every session and the shared context (idempotent)."""
        for session in self.sessions:
            session.close()
        self.sessions = []


def open_sessions(model_path: str | Path, options: SessionOptions | None = None, n: int = 1, *,
                  prefix_cache: PrefixCache | None = None, **settings: Any) -> SessionGroup:
    """`n` sessions on `model_path`, each `options.n_ctx` tokens long, sharing `prefix_cache`
    (one shared-prefix state restored into every sequence). n = 1 is a plain `Session`.

    TEMPORARY BODY (the contract holds; the batched engine replaces it): n independent sessions.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    options = replace(options or SessionOptions(), **settings)
    cache = prefix_cache if prefix_cache is not None else PrefixCache()
    sessions = [Session(model_path, options, prefix_cache=cache) for _ in range(n)]
    return SessionGroup(sessions, sessions[0].info)
