"""The Agent's knowledge hook: the notes and verified answers `ask` consults before an episode
(`knowledge.answers.consult`), the store's knowledge database opened on the first question that
needs it (most Agents never do) and closed with the Agent."""

from __future__ import annotations

import threading
from collections.abc import Callable

from edge_sql.api.knowledge_api import AgentKnowledge


class KnowledgeHook:
    """The knowledge database of one Agent, opened once on first use (from any thread), its
    bounds measured with `count_tokens` (the model's tokenizer)."""

    def __init__(self, count_tokens: Callable[[str], int]) -> None:
        self._count_tokens = count_tokens
        self._knowledge: AgentKnowledge | None = None
        self._lock = threading.Lock()

    def knowledge(self) -> AgentKnowledge:
        """The knowledge database, opened on the first call."""
        with self._lock:
            if self._knowledge is None:
                self._knowledge = AgentKnowledge.open(count_tokens=self._count_tokens)
            return self._knowledge

    def close(self) -> None:
        """Close the database if it was opened."""
        with self._lock:
            if self._knowledge is not None:
                self._knowledge.close()
