"""The Python API: `Agent` loads a model once and answers many questions offline.

from edge_sql import Agent

with Agent() as agent:                       # the default model (pulled if absent)
    result = agent.ask("How many albums are there?", "chinook.sqlite")
    print(result.sql, result.rows)

with Agent(parallel=4) as agent:             # four episodes at once, one context
    results = agent.ask_many(["How many albums?", "How many artists?"], "chinook.sqlite")
    voted = agent.ask("Which genre sells most?", "chinook.sqlite", vote=4, seed=1)
"""

from edge_sql.api.agent import Agent
from edge_sql.api.asks import Ask, Watch
from edge_sql.api.plan import SessionPlan, load_settings, plan_sessions, prefix_state_dir, resolve_model_path, vote_plan

__all__ = [
    "Agent",
    "Ask",
    "SessionPlan",
    "Watch",
    "load_settings",
    "plan_sessions",
    "prefix_state_dir",
    "resolve_model_path",
    "vote_plan",
]
