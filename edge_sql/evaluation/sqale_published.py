"""The three published SQaLe episodes (`edge_sql/data/sqale_published/`): read, with their calls'
arguments as the tools take them.

Shared by the task calibration of `edge-sql imatrix` (`imatrix_text.py`: the episodes replayed as
text), `benchmarks/runtime/bench_speculative.py` (lookup acceptance on the published text), the
protocol tests and the checks benchmark (`benchmarks/sqale/replay.py` rebuilds the episodes'
databases on top of it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import TypedDict

from edge_sql.json_types import JSONValue
from edge_sql.tools import TOOLS_BY_NAME

PUBLISHED_JSON = Path(__file__).resolve().parents[1] / "data" / "sqale_published" / "episodes.json"


class PublishedCall(TypedDict):
    """One call as the page shows it: its args as the page writes them (see `call_args`), its
    output (None: not published), how many times it was made (`n`) and when (`t`)."""

    tool: str
    args: str
    out: str | None
    n: int
    t: list[JSONValue]


class PublishedRound(TypedDict):
    """One round: its label, the model's thinking, its calls, the budget line after it (None: none
    shown) and whether the answer was forced."""

    label: str
    think: str
    nCalls: int
    calls: list[PublishedCall]
    budget: str | None
    forced: bool


class PublishedFinal(TypedDict):
    """The episode's final SQL and its result as published (`more`: the page cut the rows)."""

    sql: str
    columns: list[str]
    rows: list[list[JSONValue]]
    more: bool
    used: list[str]


class PublishedEpisode(TypedDict):
    """One episode of the page (episodes.json), as it holds it."""

    id: str
    title: str
    schemaId: str
    nTables: int
    difficulty: str
    question: str
    hint: str
    correct: bool
    note: str
    tables: list[str]
    rounds: list[PublishedRound]
    final: PublishedFinal


@lru_cache(maxsize=1)
def load_episodes() -> tuple[PublishedEpisode, ...]:
    """The three published episodes, as the page holds them."""
    return tuple(json.loads(PUBLISHED_JSON.read_text(encoding="utf-8"))["episodes"])


def episode(episode_id: str) -> PublishedEpisode:
    return next(ep for ep in load_episodes() if ep["id"] == episode_id)


def published_calls(ep: PublishedEpisode) -> Iterable[tuple[int, int, PublishedCall]]:
    """(round index, call index, call) of every published call, the forced answer included."""
    for r_index, round_ in enumerate(ep["rounds"]):
        for c_index, call in enumerate(round_["calls"]):
            yield r_index, c_index, call


def call_args(tool: str, args_text: str) -> dict[str, JSONValue]:
    """The page's args string as the tool's args dict, by the argument order in `specs.py`.

    The page writes JSON values separated by commas (`"AlertLogs", 10`), except the SQL of
    `run_query`/`submit_sql`, which it shows bare.
    """
    spec = TOOLS_BY_NAME[tool]
    if not args_text.strip():
        return {}
    try:
        values = json.loads(f"[{args_text}]")
    except json.JSONDecodeError:
        values = None
    if values is None or len(values) > len(spec.args):
        if len(spec.args) != 1 or spec.args[0].type != "string":
            raise ValueError(f"cannot read the args of {tool}: {args_text!r}")
        values = [args_text]  # bare SQL
    return {arg.name: value for arg, value in zip(spec.args, values)}
