"""Strict parsing of assistant turns: the think block, then bare JSON calls, one per line.

The grammar makes every generated turn parse; this module is the independent check (the
tests parse every assistant turn of every episode with it) and what turns text into calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from edge_sql.agent.grammar import CALL_SEPARATOR
from edge_sql.errors import EdgeSqlError
from edge_sql.tools.specs import TOOLS_BY_NAME, ToolSpec

_SQL_START = re.compile(r"(?:select|with)[^a-z0-9_;]", re.IGNORECASE)


class TurnParseError(EdgeSqlError):
    """An assistant turn that does not follow the protocol."""


@dataclass(frozen=True)
class ToolCall:
    """One call as the model wrote it: the tool, its arguments, and the raw JSON line."""

    tool: str
    args: dict[str, Any]
    raw: str = field(compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": dict(self.args)}


@dataclass(frozen=True)
class ToolTurn:
    think: str
    calls: list[ToolCall]


@dataclass(frozen=True)
class FinalTurn:
    think: str
    sql: str


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
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
    if not isinstance(args, dict):
        raise TurnParseError(f"{name}: args must be an object")
    check_args(spec, args)
    return ToolCall(tool=name, args=args, raw=line)


def check_args(spec: ToolSpec, args: dict[str, Any]) -> None:
    """Raise TurnParseError unless `args` has the spec's names and types (no extras)."""
    for key in args:
        if spec.arg(key) is None:
            raise TurnParseError(f"{spec.name}: unknown argument {key!r}")
    for name in spec.required_args:
        if name not in args:
            raise TurnParseError(f"{spec.name}: missing argument {name!r}")
    for arg in spec.args:
        if arg.name not in args:
            continue
        value = args[arg.name]
        if arg.type == "string" and not isinstance(value, str):
            raise TurnParseError(f"{spec.name}: {arg.name} must be a string")
        if arg.type == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                raise TurnParseError(f"{spec.name}: {arg.name} must be an integer")
            if (arg.minimum is not None and value < arg.minimum) or (arg.maximum is not None and value > arg.maximum):
                raise TurnParseError(f"{spec.name}: {arg.name}={value} is out of range")


def split_think(text: str, think_end: str, after_think: str) -> tuple[str, str]:
    """(thinking, the rest) of a turn whose text starts inside the think block."""
    end = text.find(think_end)
    if end < 0:
        raise TurnParseError(f"turn has no {think_end}")
    rest = text[end + len(think_end):]
    if not rest.startswith(after_think):
        raise TurnParseError(f"expected {after_think!r} after {think_end}")
    return text[:end], rest[len(after_think):]


def parse_tool_turn(text: str, *, think_end: str, after_think: str) -> ToolTurn:
    """A tool turn's text (after the assistant prefix, without the end-of-turn token)."""
    think, rest = split_think(text, think_end, after_think)
    lines = rest.split(CALL_SEPARATOR)
    if not rest or any(not line for line in lines):
        raise TurnParseError("a tool turn needs one or more calls, one per line")
    return ToolTurn(think=think, calls=[parse_call(line) for line in lines])


def parse_final_turn(text: str, *, think_end: str, after_think: str) -> FinalTurn:
    """The forced final turn: thinking, then one SQL statement (SELECT or WITH)."""
    think, rest = split_think(text, think_end, after_think)
    sql = rest.strip()
    if not _SQL_START.match(sql):
        raise TurnParseError("the final answer is not a SELECT or WITH statement")
    body = sql[:-1] if sql.endswith(";") else sql
    if ";" in body:
        raise TurnParseError("the final answer holds more than one statement")
    return FinalTurn(think=think, sql=body.strip())
