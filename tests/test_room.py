"""Room planning without a model: segment bounds always fit, thinking is bounded only by room."""

from __future__ import annotations

import pytest

from edge_sql.agent import Budget
from edge_sql.agent.result import settle_answer
from edge_sql.agent.room import (
    SegmentBounds,
    final_reserve_think_tokens,
    final_think_tokens,
    minimum_bounds,
    plan_call_segment,
)
from edge_sql.tools import QueryResult, ToolResult


def need(bounds: SegmentBounds) -> int:
    """A stand-in worst case: thinking, 4 tokens per SQL character, 2 per name character, 50 fixed."""
    return bounds.think_tokens + 4 * bounds.sql_chars + 2 * bounds.name_chars + 50


def test_thinking_takes_all_the_room_a_full_call_leaves_by_default():
    budget = Budget()
    assert budget.max_think_tokens is None and budget.max_calls_per_turn is None
    full_call = need(SegmentBounds(0, budget.max_sql_chars, budget.max_name_chars))
    bounds = plan_call_segment(full_call + 5000, budget, need, think=True)
    assert bounds == SegmentBounds(5000, budget.max_sql_chars, budget.max_name_chars)
    assert need(bounds) == full_call + 5000


def test_a_think_cap_is_kept_when_set():
    budget = Budget(max_think_tokens=300)
    bounds = plan_call_segment(100_000, budget, need, think=True)
    assert bounds is not None and bounds.think_tokens == 300


@pytest.mark.parametrize("available", [60, 200, 900, 3000, 9000, 20_000])
def test_bounds_always_fit_and_shrink_sql_first(available):
    budget = Budget()
    bounds = plan_call_segment(available, budget, need, think=True)
    low = minimum_bounds(budget)
    if bounds is None:
        assert need(SegmentBounds(low.think_tokens, low.sql_chars, low.name_chars)) > available
        return
    assert need(bounds) <= available
    assert bounds.think_tokens >= low.think_tokens
    if bounds.name_chars < budget.max_name_chars:
        assert bounds.sql_chars == low.sql_chars  # names shrink only after SQL is at its minimum


def test_call_segments_without_thinking():
    budget = Budget()
    bounds = plan_call_segment(10_000, budget, need, think=False)
    assert bounds == SegmentBounds(0, budget.max_sql_chars, budget.max_name_chars)
    assert plan_call_segment(10, budget, need, think=False) is None


def test_final_turn_thinking_uses_the_room_left():
    budget = Budget()
    assert final_think_tokens(5000, budget, 512) == 4488
    assert final_think_tokens(100, budget, 512) == budget.min_think_tokens
    assert final_think_tokens(5000, Budget(max_final_think_tokens=64), 512) == 64
    assert final_reserve_think_tokens(budget) >= budget.min_think_tokens
    assert final_reserve_think_tokens(Budget(max_final_think_tokens=20)) == 20


def test_a_think_cap_bounds_the_forced_final_turn_too():
    """Budget(max_think_tokens=N) in the API means what --think-tokens N means in the CLI."""
    assert final_think_tokens(5000, Budget(max_think_tokens=8), 512) == 8
    assert final_reserve_think_tokens(Budget(max_think_tokens=8)) == 8
    assert final_think_tokens(5000, Budget(max_think_tokens=8, max_final_think_tokens=40), 512) == 40


# ---- which answer an episode returns ------------------------------------------------------------

ROWS = QueryResult(columns=["n"], rows=[(3,)], truncated=False)
OK = ToolResult(True, "n\n3", ROWS)
FAILED = ToolResult(False, "Error: no such table: nope")


def test_the_models_answer_when_it_runs():
    settled = settle_answer("SELECT 3", OK, "SELECT 1", None, error=None)
    assert (settled.sql, settled.result, settled.fallback, settled.error) == ("SELECT 3", ROWS, False, None)


def test_fallback_to_the_last_good_query_when_the_answer_fails():
    settled = settle_answer("SELECT * FROM nope", FAILED, "SELECT 1", OK, error=None)
    assert (settled.sql, settled.fallback, settled.error) == ("SELECT 1", True, None)


def test_no_answer_says_why():
    failed = settle_answer("SELECT * FROM nope", FAILED, None, None, error=None)
    assert failed.sql is None and failed.error == "the answer failed to run: no such table: nope"
    broken = settle_answer(None, None, None, None, error="the final answer was not usable: empty")
    assert broken.error == "the final answer was not usable: empty"
    nothing = settle_answer(None, None, None, None, error=None)
    assert nothing.error == "no answer: the model gave none and no query ran without error"
