"""The Python API: `Agent` loads a model once and answers many questions offline.

from edge_sql import Agent

with Agent() as agent:                       # the default model (pulled if absent)
    result = agent.ask("How many albums are there?", "chinook.sqlite")
    print(result.sql, result.rows)

with Agent(parallel=4) as agent:             # four episodes at once, one context
    results = agent.ask_many(["How many albums?", "How many artists?"], "chinook.sqlite")
    voted = agent.ask("Which genre sells most?", "chinook.sqlite", vote=4, seed=1)

with Agent.from_config(profile="small") as agent:  # the command line's settings (api/config.py)
    result = await agent.ask_async("How many albums are there?", "chinook.sqlite", timeout=30)

`AgentSettings` is every keyword of `Agent` as one frozen object (`Agent(settings=...)`);
`agent_settings(profile)` says what `from_config` reads and where from; `llama_settings` is the
llama.cpp settings a model file loads with (calibrated, or the defaults).

Its names are imported on first use (PEP 562), so the settings files (`api.settings_files`,
which `edge-sql config` and `--help` read) load without the Agent, and with it llama.cpp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_sql.lazy import lazy_exports

_EXPORTS = {
    "Agent": "edge_sql.api.agent",
    "AgentSettings": "edge_sql.api.agent_settings",
    "Ask": "edge_sql.api.asks",
    "Watch": "edge_sql.api.asks",
    "agent_settings": "edge_sql.api.config",
    "SessionPlan": "edge_sql.api.plan",
    "llama_settings": "edge_sql.api.plan",
    "plan_sessions": "edge_sql.api.plan",
    "prefix_state_dir": "edge_sql.api.plan",
    "resolve_model_path": "edge_sql.api.plan",
    "vote_plan": "edge_sql.api.plan",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from edge_sql.api.agent import Agent
    from edge_sql.api.agent_settings import AgentSettings
    from edge_sql.api.asks import Ask, Watch
    from edge_sql.api.config import agent_settings
    from edge_sql.api.plan import (
        SessionPlan,
        llama_settings,
        plan_sessions,
        prefix_state_dir,
        resolve_model_path,
        vote_plan,
    )


__getattr__ = lazy_exports(__name__, _EXPORTS)
