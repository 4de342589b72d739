"""What an episode returns: the answer, its rows, every round's calls, and the figures."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edge_sql.agent.given import Given
from edge_sql.agent.parsing import looks_like_sql
from edge_sql.agent.stats import EpisodeStats
from edge_sql.charts import chart_for
from edge_sql.json_types import JSONObject
from edge_sql.tools import QueryResult, ToolResult

if TYPE_CHECKING:  # the checks (and sqlglot), pydantic: loaded only where used
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic_core import CoreSchema

    from edge_sql.agent.doubt import Doubt
    from edge_sql.checks import Checks


def json_value(value: object) -> object:
    """A SQLite value as JSON: a blob as datasette writes one, `{"$base64": true, "encoded":
    "AP8="}` (a hex string would read as text); everything else stays."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": True, "encoded": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def result_set(rows: Sequence[Sequence[object]]) -> set[tuple[object, ...]]:
    """The rows as BIRD compares them: a set of tuples (row order and duplicates ignored, column
    order kept, values equal as Python compares them). The one comparison of result sets: the
    evaluation's scoring (evaluation/scoring.py) and the vote (majority_vote.py) both use it."""
    return {tuple(row) for row in rows}


@dataclass
class CallRecord:
    """One tool call of a round and what it returned to the model."""

    tool: str
    args: dict[str, Any]  # Any: tool-args (parsing.ToolCall.args)
    ok: bool
    output: str

    def to_json(self) -> dict[str, object]:
        return {"tool": self.tool, "args": self.args, "ok": self.ok, "output": self.output}


@dataclass
class RoundRecord:
    """One tool round: the model's thinking and its calls, in order."""

    index: int
    think: str
    calls: list[CallRecord] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "think": self.think, "calls": [c.to_json() for c in self.calls]}


@dataclass
class EpisodeResult:
    """The outcome of one question.

    `sql` is the query whose result is returned: the model's answer, or with `fallback` the
    last query that ran without error. `stats` holds the figures (`agent/stats.py`; its
    `to_json` is the JSON's `stats`). `answer` is what the model itself gave (submit_sql or
    the forced final turn), even when it failed. `stop` says how the episode ended:
    "submitted", "final_answer", "cancelled" or "error" ("abstained" when a vote agreed too little:
    `answer` is then the voted SQL, `sql` None). `checks` says where each name and value of the
    answer came from, what the database holds of them, and the confidence (edge_sql/checks).
    `given` says which notes, verified answers and follow-up went into the evidence (None: the
    knowledge was not consulted); "verified" as `stop`: answered at once from a verified answer.
    `generated_spans`: the context positions the model itself wrote ([start, end) of each
    completion; the bench's fidelity compares there); not in the JSON. `doubt` says how sure the
    answer is, as the OpenAI and MCP replies do.

    JSON: `to_json()` is the one form (`run --json`, `/v1/ask`, SSE's `answer`); pydantic, and so
    FastAPI for an endpoint declared `-> EpisodeResult`, writes `to_json(transcript=False)`.
    """

    question: str
    evidence: str | None
    sql: str | None
    columns: list[str]
    rows: list[list[Any]]  # Any: sqlite3 (cells, read as their column holds them)
    truncated: bool
    forced: bool
    fallback: bool
    answer: str | None
    rounds: list[RoundRecord]
    stats: EpisodeStats
    transcript: str
    stop: str
    error: str | None = None
    force_reason: str | None = None
    prompt_version: str = ""
    checks: Checks | None = None
    given: Given | None = None
    generated_spans: list[list[int]] = field(default_factory=list)  # [start, end) of the model's own tokens

    @property
    def chart(
        self,
    ) -> dict[str, Any] | None:  # Any: usermeta (charts/spec.py)
        """The Vega-Lite spec of the answer's chart, chosen by the rules of edge_sql/charts from
        all its rows (docs/charts.md); None when no chart suits the result or there is none."""
        return chart_for(self.columns, self.rows, truncated=self.truncated) if self.sql is not None else None

    @property
    def ok(self) -> bool:
        """True when the episode produced a query that ran."""
        return self.sql is not None and self.error is None

    @property
    def doubt(self) -> Doubt:
        """How sure the answer is and how it came about (`agent/doubt.py`)."""
        from edge_sql.agent.doubt import doubt_of

        return doubt_of(self)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: type, handler: GetCoreSchemaHandler) -> CoreSchema:
        """For pydantic (FastAPI's `-> EpisodeResult`): an EpisodeResult, written as `to_json(transcript=False)`."""
        from pydantic_core import core_schema

        write = core_schema.plain_serializer_function_ser_schema(lambda result: result.to_json(transcript=False))
        return core_schema.is_instance_schema(cls, serialization=write)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JSONObject:
        return {"type": "object", "title": "EpisodeResult", "description": "edge-sql's answer: EpisodeResult.to_json()"}

    def to_json(self, *, transcript: bool = True) -> dict[str, object]:  # its rows' cells as json_value writes them
        """A JSON-ready dict (what `edge-sql run --json` prints); the raw transcript optional."""
        data: dict[str, object] = {
            "question": self.question,
            "evidence": self.evidence,
            "sql": self.sql,
            "columns": list(self.columns),
            "rows": [[json_value(v) for v in row] for row in self.rows],
            "truncated": self.truncated,
            "forced": self.forced,
            "fallback": self.fallback,
            "answer": self.answer,
            "stop": self.stop,
            "force_reason": self.force_reason,
            "error": self.error,
            "rounds": [r.to_json() for r in self.rounds],
            "stats": self.stats.to_json(),
            "prompt_version": self.prompt_version,
            "checks": self.checks.to_json() if self.checks is not None else None,
            "given": self.given.to_json() if self.given is not None else None,
            "chart": self.chart,
        }
        if transcript:
            data["transcript"] = self.transcript
        return data


@dataclass(frozen=True)
class SettledAnswer:
    """Which query's result an episode returns, and why."""

    sql: str | None
    result: QueryResult | None
    fallback: bool
    error: str | None


def settle_answer(
    answer: str | None,
    answer_run: ToolResult | None,
    last_good_sql: str | None,
    fallback_run: ToolResult | None,
    *,
    error: str | None,
) -> SettledAnswer:
    """The model's answer when it ran; else the fallback, the last query that ran without error
    (`fallback_run` is that query run again for its rows); else no answer, with the reason.

    `error` is what went wrong before (a broken final turn); it is kept when nothing ran.
    """
    if answer and answer_run is not None:
        if answer_run.ok:
            return SettledAnswer(answer, answer_run.query, False, None)
        if looks_like_sql(answer):
            error = f"the answer failed to run: {answer_run.output.removeprefix('Error: ')}"
        else:  # prose: SQLite's `near "The": syntax error` would not say what happened
            start = " ".join(answer.split())
            error = f"the final answer was not SQL: {start[:60] + ('...' if len(start) > 60 else '')!r}"
    if last_good_sql is not None and fallback_run is not None and fallback_run.ok:
        return SettledAnswer(last_good_sql, fallback_run.query, True, None)
    return SettledAnswer(None, None, False, error or "no answer: the model gave none and no query ran without error")
