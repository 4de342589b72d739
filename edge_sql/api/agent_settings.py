"""`AgentSettings`: what shapes an Agent and its episodes, declared once; and the one place
`vote="auto"` is resolved.

One frozen object, built once from wherever the settings come from (the command line's options,
`EDGE_SQL_<OPTION>`, the settings files and profiles, the Python API's keywords) and passed down
unchanged: the Agent keeps it, its plan (`api/plan.py`) opens the sessions from it, `run`,
`serve` and the bench hand it over. llama.cpp's `common_params` is the model: a field per
setting, and beside it the option that sets it. Adding a setting is its field here (with its
option's name in `option(...)`) and its click option (`commands/options.py`, or the command's
own); the files, the environment and `Agent.from_config` follow from the field
(tests/test_agent_settings.py adds a fake one and follows it from each source).

Why a module of its own, importing nothing heavy: the command line reads it, and loads without
llama.cpp.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from edge_sql.runtime.options import DEFAULT_CONTEXT_TOKENS, SessionSettings, SpeculateMode

if TYPE_CHECKING:
    from edge_sql.agent.budget import Budget

VoteSetting = int | Literal["auto"] | None  # a vote of K episodes, "auto" (the plan's K) or none
DEFAULT_MAX_WAITING = 64  # calls that wait for a session beyond those running (one more: QueueFull)

# the budget's shortcut options -> the Budget fields each sets (`--budget FIELD=N`, a file's
# `budget = {FIELD = N}`, sets any field, and wins): the command line and the files read these
BUDGET_SHORTCUTS: dict[str, tuple[str, ...]] = {
    "max-rounds": ("max_rounds",),
    "think-tokens": ("max_think_tokens", "max_final_think_tokens"),
    "calls-per-turn": ("max_calls_per_turn",),
    "episode-tokens": ("max_tokens",),
}

_TRUE = {"1", "true", "t", "yes", "y", "on"}  # click's BoolParamType, which reads the CLI's flags
_FALSE = {"0", "false", "f", "no", "n", "off", ""}


def read_flag(text: str) -> bool:
    """A boolean from the environment, as click reads a flag's."""
    word = text.strip().lower()
    if word not in _TRUE | _FALSE:
        raise ValueError(f"{text!r} is not a boolean")
    return word in _TRUE


def read_vote(text: str) -> VoteSetting:
    return "auto" if text.strip().lower() == "auto" else int(text)


def option(
    key: str, read: Callable[[str], object], *, param: str | None = None, invert: bool = False
) -> dict[str, object]:
    """A field's metadata: the option that sets it (`key`, its name in the files and in
    `EDGE_SQL_<KEY>`), how an environment string reads (`read`), the click parameter's name when
    it is not the key's (`param`), and `invert` for a `--no-...` flag."""
    return {"option": key, "read": read, "param": param or key.replace("-", "_"), "invert": invert}


@dataclass(frozen=True)
class AgentSettings:
    """What shapes an Agent and its episodes (see the module docstring; `Agent`'s docstring says
    what each does). A field with `option(...)` metadata is set by that option of `run` and
    `serve`, its `EDGE_SQL_` variable and the settings files; the others only from Python."""

    model: str | Path | None = field(default=None, metadata=option("model", str))
    n_threads: int | None = field(default=None, metadata=option("threads", int))
    n_gpu_layers: int | None = field(default=None, metadata=option("gpu-layers", int))
    n_ctx: int = field(default=DEFAULT_CONTEXT_TOKENS, metadata=option("ctx", int, param="n_ctx"))
    prompt_file: str | Path | None = field(default=None, metadata=option("prompt-file", str))
    budget: Budget | None = None  # the budget options (`--budget FIELD=N`, BUDGET_SHORTCUTS)
    tune: bool = field(default=True, metadata=option("no-tune", lambda text: not read_flag(text), invert=True))
    prefix_cache: bool = True
    speculate: SpeculateMode = field(default="off", metadata=option("speculate", str))
    parallel: int = field(default=1, metadata=option("parallel", int))
    vote: VoteSetting = field(default=None, metadata=option("vote", read_vote))
    session_settings: SessionSettings | None = None
    greedy: bool = field(default=False, metadata=option("greedy", read_flag))
    seed: int | None = field(default=None, metadata=option("seed", int))
    max_waiting: int = field(default=DEFAULT_MAX_WAITING, metadata=option("queue-size", int))
    pull_if_missing: bool = True

    def with_(self, **changes: object) -> AgentSettings:
        """These settings with `changes` (field names) on top; a TypeError names an unknown one."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


class AgentOptions(TypedDict, total=False):
    """`AgentSettings`' fields as keyword arguments (`Agent(...)`, `Agent.from_config(...)`), for
    the type checker; tests/test_agent_settings.py keeps the two the same."""

    n_threads: int | None
    n_gpu_layers: int | None
    n_ctx: int
    prompt_file: str | Path | None
    budget: Budget | None
    tune: bool
    prefix_cache: bool
    speculate: SpeculateMode
    parallel: int
    vote: VoteSetting
    session_settings: SessionSettings | None
    greedy: bool
    seed: int | None
    max_waiting: int
    pull_if_missing: bool


def make_settings(**values: object) -> AgentSettings:
    """`AgentSettings` from field values: every source builds it here (the class is looked up
    when called, so that a test may extend it with a setting of its own)."""
    return AgentSettings(**values)  # type: ignore[arg-type]


def settings_from_json(data: Mapping[str, Any]) -> AgentSettings:  # Any: asdict
    """Settings from their `dataclasses.asdict` (a bench task's JSON): the budget a Budget again."""
    from edge_sql.agent.budget import Budget

    budget = data.get("budget")
    return make_settings(**{**data, "budget": Budget(**budget) if isinstance(budget, dict) else budget})


def setting_options() -> dict[str, dataclasses.Field[Any]]:  # Any: dataclasses
    """The fields an option sets, by the option's key (`threads` -> the `n_threads` field)."""
    return {f.metadata["option"]: f for f in dataclasses.fields(AgentSettings) if "option" in f.metadata}


def from_parameters(params: Mapping[str, object]) -> dict[str, object]:
    """The fields a command's parsed parameters set (click's names: `threads`, `no_tune`), each
    as the field takes it; parameters that are no setting's are left out."""
    found: dict[str, object] = {}
    for f in setting_options().values():
        if f.metadata["param"] in params:
            value = params[f.metadata["param"]]
            found[f.name] = not value if f.metadata["invert"] else value
    return found


@dataclass(frozen=True)
class VoteChoice:
    """A vote setting resolved: `k` episodes (None: one episode, no vote) and, when it was
    "auto", the line that says why (`line`; None for a K or no vote the caller named)."""

    k: int | None
    line: str | None = None

    @property
    def auto(self) -> bool:
        """Whether the K came from "auto"."""
        return self.line is not None


def resolve_vote(vote: VoteSetting, auto: Callable[[], tuple[int, str]]) -> VoteChoice:
    """`vote` as the episodes that answer: the one function that knows what "auto" means, for
    the plan, `run`, `serve` and the bench. `auto` gives this machine's K and why (the plan's
    calibration, `runtime/tuning/auto_vote.py`; the bench's smallest over its variants); it is
    called only for "auto", whose K of 1 is no vote."""
    if vote != "auto":
        return VoteChoice(vote)
    k, line = auto()
    return VoteChoice(k if k >= 2 else None, line)
