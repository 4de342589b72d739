"""The result of scoring a dataset: per-question outcomes, accuracy overall and per difficulty."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edge_sql.errors import ReportError
from edge_sql.json_types import JSONObject

DIFFICULTY_ORDER = ("simple", "moderate", "challenging")


@dataclass(frozen=True)
class QuestionResult:
    """How one question scored; `error` says why it is wrong when the SQL failed."""

    id: str
    db_id: str
    difficulty: str | None
    correct: bool
    error: str | None
    predicted_sql: str | None
    gold_sql: str


@dataclass(frozen=True)
class Accuracy:
    """Correct answers out of a total."""

    correct: int
    total: int

    @property
    def percent(self) -> float:
        return 100.0 * self.correct / self.total if self.total else 0.0

    def to_json(self) -> dict[str, int | float]:
        return {"correct": self.correct, "total": self.total, "percent": round(self.percent, 2)}


def accuracy_of(results: list[QuestionResult]) -> Accuracy:
    return Accuracy(sum(r.correct for r in results), len(results))


@dataclass
class EvalReport:
    """Every question's result, with accuracy overall and per difficulty label."""

    results: list[QuestionResult]
    timeout_s: float
    dataset: str | None = None
    extra: JSONObject = field(default_factory=dict)

    @property
    def overall(self) -> Accuracy:
        return accuracy_of(self.results)

    @property
    def by_difficulty(self) -> dict[str, Accuracy]:
        """Accuracy per label: simple, moderate, challenging first, other labels after, sorted.
        Questions without a label (Spider) count only in `overall`."""
        labels = {r.difficulty for r in self.results if r.difficulty}
        ordered = [d for d in DIFFICULTY_ORDER if d in labels] + sorted(labels - set(DIFFICULTY_ORDER))
        return {d: accuracy_of([r for r in self.results if r.difficulty == d]) for d in ordered}

    def to_json(self) -> dict[str, object]:
        return {
            "dataset": self.dataset,
            "timeout_s": self.timeout_s,
            "overall": self.overall.to_json(),
            "by_difficulty": {d: a.to_json() for d, a in self.by_difficulty.items()},
            **self.extra,
            "results": [asdict(r) for r in self.results],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvalReport:  # Any: json.loads
        known = {"dataset", "timeout_s", "overall", "by_difficulty", "results"}
        return cls(
            results=[QuestionResult(**r) for r in data["results"]],
            timeout_s=data["timeout_s"],
            dataset=data.get("dataset"),
            extra={k: v for k, v in data.items() if k not in known},
        )

    def write_json(self, path: Path | str) -> None:
        """Write `to_json()` to `path`; raises ReportError when the file cannot be written."""
        text = json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ReportError(f"cannot write the report to {path}: {exc.strerror}", path=path) from None

    def format_table(self) -> str:
        """A plain-text table: one line per difficulty, then the overall line."""
        rows = [(d, a) for d, a in self.by_difficulty.items()] + [("overall", self.overall)]
        width = max(len("difficulty"), *(len(name) for name, _ in rows))
        lines = [f"{'difficulty':<{width}}  correct  total  accuracy"]
        lines += [f"{name:<{width}}  {a.correct:>7}  {a.total:>5}  {a.percent:>7.1f}%" for name, a in rows]
        return "\n".join(lines)
