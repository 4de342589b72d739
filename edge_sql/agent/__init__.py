"""The SQaLe agent protocol: prompt template, grammar-constrained turns, budget, the loop.

Its names are imported on first use (PEP 562), so `edge_sql.agent.budget` or `.result` can be
read without the episode loop, and with it llama.cpp (`edge-sql run` answering a verified
question at once loads neither).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_sql.lazy import lazy_exports

_EXPORTS = {
    "Budget": "edge_sql.agent.budget",
    "run_episode": "edge_sql.agent.episode",
    "EpisodeEvent": "edge_sql.agent.events",
    "ToolCall": "edge_sql.agent.parsing",
    "TurnParseError": "edge_sql.agent.parsing",
    "parse_call": "edge_sql.agent.parsing",
    "parse_final_turn": "edge_sql.agent.parsing",
    "parse_tool_turn": "edge_sql.agent.parsing",
    "DEFAULT_PROMPT_FILE": "edge_sql.agent.prompt",
    "PromptFileError": "edge_sql.agent.prompt",
    "PromptTemplate": "edge_sql.agent.prompt",
    "load_prompt": "edge_sql.agent.prompt",
    "CallRecord": "edge_sql.agent.result",
    "EpisodeResult": "edge_sql.agent.result",
    "RoundRecord": "edge_sql.agent.result",
    "EpisodeStats": "edge_sql.agent.stats",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from edge_sql.agent.budget import Budget
    from edge_sql.agent.episode import run_episode
    from edge_sql.agent.events import EpisodeEvent
    from edge_sql.agent.parsing import ToolCall, TurnParseError, parse_call, parse_final_turn, parse_tool_turn
    from edge_sql.agent.prompt import DEFAULT_PROMPT_FILE, PromptFileError, PromptTemplate, load_prompt
    from edge_sql.agent.result import CallRecord, EpisodeResult, RoundRecord
    from edge_sql.agent.stats import EpisodeStats


__getattr__ = lazy_exports(__name__, _EXPORTS)
