"""The prompt template: every string of the protocol, loaded from one versioned TOML file.

The packaged default is `prompts/sqale-v2.toml` (the published SQaLe episodes as the
specification); `prompts/sqale-v1.toml` is the earlier wording, kept for comparison with
`edge-sql bench --prompt-file`. A user's file replaces the template whole. Placeholders
are `{name}`: only known names are substituted, so JSON examples (`{"tool": ...}`) in a prompt
need no escaping, and a misspelt placeholder is reported when the file is loaded.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from edge_sql.agent.grammar import CALL_LAYOUTS
from edge_sql.errors import PromptFileError
from edge_sql.tools.specs import TOOL_SPECS, ToolSpec, render_tool_list

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
DEFAULT_PROMPT_FILE = PROMPTS_DIR / "sqale-v2.toml"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ChatFormat:
    """How turns are framed in the raw transcript (ChatML by default)."""

    turn_start: str
    turn_end: str
    turn_separator: str
    assistant_prefix: str
    think_end: str
    after_think: str

    def open_turn(self, role: str) -> str:
        return fill(self.turn_start, role=role)


# field -> (required placeholders, optional placeholders)
_TOP_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "system_prompt": (("tools",), ("max_rounds",)),
    "user_template": (("question", "evidence"), ()),
    "evidence_template": (("evidence",), ()),
    "result_template": (("call", "output"), ("i", "n")),
    "result_separator": ((), ()),
    "budget_line": (("n",), ()),
    "budget_line_one": ((), ()),
    "forced_final": (("sql",), ()),
    "forced_final_no_query": ((), ()),
    "results_cut_note": ((), ()),
}
_CHAT_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "turn_start": (("role",), ()),
    "turn_end": ((), ()),
    "turn_separator": ((), ()),
    "assistant_prefix": ((), ()),
    "think_end": ((), ()),
    "after_think": ((), ()),
}
_NON_EMPTY = {
    "system_prompt",
    "user_template",
    "result_template",
    "budget_line",
    "budget_line_one",
    "forced_final",
    "forced_final_no_query",
    "turn_end",
    "think_end",
}


def fill(text: str, **values: object) -> str:
    """`text` with each `{name}` for a given name replaced; all other braces left alone."""
    return _PLACEHOLDER.sub(lambda m: str(values[m[1]]) if m[1] in values else m[0], text)


@dataclass(frozen=True)
class PromptTemplate:
    """All strings of the protocol. Build with `load_prompt()`; render with the methods."""

    version: str
    source: str
    system_prompt: str
    user_template: str
    evidence_template: str
    result_template: str
    result_separator: str
    budget_line: str
    budget_line_one: str
    forced_final: str
    forced_final_no_query: str
    results_cut_note: str
    chat: ChatFormat
    call_layout: str = "json"  # grammar.CALL_LAYOUTS: what whitespace a call may hold

    def opening(
        self, question: str, evidence: str | None, *, max_rounds: int
    ) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
        """An episode's first text as (text, parse special tokens) pieces: the part shared by every
        question (system turn, the user turn's start), then the question's own part (up to the
        assistant's opening). Only the template's framing is parsed for special tokens."""
        chat = self.chat
        shared = [
            (chat.open_turn("system"), True),
            (self.system_text(max_rounds=max_rounds), True),
            (chat.turn_end + chat.turn_separator + chat.open_turn("user"), True),
        ]
        own = [
            (self.user_text(question, evidence), False),
            (chat.turn_end + chat.turn_separator + chat.open_turn("assistant") + chat.assistant_prefix, True),
        ]
        return shared, own

    def system_text(self, *, max_rounds: int, tools: tuple[ToolSpec, ...] = TOOL_SPECS) -> str:
        return fill(self.system_prompt, tools=render_tool_list(tools), max_rounds=max_rounds)

    def user_text(self, question: str, evidence: str | None = None) -> str:
        hint = fill(self.evidence_template, evidence=evidence.strip()) if evidence and evidence.strip() else ""
        return fill(self.user_template, question=question.strip(), evidence=hint)

    def result_text(self, call: str, output: str, *, i: int = 1, n: int = 1) -> str:
        """One call's result in a results turn; `i`/`n` number it within the round."""
        return fill(self.result_template, call=call, output=output, i=i, n=n)

    def budget_text(self, turns_left: int) -> str:
        return self.budget_line_one if turns_left == 1 else fill(self.budget_line, n=turns_left)

    def forced_text(self, last_good_sql: str | None) -> str:
        """The forced-final message, quoting the last query that ran without error (if any)."""
        return fill(self.forced_final, sql=last_good_sql) if last_good_sql else self.forced_final_no_query


def packaged_prompts() -> list[str]:
    """Names of the templates shipped with edge-sql (`sqale-v1`, `sqale-v2`)."""
    return sorted(path.stem for path in PROMPTS_DIR.glob("*.toml"))


def prompt_path(spec: str | Path | None) -> Path:
    """A template file: a path, the name of a packaged template (`sqale-v1`), or None for the
    default."""
    if spec is None:
        return DEFAULT_PROMPT_FILE
    path = Path(spec).expanduser()
    if not path.exists() and str(spec) in packaged_prompts():
        return PROMPTS_DIR / f"{spec}.toml"
    return path


def load_prompt(path: str | Path | None = None) -> PromptTemplate:
    """The template in `path` (a TOML file or a packaged template's name), or the packaged
    default. Raises PromptFileError."""
    file = prompt_path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PromptFileError(f"prompt file not found: {file}") from None
    except IsADirectoryError:
        raise PromptFileError(f"prompt file {file} is a directory") from None
    except UnicodeDecodeError:
        raise PromptFileError(f"prompt file {file} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise PromptFileError(f"prompt file {file} is not valid TOML: {exc}") from None
    version = data.get("version")
    if not isinstance(version, str) or not version.strip():
        raise PromptFileError(f'prompt file {file}: missing field `version` (a string such as "my-prompt-1")')
    chat = data.get("chat")
    if not isinstance(chat, dict):
        raise PromptFileError(f"prompt file {file}: missing table [chat] (fields: {', '.join(_CHAT_FIELDS)})")
    top = {name: _field(file, data, name, spec, "") for name, spec in _TOP_FIELDS.items()}
    chat_values = {name: _field(file, chat, name, spec, "chat.") for name, spec in _CHAT_FIELDS.items()}
    layout = data.get("call_layout")
    if layout not in CALL_LAYOUTS:
        raise PromptFileError(f"prompt file {file}: field `call_layout` must be one of: {', '.join(CALL_LAYOUTS)}")
    return PromptTemplate(
        version=version.strip(), source=str(file), chat=ChatFormat(**chat_values), call_layout=layout, **top
    )


def _field(file: Path, table: dict, name: str, spec: tuple[tuple[str, ...], tuple[str, ...]], prefix: str) -> str:
    required, optional = spec
    value = table.get(name)
    if value is None:
        raise PromptFileError(f"prompt file {file}: missing field `{prefix}{name}`")
    if not isinstance(value, str):
        raise PromptFileError(f"prompt file {file}: field `{prefix}{name}` must be a string")
    if name in _NON_EMPTY and not value.strip():
        raise PromptFileError(f"prompt file {file}: field `{prefix}{name}` must not be empty")
    used = set(_PLACEHOLDER.findall(value))
    missing = [p for p in required if p not in used]
    if missing:
        needed = ", ".join("{" + p + "}" for p in missing)
        raise PromptFileError(f"prompt file {file}: field `{prefix}{name}` lacks the placeholder {needed}")
    unknown = sorted(used - set(required) - set(optional))
    if unknown:
        allowed = ", ".join("{" + p + "}" for p in required + optional) or "none"
        raise PromptFileError(
            f"prompt file {file}: field `{prefix}{name}` has unknown placeholder {{{unknown[0]}}} (allowed: {allowed})"
        )
    return value
