"""Several sessions on one model, each its own sequence of one llama.cpp context: what runs
several episodes at once (`Agent(parallel=N)`, `serve --parallel`, `bench --parallel`, votes).

`open_sessions(path, options, n)` returns a `SessionGroup` of `n` sessions. Each has the
`Session` interface (eval, generate, shared_prefix, reset, timings, ...) and is used from its
own thread; their decode steps are batched together by the engine (runtime/batching/batched.py): one
llama.cpp batch holds every waiting sequence's next tokens. One session is used by one thread
at a time, as a plain `Session` is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Unpack

from edge_sql.runtime.batching.batched import BatchedDecoder, SequenceContext, StepCounts
from edge_sql.runtime.llama.backend import Closing
from edge_sql.runtime.llama.context import LlamaContext
from edge_sql.runtime.llama.loading import open_model
from edge_sql.runtime.llama.shared_models import LoadedModel, release
from edge_sql.runtime.options import SessionOptions, SessionSettings
from edge_sql.runtime.records import SessionInfo
from edge_sql.runtime.session import Session
from edge_sql.runtime.state.prefix_state import PrefixCache


class SessionGroup(Closing):
    """`n` sessions that decode together; `info` describes the shared context (n_ctx per
    sequence, `n_seq` sequences) and `counts` what its decoder did."""

    def __init__(
        self,
        sessions: list[Session],
        info: SessionInfo,
        decoder: BatchedDecoder | None = None,
        owner: Closing | None = None,
    ) -> None:
        self.sessions = sessions
        self.info = info
        self._decoder = decoder
        self._owner = owner  # the shared context (None: the one session owns its own)

    @property
    def counts(self) -> StepCounts:
        """Decode steps, tokens and mean batch width since the group opened."""
        return self._decoder.counts if self._decoder is not None else StepCounts()

    def __len__(self) -> int:
        return len(self.sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(self.sessions)

    def close(self) -> None:
        """Free every session, then the shared context (idempotent)."""
        for session in self.sessions:
            session.close()
        self.sessions = []
        if self._decoder is not None:
            self._decoder.close()
            self._decoder = None
        if self._owner is not None:
            owner, self._owner = self._owner, None
            owner.close()


def open_sessions(
    model_path: str | Path,
    options: SessionOptions | None = None,
    n: int = 1,
    *,
    prefix_cache: PrefixCache | None = None,
    **settings: Unpack[SessionSettings],
) -> SessionGroup:
    """`n` sessions on `model_path`, each `options.n_ctx` tokens long, sharing `prefix_cache`
    (one shared-prefix state restored into every sequence). n = 1 is a plain `Session`.
    Speculation: "lookup" or "off" for n > 1 (an MTP drafter is a context per episode)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    options = replace(options or SessionOptions(), **settings)
    cache = prefix_cache if prefix_cache is not None else PrefixCache()
    if n == 1:
        session = Session(model_path, options, prefix_cache=cache)
        return SessionGroup([session], session.info)
    loaded, context, info = open_model(model_path, options, n_seq=n)
    assert isinstance(context, LlamaContext)  # open_model makes a context of its own
    decoder = BatchedDecoder(context)
    try:
        sessions = [Session.on_context(SequenceContext(decoder, seq), info, prefix_cache=cache) for seq in range(n)]
    except BaseException:
        decoder.close()
        context.close()
        release(loaded)
        raise
    return SessionGroup(sessions, info, decoder, _SharedContext(loaded, context))


class _SharedContext(Closing):
    """The batched context and the model reference `open_model` took for it."""

    def __init__(self, loaded: LoadedModel, context: LlamaContext) -> None:
        self.loaded, self.context = loaded, context

    def close(self) -> None:
        self.context.close()
        release(self.loaded)
