"""llguidance Lark grammars for assistant turns, built from `TOOL_SPECS`.

A tool turn is generated in segments so that every segment fits the room left in the
episode, whatever the weights do:

* `first_call_grammar`: the rest of the `<think>` block (at most `max_think_tokens`), the
  think-end token, then exactly one call `{"tool": "NAME", "args": {...}}`;
* `next_call_grammar`: nothing (the model ends its turn with the end-of-turn token, a stop
  token) or a newline and one more call.

A call's argument names and types come from the tool's spec: strings are JSON strings with a
character bound, integers are bounded. `GrammarText.max_tokens` is a worst-case token count
for the segment (every byte its own token, plus the token-bounded think block), so the
episode can tell before generating whether a segment fits.

The forced final turn (`final_grammar`) is a bounded think block, then one SQL statement
starting with the word SELECT or WITH (any case), no `;` inside except an optional final
one, at most `max_sql_tokens` tokens.

Bounds that must hold exactly use character counts inside regexes: llguidance's
`max_tokens=` ends a lexeme where it stands, which would cut a JSON string mid-escape. It is
used only where any prefix is fine (thinking text, the final SQL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from edge_sql.tools.specs import TOOL_SPECS, ToolArg, ToolSpec

# Bytes one character of a JSON string may take: a 4-byte UTF-8 character (`\uXXXX` escapes
# are not allowed, so the longest escape is 2 bytes).
MAX_BYTES_PER_CHAR = 4
# Slack per segment for tokens that straddle lexeme boundaries.
SEGMENT_SLACK_TOKENS = 4
CALL_SEPARATOR = "\n"  # between calls of one turn (a JSON string never holds a raw newline)
LONG_TEXT_ARGS = frozenset({"sql"})  # string args that hold SQL and get the SQL bound
_INT_ENUMERATE_MAX = 1000


@dataclass(frozen=True)
class GrammarText:
    """A Lark grammar and the most tokens any completion of it can take."""

    lark: str
    max_tokens: int


@dataclass(frozen=True)
class StringBounds:
    """Character bounds of JSON string arguments in one call."""

    sql_chars: int
    name_chars: int

    def for_arg(self, arg: ToolArg) -> int:
        return self.sql_chars if arg.name in LONG_TEXT_ARGS else self.name_chars


def lark_literal(text: str) -> str:
    """`text` as a Lark string literal."""
    return json.dumps(text, ensure_ascii=True)


def regex_literal(text: str) -> str:
    """`text` as a regex fragment for `/.../`: every non-alphanumeric character hex-escaped."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):X}}}" for c in text)


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _think_rules(max_think_tokens: int, think_end_token: str, think_end_text: str) -> list[str]:
    """The thinking text: bounded in tokens, never containing the think-end text itself.

    When the think end is a special token (`<[id]>`) only its literal spelling is excluded.
    When it is plain text, the lexer cannot tell where thinking stops once it has read part
    of the marker, so thinking may not contain the marker's first character at all.
    """
    if max_think_tokens < 1:
        raise ValueError("max_think_tokens must be at least 1")
    if think_end_token.startswith("<["):
        body = f"/(?s:.*)/ & ~/(?s:.*){regex_literal(think_end_text)}(?s:.*)/"
    else:
        body = f"/[^{regex_literal(think_end_text[0])}]*/"
    return [f"think[max_tokens={max_think_tokens}]: THINK_TEXT", f"THINK_TEXT: {body}"]


def _string_terminal(chars: int) -> str:
    return f'STR_{chars}: /"(\\\\["\\\\\\/bfnrt]|[^"\\\\\\x00-\\x1F\\x7F]){{0,{chars}}}"/'


def _int_terminal(arg: ToolArg) -> tuple[str, str, int]:
    """(terminal name, definition, most bytes) for an integer argument."""
    low, high = arg.minimum, arg.maximum
    if low is not None and high is not None and 0 <= high - low <= _INT_ENUMERATE_MAX:
        name = f"INT_{low}_{high}".replace("-", "M")
        values = "|".join(str(v) for v in range(low, high + 1))
        return name, f"{name}: /(?:{values})/", max(len(str(low)), len(str(high)))
    return "INT_ANY", "INT_ANY: /-?(?:0|[1-9][0-9]{0,17})/", 19


