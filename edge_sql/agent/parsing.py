"""Strict parsing of assistant turns: the think block, then bare JSON calls.

The grammar makes every generated turn parse; this module is the independent check (the
tests parse every assistant turn of every episode with it) and what turns text into calls.
Like the training environment, which ran every call it found in the text, a tool turn is a
sequence of JSON objects separated by whitespace that holds a line break; each is checked
against its tool's spec. The final answer is SQL as text; `final_sql` takes the query out of a fenced block,
prose or several statements before it runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, NoReturn

from edge_sql.errors import TurnParseError
from edge_sql.json_types import JSONObject, JSONValue
from edge_sql.tools.arguments import ToolCallError, checked_args
from edge_sql.tools.specs import TOOLS_BY_NAME

_FENCE_CLOSE = "```"
_TOOL_CALL = re.compile(r'\{\s*"tool"')
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ToolCall:
    """One call as the model wrote it: the tool, its arguments, and the raw JSON line."""

    tool: str
    args: dict[str, Any]  # Any: tool-args (strings and integers, checked against the spec)
    raw: str = field(compare=False)

    def to_json(self) -> dict[str, object]:
        return {"tool": self.tool, "args": dict(self.args)}


@dataclass(frozen=True)
class ToolTurn:
    think: str
    calls: list[ToolCall]


@dataclass(frozen=True)
class FinalTurn:
    think: str
    sql: str


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, JSONValue]]) -> JSONObject:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")
    return dict(pairs)


def parse_call(line: str) -> ToolCall:
    """One `{"tool": NAME, "args": {...}}` line, checked against the tool's spec."""
    try:
        data = json.loads(line, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except ValueError as exc:
        raise TurnParseError(f"call is not valid JSON ({exc}): {line[:200]!r}") from None
    if not isinstance(data, dict) or set(data) != {"tool", "args"}:
        raise TurnParseError(f'call must be an object with exactly "tool" and "args": {line[:200]!r}')
    name, args = data["tool"], data["args"]
    spec = TOOLS_BY_NAME.get(name) if isinstance(name, str) else None
    if spec is None:
        raise TurnParseError(f"unknown tool {name!r}")
    try:
        checked_args(spec, args, strict=True)
    except ToolCallError as exc:
        raise TurnParseError(str(exc)) from None
    return ToolCall(tool=name, args=args, raw=line)


def split_think(text: str, think_end: str, after_think: str) -> tuple[str, str]:
    """(thinking, the rest) of a turn whose text starts inside the think block."""
    end = text.find(think_end)
    if end < 0:
        raise TurnParseError(f"turn has no {think_end}")
    rest = text[end + len(think_end) :]
    if not rest.startswith(after_think):
        raise TurnParseError(f"expected {after_think!r} after {think_end}")
    return text[:end], rest[len(after_think) :]


def split_calls(text: str) -> list[str]:
    """The JSON objects in `text`, as written: each starts on a new line (the first may start at
    once), whitespace between them. Raises TurnParseError for anything else."""
    calls: list[str] = []
    pos, end = 0, len(text)
    while True:
        start = pos
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos == end:
            return calls
        if calls and "\n" not in text[start:pos]:
            raise TurnParseError(f"calls must start on a new line: {text[pos : pos + 200]!r}")
        try:
            _, stop = _DECODER.raw_decode(text, pos)
        except ValueError as exc:
            raise TurnParseError(f"call is not valid JSON ({exc}): {text[pos : pos + 200]!r}") from None
        calls.append(text[pos:stop])
        pos = stop


def parse_tool_turn(text: str, *, think_end: str, after_think: str) -> ToolTurn:
    """A tool turn's text (after the assistant prefix, without the end-of-turn token)."""
    think, rest = split_think(text, think_end, after_think)
    raw_calls = split_calls(rest)
    if not raw_calls:
        raise TurnParseError("a tool turn needs one or more calls")
    return ToolTurn(think=think, calls=[parse_call(raw) for raw in raw_calls])


def final_sql(text: str) -> str:
    """The SQL of a final answer written as text.

    A plain answer (one statement, maybe in one fenced block, maybe with a trailing `;`) is
    run as written. A small model often wraps the query in prose ("You can use this query:
    ```sql ...```") or writes several statements: then the last fenced block is the answer,
    and within it (or without fences) the last statement that sqlglot parses as a query.
    Raises TurnParseError when nothing is left, when it is a tool call, when it holds a NUL
    character, or when it holds more than one statement and none of them parses.
    """
    stripped = text.strip()
    blocks = _fenced_blocks(stripped)
    sql = _unquoted(_strip_end(blocks[-1] if blocks else stripped))
    if not sql:
        raise TurnParseError("the final answer is empty")
    if sql.startswith("{") or _TOOL_CALL.search(sql):
        raise TurnParseError("the final answer is a tool call, not SQL")
    if "\x00" in sql:  # SQLite cannot take it (Python's sqlite3 raises ValueError), as in a tool's arguments
        raise TurnParseError("the final answer contains a NUL character")
    if ";" not in sql and _SQL_START.match(sql):
        return sql  # a plain answer runs as written: SQLite, not sqlglot, says what is wrong with it
    found = _last_query(sql)
    if found is not None:
        return found
    if ";" in sql:
        raise TurnParseError("the final answer holds more than one statement and none of them parses")
    return sql


_STATEMENT_START = re.compile(
    r"(?:select|with|values|insert|update|delete|replace|create|drop|alter|pragma|explain|attach|detach)\b|\(",
    re.IGNORECASE,
)
_QUOTES = ('"', "'", "`")


def looks_like_sql(text: str) -> bool:
    """True when `text` starts as an SQL statement does (a keyword or `(`): a final answer that
    does not is prose, and its failure to run is said as such, not as SQLite's syntax error."""
    return bool(_STATEMENT_START.match(text.lstrip()))


def _unquoted(sql: str) -> str:
    """A final answer written as one quoted string (`"SELECT ..."`) without its quotes: SQLite
    would read it as a string literal or a name and hide what is wrong with the query inside."""
    for quote in _QUOTES:
        inner = sql[1:-1].strip()
        if len(sql) > 2 and sql[0] == sql[-1] == quote and quote not in inner and looks_like_sql(inner):
            return _strip_end(inner)
    return sql


_FENCED_BLOCK = re.compile(r"```[A-Za-z]*[ \t]*\r?\n(.*?)(?:```|\Z)", re.DOTALL)
_SQL_START = re.compile(r"(?:select|with|values)\b|\(", re.IGNORECASE)


def _fenced_blocks(text: str) -> list[str]:
    """The bodies of the fenced blocks in `text`, in order (a last one left open included)."""
    return [match.group(1) for match in _FENCED_BLOCK.finditer(text)]


def _strip_end(sql: str) -> str:
    sql = sql.strip()
    if sql.endswith(_FENCE_CLOSE):
        sql = sql[: -len(_FENCE_CLOSE)].rstrip()
    while sql.endswith(";"):
        sql = sql[:-1].rstrip()
    return sql


def _last_query(text: str) -> str | None:
    """The last statement in `text` that parses as one query, prose around it left out: of
    each `;`-separated part (last first), the longest run of lines that starts on a line
    opening with SELECT, WITH, VALUES or `(` and parses."""
    import sqlite3

    parts, current = [], ""
    for piece in text.split(";"):  # `;` inside a string literal does not end a statement
        current = f"{current};{piece}" if current else piece
        if sqlite3.complete_statement(current + ";"):
            parts.append(current)
            current = ""
    parts.append(current)
    for part in reversed(parts):
        lines = part.strip().splitlines()
        for start, line in enumerate(lines):
            if not _SQL_START.match(line.lstrip()):
                continue
            for end in range(len(lines), start, -1):
                candidate = "\n".join(lines[start:end]).strip()
                if _parses_as_query(candidate):
                    return candidate
    return None


def _parses_as_query(sql: str) -> bool:
    """True when sqlglot reads `sql` (SQLite's dialect) as exactly one query."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        statements = sqlglot.parse(sql, read="sqlite")
    except SqlglotError:
        return False
    return len(statements) == 1 and isinstance(statements[0], exp.Query)


def parse_final_turn(text: str, *, think_end: str, after_think: str) -> FinalTurn:
    """The forced final turn: thinking, then the SQL as text (see `final_sql`)."""
    think, rest = split_think(text, think_end, after_think)
    return FinalTurn(think=think, sql=final_sql(rest))
