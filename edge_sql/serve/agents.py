"""The one place `serve` builds its `Agent`: `open_agent(..., parallel=N)`.

With `parallel` = 1 this is `Agent(...)`, exactly as before. With N > 1 the queue runs N
episodes at once, so the agent must answer N `ask` calls at once: `Agent(parallel=N)` (N
sessions of one model from `runtime.sequences.open_sessions`, each `ask` on a free one) does
that. Until that parameter is in `Agent`, `AgentPool` stands in: N Agents on the same file
(their sessions share the loaded weights, `runtime/shared_models.py`), each `ask` borrowing a
free one. It uses only `Agent`'s public API, and goes once `Agent` takes `parallel`.
"""

from __future__ import annotations

import inspect
import queue
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from edge_sql.agent.result import EpisodeResult
from edge_sql.api import Agent
from edge_sql.runtime import SessionInfo


def open_agent(model: str | None, *, parallel: int = 1, **options: Any) -> Any:
    """An agent that answers `parallel` questions at once (`options`: `Agent`'s keywords)."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    if "parallel" in inspect.signature(Agent).parameters:
        return Agent(model, parallel=parallel, **options)
    if parallel == 1:
        return Agent(model, **options)
    return AgentPool([Agent(model, **options) for _ in range(parallel)])


class AgentPool:
    """N Agents behind the one-Agent interface `serve` uses: `ask` takes a free one (blocking
    while all N answer), so N threads ask at once; `info` is the first one's."""

    def __init__(self, agents: list[Agent]) -> None:
        self.agents = agents
        self.parallel = len(agents)
        self._free: queue.SimpleQueue[Agent] = queue.SimpleQueue()
        for agent in agents:
            self._free.put(agent)

    @property
    def info(self) -> SessionInfo:
        return self.agents[0].info

    def warm_up(self) -> None:
        for agent in self.agents:
            agent.warm_up()

    def ask(self, question: str, db: Any, **kwargs: Any) -> EpisodeResult:
        with self._borrowed() as agent:
            return agent.ask(question, db, **kwargs)

    @contextmanager
    def _borrowed(self) -> Iterator[Agent]:
        agent = self._free.get()
        try:
            yield agent
        finally:
            self._free.put(agent)

    def close(self) -> None:
        for agent in self.agents:
            agent.close()

    def __enter__(self) -> AgentPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
