"""The episode budget: tool rounds, failed queries in a row, tokens, and per-turn bounds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from edge_sql.errors import BudgetError
from edge_sql.runtime.options import DEFAULT_CONTEXT_TOKENS


@dataclass(frozen=True)
class Budget:
    """Limits of one episode. The first three are the protocol's; the rest bound each turn.

    After `max_rounds` tool rounds, or `max_failed_queries` failed `run_query` calls in a
    row, the model gets one forced final turn. The whole episode (prompt, turns, results)
    stays within `max_tokens` (and the session's context); the final turn is forced early
    when another round would not fit.

    Training capped rounds, not calls, and nothing published bounds a think block below the
    episode budget, so by default (None) calls per turn and thinking are bounded only by the
    room left in the episode; set them to impose a cap. `max_think_tokens` bounds every think
    block, the forced final turn's included (the CLI's `--think-tokens`), unless
    `max_final_think_tokens` sets that one apart.

    A minimum (`min_think_tokens`, `min_string_chars`) yields to a smaller maximum while it has
    its default; one set to another value above a maximum it floors is refused.
    """

    max_rounds: int = 6
    max_failed_queries: int = 4
    max_tokens: int = DEFAULT_CONTEXT_TOKENS
    max_calls_per_turn: int | None = None
    max_think_tokens: int | None = None
    max_final_think_tokens: int | None = None
    max_sql_chars: int = 2000  # `sql` arguments of run_query / submit_sql
    max_name_chars: int = 128  # table and column names
    min_string_chars: int = 16  # strings are never bounded below this
    min_think_tokens: int = 16  # nor thinking, when the room runs short
    max_final_sql_tokens: int = 512
    max_result_rows: int = 1000  # rows of the final query kept in the result

    def __post_init__(self) -> None:
        for name in (
            "max_rounds",
            "max_failed_queries",
            "max_calls_per_turn",
            "max_think_tokens",
            "max_final_think_tokens",
            "max_sql_chars",
            "max_name_chars",
            "min_string_chars",
            "min_think_tokens",
            "max_final_sql_tokens",
            "max_result_rows",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise BudgetError(f"Budget.{name}={value} is out of range (at least 1)")
        if self.max_tokens < MIN_EPISODE_TOKENS:
            raise BudgetError(f"Budget.max_tokens={self.max_tokens} is out of range (at least {MIN_EPISODE_TOKENS})")
        defaults = {f.name: f.default for f in fields(self)}
        for low, high in _FLOORED:
            floor, cap = getattr(self, low), getattr(self, high)
            if floor != defaults[low] and cap is not None and floor > cap:
                raise BudgetError(
                    f"Budget.{low}={floor} is above Budget.{high}={cap}: a minimum must not exceed its maximum"
                )

    @property
    def final_think_cap(self) -> int | None:
        """The forced final turn's thinking bound: its own, else every think block's (None: none)."""
        return self.max_final_think_tokens if self.max_final_think_tokens is not None else self.max_think_tokens


# The architecture of the model the protocol's defaults are for (Qwen3.5, trained with them).
TRAINED_ARCHITECTURE = "qwen35"

# Bounds that let a small model finish an episode in seconds to a minute (SmolLM2-135M: 3 rounds,
# 6 calls, 262 tokens in 34 s on one thread of a 2-core Xeon at load average 8, against 134
# list_tables calls in 11 minutes with the defaults): (CLI option, Budget field, value).
SMALL_MODEL_BOUNDS = (
    ("--max-rounds", "max_rounds", 3),
    ("--calls-per-turn", "max_calls_per_turn", 2),
    ("--think-tokens", "max_think_tokens", 16),
    ("--budget max_final_sql_tokens=", "max_final_sql_tokens", 40),
    ("--budget max_name_chars=", "max_name_chars", 24),
    ("--budget max_sql_chars=", "max_sql_chars", 80),
)


def small_model_note(file_name: str, architecture: str, model_name: str | None, budget: Budget) -> str | None:
    """What to say once when a model that was not trained for the protocol runs with the
    protocol's open bounds (thinking and calls per turn limited only by the 12,288-token
    episode): the options that exist and values that suit a small model. None otherwise."""
    if (
        architecture == TRAINED_ARCHITECTURE
        or budget.max_calls_per_turn is not None
        or budget.max_think_tokens is not None
    ):
        return None
    named = f"{architecture} model ({model_name})" if model_name else f"{architecture} model"
    options = " ".join(
        f"{flag}{value}" if flag.endswith("=") else f"{flag} {value}" for flag, _, value in SMALL_MODEL_BOUNDS
    )
    fields_ = ", ".join(f"{field}={value}" for _, field, value in SMALL_MODEL_BOUNDS)
    return (
        f"note: {file_name} is a {named}, not the Qwen3.5 model whose training these defaults follow: they "
        "bound thinking and calls per turn only by the 12,288-token episode, which a small model can fill "
        f"for many minutes. For a small model: {options} --ctx 2048, which `--profile small` holds "
        f"(Python: Budget({fields_}))"
    )


# The fewest tokens an episode may be given: the protocol's prompt alone is about 400.
MIN_EPISODE_TOKENS = 512

# (minimum, maximum) pairs: the minimum is a floor the room planner keeps under that maximum
_FLOORED = (
    ("min_think_tokens", "max_think_tokens"),
    ("min_think_tokens", "max_final_think_tokens"),
    ("min_string_chars", "max_sql_chars"),
    ("min_string_chars", "max_name_chars"),
)


def parse_budget_items(items: Iterable[str]) -> dict[str, int]:
    """`["max_rounds=2"]` -> {"max_rounds": 2}; ValueError says which item is wrong and how: not
    FIELD=N, an unknown field, a value that is not a whole number, or one out of range."""
    known = {f.name for f in fields(Budget)}
    changes: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or name not in known:
            raise ValueError(f"{item!r} is not FIELD=N with FIELD one of: {', '.join(sorted(known))}")
        try:
            changes[name] = int(value)
        except ValueError:
            raise ValueError(f"{item!r}: {name} takes a whole number, not {value!r}") from None
    try:
        Budget(**changes)  # checks the values against the Budget's own bounds
    except ValueError as exc:
        raise ValueError(str(exc).replace("Budget.", "")) from None
    return changes


@dataclass
class RoundCounter:
    """Counts rounds and failed `run_query` calls in a row; says when to force the answer."""

    budget: Budget
    rounds: int = 0
    failed_in_a_row: int = 0
    last_good_sql: str | None = None

    def record_query(self, sql: str, ok: bool) -> None:
        """A run_query call finished: a success resets the failure streak and is remembered."""
        if ok:
            self.failed_in_a_row = 0
            self.last_good_sql = sql
        else:
            self.failed_in_a_row += 1

    def end_round(self) -> None:
        self.rounds += 1

    @property
    def turns_left(self) -> int:
        return max(0, self.budget.max_rounds - self.rounds)

    @property
    def force_reason(self) -> str | None:
        """Why the next assistant turn must be the forced final one, or None while it need not."""
        if self.turns_left == 0:
            return "max_rounds"
        if self.failed_in_a_row >= self.budget.max_failed_queries:
            return "failed_queries"
        return None
