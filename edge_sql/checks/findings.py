"""The typed records a check produces: names, values, findings and the confidence they add up to.

Everything here is plain data with `to_json`, so the CLI's `--json`, HTTP, SSE, MCP and the page
carry the same objects the one-line summary is printed from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Level = Literal["doubtful", "unchecked", "note"]
Confidence = Literal["checked", "unchecked", "doubtful"]
# Ordered worst first: an answer's confidence is the worst level among its findings.
CONFIDENCE_LEVELS: tuple[Confidence, ...] = ("doubtful", "unchecked", "checked")
# Why an episode's final answer was forced (`EpisodeResult.force_reason`), in words: one table for
# the checks' finding and every surface's "forced final answer" note, so they never disagree.
FORCE_REASONS = {
    "max_rounds": "tool rounds used up",
    "failed_queries": "too many failed queries",
    "context": "context budget reached",
}


@dataclass(frozen=True)
class Sighting:
    """Where an episode showed a name or value to the model: a call (`round` as RoundRecord.index,
    `call` its 0-based place in the round) or the question / evidence text (`round` None)."""

    tool: str
    round: int | None = None
    call: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"tool": self.tool, "round": self.round, "call": self.call}

    def text(self) -> str:
        return self.tool if self.round is None else f"round {self.round} {self.tool}"


@dataclass
class NameUse:
    """A table or column the SQL uses, by its stored name. `seen` is None when there is no episode
    to look in (`edge-sql check`), else the sightings, first first (empty: never shown)."""

    kind: Literal["table", "column"]
    table: str
    column: str | None = None
    seen: list[Sighting] | None = None

    @property
    def name(self) -> str:
        return self.table if self.column is None else f"{self.table}.{self.column}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "name": self.name,
            "table": self.table,
            "column": self.column,
            "seen": None if self.seen is None else [s.to_json() for s in self.seen],
        }


@dataclass
class ValueCheck:
    """One literal compared with a column, and whether the column holds a match.

    `found` is True/False, or None when the check could not say (time limit, a bounded scan of a
    large table that found nothing). `scope` says how far it looked ("index", "table", or "first N
    rows"); `closest` are stored values near the literal when none matched, `closest_how` how they
    were found ("case", "prefix", "nearest")."""

    table: str
    column: str
    op: str
    value: str | int | float  # the literal's value (names.Comparison.value)
    literal: str
    found: bool | None
    scope: str
    closest: list[object] = field(default_factory=list)  # stored values (values.py), a blob among them maybe
    closest_how: str | None = None
    note: str | None = None
    seen: list[Sighting] | None = None

    @property
    def target(self) -> str:
        return f"{self.table}.{self.column}"

    def to_json(self) -> dict[str, object]:  # `closest` may hold a blob: json.dumps(default=...) writes it
        return {
            "table": self.table,
            "column": self.column,
            "op": self.op,
            "value": self.value,
            "literal": self.literal,
            "found": self.found,
            "scope": self.scope,
            "closest": list(self.closest),
            "closest_how": self.closest_how,
            "note": self.note,
            "seen": None if self.seen is None else [s.to_json() for s in self.seen],
        }


@dataclass(frozen=True)
class Finding:
    """One reason that lowers (or only annotates) the confidence: `code` is stable, `message` says it."""

    level: Level
    code: str
    message: str

    def to_json(self) -> dict[str, object]:
        return {"level": self.level, "code": self.code, "message": self.message}


@dataclass
class Checks:
    """What was checked about one answer's SQL and how sure it makes the answer.

    `confidence` is the worst level among `findings` ("checked" when none lowers it);
    `provenance` says whether names and values were looked up in an episode's transcript;
    `agreement` is the vote's share (None without a vote). `wall_s`, what the checks took, is
    left out of `to_json`, so that equal answers print equal (benchmarks/episodes/bench_checks.py times it)."""

    sql: str
    names: list[NameUse]
    values: list[ValueCheck]
    findings: list[Finding]
    provenance: bool = False
    agreement: float | None = None
    wall_s: float = 0.0

    @property
    def confidence(self) -> Confidence:
        levels = {f.level for f in self.findings}
        return next((c for c in CONFIDENCE_LEVELS[:2] if c in levels), "checked")

    @property
    def reasons(self) -> list[str]:
        """The messages of the findings that set the confidence (all of them for "checked")."""
        level = self.confidence
        return [f.message for f in self.findings if f.level == level or level == "checked"]

    def add(self, level: Level, code: str, message: str) -> None:
        self.findings.append(Finding(level, code, message))

    def summary(self) -> str:
        """One line: the confidence, what was checked, and each warning (what `run` prints)."""
        tables = sum(1 for n in self.names if n.kind == "table")
        columns = sum(1 for n in self.names if n.kind == "column")
        found = sum(1 for v in self.values if v.found)
        head = (
            f"checks: {self.confidence} ({tables} table{'s' * (tables != 1)}, "
            f"{columns} column{'s' * (columns != 1)}, {found}/{len(self.values)} "
            f"value{'s' * (len(self.values) != 1)} found"
            + (", names traced to the episode" if self.provenance else "")
            + ")"
        )
        warnings = [f.message for f in self.findings if f.level != "note"]
        return head + "".join(f"; {w}" for w in warnings)

    def to_json(self) -> dict[str, object]:  # its values' `closest` may hold a blob
        return {
            "confidence": self.confidence,
            "reasons": self.reasons,
            "findings": [f.to_json() for f in self.findings],
            "names": [n.to_json() for n in self.names],
            "values": [v.to_json() for v in self.values],
            "provenance": self.provenance,
            "agreement": self.agreement,
        }
