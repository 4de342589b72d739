"""Room planning: how big the next generated segment may be so that the episode always fits.

An episode must end inside its token budget whatever the weights do, so before each segment
the loop asks how many tokens are left (after keeping room for the forced final turn) and
picks the segment's bounds so that its worst case fits. This module is that decision alone:
pure functions of numbers and a worst-case cost function, tested without a model.

Bounds shrink in a fixed order when room runs short: the SQL string bound first (halved down
to its minimum), then the thinking bound, then the name bound. Thinking is unbounded by
default (`Budget.max_think_tokens is None`): it gets all the room a full-size call leaves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from edge_sql.agent.budget import Budget


@dataclass(frozen=True)
class SegmentBounds:
    """Bounds of one generated segment: think tokens (0 for a segment without thinking) and
    the character bounds of SQL and name arguments."""

    think_tokens: int
    sql_chars: int
    name_chars: int


# worst-case tokens of a segment with these bounds
NeedFunction = Callable[[SegmentBounds], int]


def minimum_bounds(budget: Budget) -> SegmentBounds:
    """The smallest bounds a segment may be given."""
    think_cap = budget.max_think_tokens or budget.min_think_tokens
    return SegmentBounds(
        think_tokens=min(budget.min_think_tokens, think_cap),
        sql_chars=min(budget.min_string_chars, budget.max_sql_chars),
        name_chars=min(budget.min_string_chars, budget.max_name_chars),
    )


def plan_call_segment(available: int, budget: Budget, need: NeedFunction, *, think: bool) -> SegmentBounds | None:
    """The largest bounds whose worst case fits in `available` tokens, or None.

    `think` says whether the segment opens with (the rest of) a think block. Thinking takes the
    room a call at the current string bounds leaves, up to `budget.max_think_tokens`.
    """
    low = minimum_bounds(budget)
    sql, name = budget.max_sql_chars, budget.max_name_chars
    while True:
        if not think:
            if need(SegmentBounds(0, sql, name)) <= available:
                return SegmentBounds(0, sql, name)
        else:
            room = available - need(SegmentBounds(0, sql, name))
            cap = budget.max_think_tokens if budget.max_think_tokens is not None else room
            think_tokens = min(cap, room)
            if think_tokens >= low.think_tokens:
                return SegmentBounds(think_tokens, sql, name)
        if sql > low.sql_chars:
            sql = max(low.sql_chars, sql // 2)
        elif name > low.name_chars:
            name = max(low.name_chars, name // 2)
        else:
            return None


def final_think_tokens(available: int, budget: Budget, sql_tokens: int) -> int:
    """Thinking room of the forced final turn: what is left after the answer's SQL bound,
    capped by `budget.final_think_cap`, never below the minimum the reserve kept."""
    room = max(available - sql_tokens, budget.min_think_tokens)
    cap = budget.final_think_cap
    return min(cap, room) if cap is not None else room


def final_reserve_think_tokens(budget: Budget) -> int:
    """Thinking tokens always kept for the forced final turn."""
    floor = max(budget.min_think_tokens, FINAL_THINK_RESERVE)
    cap = budget.final_think_cap
    return min(cap, floor) if cap is not None else floor


# Thinking room always kept for the forced final turn (published forced answers think briefly;
# any room left at the end is added to it).
FINAL_THINK_RESERVE = 256
