"""Where an episode showed each name and value of its answer to the model.

A call shows a table it was called on or that ran a query on it, and the tables its output lists
(`list_tables`: only listed, the model saw no column of them; `foreign_keys`, `join_path`).
It shows a column where its output does: `describe_table`, `sample_rows`, `distinct_values`, `foreign_keys` and
`join_path` show a table's columns, a `run_query` that ran shows its result's header and rows
(the columns count for the tables its SQL names). The question and its evidence are text the
model read too. Names match as SQLite matches them (case-insensitive, whole words, quoted or
bracketed); a text value matches a whole cell of a result, or a quoted or whole-word mention in
the question or evidence; a `LIKE` pattern matches by its text without the wildcards. The
answer's own `submit_sql` call shows nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from edge_sql.checks.findings import Checks, NameUse, Sighting, ValueCheck

MAX_SIGHTINGS = 5
_SHOWING_COLUMNS = ("describe_table", "sample_rows", "distinct_values", "foreign_keys", "join_path")
_RESULT_TOOLS = ("sample_rows", "distinct_values", "run_query")
_LISTING_TABLES = ("list_tables", "foreign_keys", "join_path")


class CallLike(Protocol):
    """A recorded call (agent.result.CallRecord): what provenance reads of it."""

    @property
    def tool(self) -> str: ...
    @property
    def args(self) -> Mapping[str, object]: ...
    @property
    def ok(self) -> bool: ...
    @property
    def output(self) -> str: ...


class RoundLike(Protocol):
    """A recorded round (agent.result.RoundRecord)."""

    @property
    def index(self) -> int: ...
    @property
    def calls(self) -> Sequence[CallLike]: ...


def _word(name: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])", re.IGNORECASE)


def _cells(output: str) -> set[str]:
    """Every cell of a formatted result (`a | b` lines), the header's included."""
    cells: set[str] = set()
    for line in output.splitlines():
        cells.update(part.strip() for part in line.split(" | "))
    return cells


def _header(output: str) -> str:
    return output.split("\n", 1)[0]


def attach_provenance(checks: Checks, rounds: Sequence[RoundLike], question: str, evidence: str | None) -> None:
    """Fill `seen` of every name and value in `checks` from the episode, and add the findings:
    a name never shown (doubtful), a table only listed (unchecked), a value found in its column
    but never shown (unchecked)."""
    calls = [
        (r.index, i, c)
        for r in rounds
        for i, c in enumerate(r.calls)
        if c.ok and c.tool not in ("submit_sql", "answer")
    ]
    texts = [("question", question or ""), ("evidence", evidence or "")]
    for use in checks.names:
        use.seen = _name_sightings(use, calls, texts)
    for value in checks.values:
        value.seen = _value_sightings(value, calls, texts)
    checks.provenance = True
    for use in checks.names:
        assert use.seen is not None
        if not use.seen:
            checks.add("doubtful", "unseen_name", f"{use.kind} {use.name} was never shown to the model")
        elif use.kind == "table" and all(s.tool in ("list_tables", "question", "evidence") for s in use.seen):
            checks.add("unchecked", "table_only_listed", f"table {use.name} was only listed, never described")
    for value in checks.values:
        if value.found and not value.seen:
            checks.add(
                "unchecked", "unseen_value", f"{value.literal} was never shown to the model (found in {value.target})"
            )


def _name_sightings(
    use: NameUse, calls: list[tuple[int, int, CallLike]], texts: list[tuple[str, str]]
) -> list[Sighting]:
    table = _word(use.table)
    column = _word(use.column) if use.column is not None else None
    seen: list[Sighting] = []
    for round_index, call_index, call in calls:
        args = " ".join(str(v) for v in call.args.values())
        if column is None:
            shown = table.search(args) or (call.tool in _LISTING_TABLES and table.search(call.output))
        elif call.tool == "run_query":
            shown = table.search(args) and column.search(_header(call.output))
        else:
            shown = (
                call.tool in _SHOWING_COLUMNS
                and (table.search(args) or table.search(call.output))
                and column.search(call.output)
            )
        if shown:
            seen.append(Sighting(call.tool, round_index, call_index))
    for tool, text in texts:
        if (column or table).search(text):
            seen.append(Sighting(tool))
    return seen[:MAX_SIGHTINGS]


def _value_text(value: ValueCheck) -> str:
    text = str(value.value)
    if value.op == "LIKE":
        text = " ".join(re.sub(r"[%_]", " ", text).split())
    elif value.op == "GLOB":
        text = " ".join(re.sub(r"[*?\[\]]", " ", text).split())
    return text


def _value_sightings(
    value: ValueCheck, calls: list[tuple[int, int, CallLike]], texts: list[tuple[str, str]]
) -> list[Sighting]:
    text = _value_text(value)
    if not text:
        return [Sighting("pattern")]  # a pattern of wildcards only names no value
    pattern = value.op in ("LIKE", "GLOB")
    word = _word(text)
    seen: list[Sighting] = []
    for round_index, call_index, call in calls:
        if call.tool not in _RESULT_TOOLS:
            continue
        body = call.output.split("\n", 1)[1] if "\n" in call.output else ""
        if word.search(body) if pattern else text in _cells(body):
            seen.append(Sighting(call.tool, round_index, call_index))
    for tool, source in texts:
        if word.search(source) or f"'{text}'" in source or f'"{text}"' in source:
            seen.append(Sighting(tool))
    return seen[:MAX_SIGHTINGS]
