"""llguidance Lark grammars for assistant turns, built from `TOOL_SPECS`.

A tool turn is generated in segments so that every segment fits the room left in the
episode, whatever the weights do:

* `first_call_grammar`: the rest of the `<think>` block (at most `max_think_tokens`), the
  think-end token, then exactly one call `{"tool": "NAME", "args": {...}}`;
* `next_call_grammar`: nothing (the model ends its turn with the end-of-turn token, a stop
  token) or a line break and one more call.

A call's argument names and types come from the tool's spec: strings are JSON strings with a
character bound, integers are bounded. The training environment ran every call it found in
the text, so the `json` layout (the default) lets the model write what a JSON parser accepts:
whitespace inside a call (bounded per gap) and blank lines between calls; the key order stays
`tool`, `args`, then the spec's argument order. The `strict` layout (sqale-v1) fixes one space
after each colon and comma and exactly one newline between calls, so more tokens are forced.
`GrammarText.max_tokens` is a worst-case token count for the segment (every byte its own
token, plus the token-bounded think block), so the episode can tell before generating whether
a segment fits.

The forced final turn (`final_grammar`) is a bounded think block, then the answer as the model
wrote it in training: SQL as plain text over any number of lines, or in a fenced block, with an
optional final `;`. Only what must be is constrained: it is not a tool call (it cannot start
with `{`), it holds no `;` except the optional final one (one statement), and it has at most
`max_sql_tokens` tokens. `parsing.final_sql` strips the fence and the `;` before it runs.

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
CALL_LAYOUTS = ("json", "strict")
MAX_GAP_CHARS = 12  # JSON whitespace between two parts of a call, or between calls
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


def _call_rule(spec: ToolSpec, bounds: StringBounds, terminals: dict[str, str], layout: str) -> tuple[str, int]:
    """The Lark rule for one call of `spec` and its most bytes.

    The call is a sequence of punctuation/key parts and values; in the `json` layout an
    optional whitespace gap (`GAP`) may stand between any two parts, in the `strict` layout
    the parts are joined with the canonical spacing (`": "`, `", "`).
    """
    seen_optional = False
    flexible = layout == "json"
    gap = " GAP?" if flexible else ""
    colon, comma = (":", ",") if flexible else (": ", ", ")

    def lit(text: str) -> str:
        return lark_literal(text)

    def join(*parts: str) -> str:
        return gap.join(f" {part}" for part in parts).strip() if flexible else " ".join(parts)

    head = [
        lit("{"),
        lit('"tool"'),
        lit(colon),
        lit(json.dumps(spec.name)),
        lit(comma),
        lit('"args"'),
        lit(colon),
        lit("{"),
    ]
    if not flexible:  # strict: merge adjacent literals into one
        head = [lit('{"tool": ' + json.dumps(spec.name) + ', "args": {')]
    parts: list[str] = [join(*head)]
    n_bytes = _byte_len('{"tool": ' + json.dumps(spec.name) + ', "args": {' + "}}")
    n_gaps = 8 + 2
    for index, arg in enumerate(spec.args):
        if arg.required and seen_optional:
            raise ValueError(f"{spec.name}: optional arguments must come after required ones")
        if arg.type == "string":
            chars = bounds.for_arg(arg)
            value, value_bytes = f"STR_{chars}", 2 + MAX_BYTES_PER_CHAR * chars
            terminals[value] = _string_terminal(chars)
        elif arg.type == "integer":
            value, definition, value_bytes = _int_terminal(arg)
            terminals[value] = definition
        else:
            raise ValueError(f"{spec.name}.{arg.name}: unsupported argument type {arg.type!r}")
        key = [lit(comma)] if index else []
        key += [lit(json.dumps(arg.name)), lit(colon), value]
        piece = join(*key)
        n_bytes += _byte_len(("" if index == 0 else ", ") + json.dumps(arg.name) + ": ") + value_bytes
        n_gaps += len(key)
        if arg.required:
            parts.append(piece)
        else:
            seen_optional = True
            parts.append(f"({piece})?")
    parts.append(join(lit("}"), lit("}")))
    rule = (gap.join(f" {part}" for part in parts) if flexible else " ".join(parts)).strip()
    if flexible:
        n_bytes += n_gaps * MAX_GAP_CHARS
    return f"call_{spec.name}: {rule}", n_bytes


def _calls(specs: tuple[ToolSpec, ...], bounds: StringBounds, layout: str) -> tuple[list[str], int]:
    """Rules for `call` (any tool) and the most bytes one call can take."""
    if layout not in CALL_LAYOUTS:
        raise ValueError(f"unknown call layout {layout!r} (known: {', '.join(CALL_LAYOUTS)})")
    terminals: dict[str, str] = {}
    rules, sizes = [], []
    for spec in specs:
        rule, n_bytes = _call_rule(spec, bounds, terminals, layout)
        rules.append(rule)
        sizes.append(n_bytes)
    rules.insert(0, "call: " + " | ".join(f"call_{spec.name}" for spec in specs))
    if layout == "json":
        terminals["GAP"] = f"GAP: /[ \\t\\r\\n]{{1,{MAX_GAP_CHARS}}}/"
    return rules + list(terminals.values()), max(sizes)


def first_call_grammar(
    *,
    think_end_token: str,
    think_end_text: str,
    after_think: str,
    max_think_tokens: int,
    bounds: StringBounds,
    specs: tuple[ToolSpec, ...] = TOOL_SPECS,
    layout: str = "json",
) -> GrammarText:
    """The rest of the think block, its end token, and one call."""
    rules, call_bytes = _calls(specs, bounds, layout)
    after = f" {lark_literal(after_think)}" if after_think else ""
    gap = " GAP?" if layout == "json" else ""
    lark = "\n".join(
        [
            f"start: think {think_end_token}{after}{gap} call",
            *_think_rules(max_think_tokens, think_end_token, think_end_text),
            *rules,
        ]
    )
    n_tokens = max_think_tokens + _byte_len(think_end_text) + _byte_len(after_think) + call_bytes
    if layout == "json":
        n_tokens += MAX_GAP_CHARS
    return GrammarText(lark, n_tokens + SEGMENT_SLACK_TOKENS)


def next_call_grammar(
    *, bounds: StringBounds, specs: tuple[ToolSpec, ...] = TOOL_SPECS, layout: str = "json"
) -> GrammarText:
    """Nothing (the model ends its turn with a stop token) or a line break and one more call.

    In the `json` layout the break may be surrounded by blank lines and spaces (`SEP`), and
    the turn may end after trailing whitespace (`TAIL`).
    """
    rules, call_bytes = _calls(specs, bounds, layout)
    if layout == "strict":
        lark = "\n".join([f"start: ({lark_literal(CALL_SEPARATOR)} call)?", *rules])
        return GrammarText(lark, _byte_len(CALL_SEPARATOR) + call_bytes + SEGMENT_SLACK_TOKENS)
    lark = "\n".join(
        [
            "start: (SEP call | TAIL)?",
            f"SEP: /[ \\t\\r]{{0,{MAX_GAP_CHARS}}}\\n[ \\t\\r\\n]{{0,{MAX_GAP_CHARS}}}/",
            f"TAIL: /[ \\t\\r\\n]{{1,{MAX_GAP_CHARS}}}/",
            *rules,
        ]
    )
    return GrammarText(lark, 2 * MAX_GAP_CHARS + 1 + call_bytes + SEGMENT_SLACK_TOKENS)


# The final answer: optional fence, a body that starts a statement (not `{`, not `;`) and holds
# no `;`, an optional final `;`, and the closing fence. Backticks inside the body are allowed
# (SQLite quotes identifiers with them). The white space before the body is bounded like a
# call's gaps, so the SQL bound cannot be spent on blank lines alone (an answer with no SQL).
FINAL_ANSWER_REGEX = (
    rf"[ \t\r\n]{{0,{MAX_GAP_CHARS}}}(```[A-Za-z]*[ \t]*\r?\n[ \t\r\n]{{0,{MAX_GAP_CHARS}}})?"
    r"[^ \t\r\n{;`][^;]*(;[ \t\r\n]*)?(```[ \t\r\n]*)?"
)


# Nowhere in the answer a tool call: no `{` followed by `"tool"`.
NO_TOOL_CALL_REGEX = r'(?s:.*\{[ \t\r\n]*"tool".*)'


def final_grammar(
    *,
    think_end_token: str,
    think_end_text: str,
    after_think: str,
    max_think_tokens: int,
    max_sql_tokens: int,
) -> GrammarText:
    """The forced final turn: the rest of the think block, then the SQL answer as text."""
    if max_sql_tokens < 1:
        raise ValueError("max_sql_tokens must be at least 1")
    after = f" {lark_literal(after_think)}" if after_think else ""
    lark = "\n".join(
        [
            f"start: think {think_end_token}{after} sql",
            *_think_rules(max_think_tokens, think_end_token, think_end_text),
            f"sql[max_tokens={max_sql_tokens}]: SQL_TEXT",
            f"SQL_TEXT: /{FINAL_ANSWER_REGEX}/ & ~/{NO_TOOL_CALL_REGEX}/",
        ]
    )
    n_tokens = max_think_tokens + _byte_len(think_end_text) + _byte_len(after_think) + max_sql_tokens
    return GrammarText(lark, n_tokens + SEGMENT_SLACK_TOKENS)