def _call_rule(spec: ToolSpec, bounds: StringBounds, terminals: dict[str, str]) -> tuple[str, int]:
    """The Lark rule for one call of `spec` and its most bytes."""
    seen_optional = False
    parts: list[str] = []
    literal = '{"tool": ' + json.dumps(spec.name) + ', "args": {'
    n_bytes = 0
    for index, arg in enumerate(spec.args):
        if arg.required and seen_optional:
            raise ValueError(f"{spec.name}: optional arguments must come after required ones")
        key = ("" if index == 0 else ", ") + json.dumps(arg.name) + ": "
        if arg.type == "string":
            chars = bounds.for_arg(arg)
            value, value_bytes = f"STR_{chars}", 2 + MAX_BYTES_PER_CHAR * chars
            terminals[value] = _string_terminal(chars)
        elif arg.type == "integer":
            value, definition, value_bytes = _int_terminal(arg)
            terminals[value] = definition
        else:
            raise ValueError(f"{spec.name}.{arg.name}: unsupported argument type {arg.type!r}")
        if arg.required:
            literal += key
            parts += [lark_literal(literal), value]
            literal = ""
        else:
            seen_optional = True
            if literal:
                parts.append(lark_literal(literal))
                literal = ""
            parts.append(f"({lark_literal(key)} {value})?")
        n_bytes += _byte_len(key) + value_bytes
    literal += "}}"
    parts.append(lark_literal(literal))
    n_bytes += _byte_len('{"tool": ' + json.dumps(spec.name) + ', "args": {' + "}}")
    return f"call_{spec.name}: " + " ".join(parts), n_bytes


def _calls(specs: tuple[ToolSpec, ...], bounds: StringBounds) -> tuple[list[str], int]:
    """Rules for `call` (any tool) and the most bytes one call can take."""
    terminals: dict[str, str] = {}
    rules, sizes = [], []
    for spec in specs:
        rule, n_bytes = _call_rule(spec, bounds, terminals)
        rules.append(rule)
        sizes.append(n_bytes)
    rules.insert(0, "call: " + " | ".join(f"call_{spec.name}" for spec in specs))
    return rules + list(terminals.values()), max(sizes)


def call_max_tokens(bounds: StringBounds, specs: tuple[ToolSpec, ...] = TOOL_SPECS) -> int:
    """Worst-case tokens of one call under `bounds` (every byte its own token)."""
    return _calls(specs, bounds)[1]


def first_call_grammar(
    *,
    think_end_token: str,
    think_end_text: str,
    after_think: str,
    max_think_tokens: int,
    bounds: StringBounds,
    specs: tuple[ToolSpec, ...] = TOOL_SPECS,
) -> GrammarText:
    """The rest of the think block, its end token, and one call."""
    rules, call_bytes = _calls(specs, bounds)
    after = f" {lark_literal(after_think)}" if after_think else ""
    lark = "\n".join([f"start: think {think_end_token}{after} call", *_think_rules(max_think_tokens, think_end_token, think_end_text), *rules])
    n_tokens = max_think_tokens + _byte_len(think_end_text) + _byte_len(after_think) + call_bytes
    return GrammarText(lark, n_tokens + SEGMENT_SLACK_TOKENS)


def next_call_grammar(*, bounds: StringBounds, specs: tuple[ToolSpec, ...] = TOOL_SPECS) -> GrammarText:
    """Nothing (the model ends its turn with a stop token) or a newline and one more call."""
    rules, call_bytes = _calls(specs, bounds)
    lark = "\n".join([f"start: ({lark_literal(CALL_SEPARATOR)} call)?", *rules])
    return GrammarText(lark, _byte_len(CALL_SEPARATOR) + call_bytes + SEGMENT_SLACK_TOKENS)


def final_grammar(
    *,
    think_end_token: str,
    think_end_text: str,
    after_think: str,
    max_think_tokens: int,
    max_sql_tokens: int,
) -> GrammarText:
    """The forced final turn: the rest of the think block, then one SELECT/WITH statement."""
    if max_sql_tokens < 1:
        raise ValueError("max_sql_tokens must be at least 1")
    after = f" {lark_literal(after_think)}" if after_think else ""
    lark = "\n".join([
        f"start: think {think_end_token}{after} sql",
        *_think_rules(max_think_tokens, think_end_token, think_end_text),
        f"sql[max_tokens={max_sql_tokens}]: SQL_TEXT",
        "SQL_TEXT: /([Ss][Ee][Ll][Ee][Cc][Tt]|[Ww][Ii][Tt][Hh])[^A-Za-z0-9_;][^;]*;?/",
    ])
    n_tokens = max_think_tokens + _byte_len(think_end_text) + _byte_len(after_think) + max_sql_tokens
    return GrammarText(lark, n_tokens + SEGMENT_SLACK_TOKENS)
