"""The SQaLe agent protocol: prompt template, grammar-constrained turns, budget, the loop."""

from edge_sql.agent.budget import Budget
from edge_sql.agent.episode import run_episode
from edge_sql.agent.events import EpisodeEvent
from edge_sql.agent.parsing import ToolCall, TurnParseError, parse_call, parse_final_turn, parse_tool_turn
from edge_sql.agent.prompt import DEFAULT_PROMPT_FILE, PromptFileError, PromptTemplate, load_prompt
from edge_sql.agent.result import CallRecord, EpisodeResult, RoundRecord
from edge_sql.agent.stats import EpisodeStats

__all__ = [
    "DEFAULT_PROMPT_FILE",
    "Budget",
    "CallRecord",
    "EpisodeEvent",
    "EpisodeResult",
    "EpisodeStats",
    "PromptFileError",
    "PromptTemplate",
    "RoundRecord",
    "ToolCall",
    "TurnParseError",
    "load_prompt",
    "parse_call",
    "parse_final_turn",
    "parse_tool_turn",
    "run_episode",
]
