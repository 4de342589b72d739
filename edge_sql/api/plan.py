"""Planning an Agent's sessions before anything loads: the model file, the llama.cpp settings
(calibrated per machine), what `vote="auto"` means here and how many sessions to open. One typed
plan (`SessionPlan`) from what the user asked for, so run, serve and the bench never resolve
these themselves."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edge_sql.agent.majority_vote import vote_refusal
from edge_sql.api.agent_settings import AgentSettings, VoteChoice, VoteSetting, resolve_vote
from edge_sql.errors import EdgeSqlError
from edge_sql.runtime.options import (
    SessionOptions,
    episodes_at_once,
)
from edge_sql.runtime.tuning import Settings, check_parallel


def resolve_model_path(
    model: str | Path | None, *, pull_if_missing: bool = True, log: Callable[[str], None] = lambda _m: None
) -> Path:
    """A GGUF path for `model`: a file, a store name, or None for the default model."""
    from edge_sql.store import ensure_model, resolve_model

    spec = str(model) if model is not None else None
    if pull_if_missing:
        return ensure_model(spec, pull_if_missing=True, log=log)
    return resolve_model(spec)


def llama_settings(
    model_path: Path, settings: AgentSettings, *, log: Callable[[str], None] = lambda _m: None
) -> tuple[Settings, str]:
    """The llama.cpp settings to load `model_path` with under `settings` (its `tune`,
    `n_gpu_layers`, `n_ctx`, `n_threads`, `speculate`), and how they were chosen:
    "cached" or "calibrated" (see `runtime.tuning`), "off" (`tune=False`: safe defaults) or
    "gpu" (layers are offloaded: calibration does not apply, offload keeps its defaults).
    Calibrated settings carry the most drafts per verify batch that fit the memory budget;
    `speculate` other than "off" only makes the log say when none fits."""
    chosen, how = _settings(model_path, settings, log)
    speculate = settings.speculate
    if speculate != "off" and chosen.speculation(speculate)[0] != speculate:
        log(
            f"--speculate {speculate}: {chosen.speculation(speculate)[0]} within the memory budget with these "
            "settings (each draft keeps a copy of the recurrent state, the MTP drafter a context of its own; "
            "`edge-sql tune` shows what fits)"
        )
    return chosen, how


def _settings(model_path: Path, settings: AgentSettings, log: Callable[[str], None]) -> tuple[Settings, str]:
    from edge_sql.runtime.llama.backend import gpu_backend_name, init_backend
    from edge_sql.runtime.tuning import default_settings, tuned_settings

    init_backend()
    if gpu_backend_name() and settings.n_gpu_layers != 0:
        return default_settings(), "gpu"
    if not settings.tune:
        return default_settings(), "off"

    return tuned_settings(model_path, progress=log, n_ctx=settings.n_ctx, n_threads=settings.n_threads)


def vote_plan(model_path: Path, settings: Settings, how: str, sessions: int | None = None) -> tuple[int, str]:
    """What `vote="auto"` means for this file on this machine: the K of `runtime.tuning.auto_vote`
    (1: no vote) from the calibrated decode rates, within `sessions` sequences when given (else
    the most that fit), and the line that says why. Settings that were not calibrated here
    ("off", "gpu") measured no rates: no vote."""
    from edge_sql.runtime.tuning.auto_vote import auto_vote, auto_vote_line
    from edge_sql.runtime.tuning.cache import cached_calibration

    calibration = cached_calibration(model_path) if how in ("cached", "calibrated") else None
    rates = calibration.parallel_rates if calibration is not None else []
    limit = settings.parallel_limit or 1
    if sessions is not None:
        limit = min(limit, sessions)
    return auto_vote(rates, limit), auto_vote_line(rates, limit)


@dataclass(frozen=True)
class SessionPlan:
    """What an Agent opens, decided before anything loads (`plan_sessions`): the model file, the
    settings it loads with (the caller's thread count on top) and how they were chosen
    (`tuning`), what `vote="auto"` means here (`auto_vote`: 1 is no vote; `auto_vote_line` says
    why), how many sessions (sequences of one context) to open and the options each opens with,
    and the `AgentSettings` it was planned from (`asked`)."""

    model_path: Path
    settings: Settings
    tuning: str
    auto_vote: int
    auto_vote_line: str
    sessions: int
    options: SessionOptions
    asked: AgentSettings  # what the Agent was asked for, unchanged (its `settings`)

    def choose_vote(self, vote: VoteSetting) -> VoteChoice:
        """`vote` resolved (`resolve_vote`): "auto" is `auto_vote`, no vote when that is 1, with
        `auto_vote_line` saying why."""
        return resolve_vote(vote, lambda: (self.auto_vote, self.auto_vote_line))

    def vote_k(self, vote: VoteSetting) -> int | None:
        """The episodes `vote` answers with (None: one episode, no vote)."""
        return self.choose_vote(vote).k


def plan_sessions(asked: AgentSettings, *, log: Callable[[str], None] = lambda _m: None) -> SessionPlan:
    """The one plan of an Agent's sessions from its settings: `parallel` episodes at once and
    requests' votes of `vote` (K: its K episodes run together, so K sessions; "auto": the K this
    machine's calibration gives within the memory budget). With no vote, "auto" is resolved
    within the `parallel` sessions. More sessions than calibration found room for are refused
    (EdgeSqlError); a vote of fewer than 2 episodes too (ValueError). `session_settings` (a
    measurement's: flash attention, thread adaptation, drafts, ...) win over the settings'."""
    if asked.parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {asked.parallel}")
    problem = vote_refusal(asked.vote)
    if problem is not None:
        raise ValueError(problem)
    path = resolve_model_path(asked.model, pull_if_missing=asked.pull_if_missing, log=log)
    settings, how = llama_settings(path, asked, log=log)
    if asked.n_threads is not None:  # the caller's thread count wins over the calibrated one
        settings = dataclasses.replace(settings, n_threads=asked.n_threads)
    k = resolve_vote(asked.vote, lambda: vote_plan(path, settings, how)).k
    sessions = episodes_at_once(asked.parallel, k)
    check_parallel(settings, sessions)  # more sequences than calibration found room for: refused
    auto, line = vote_plan(path, settings, how, sessions)
    options = settings.session_options(asked.speculate, n_ctx=asked.n_ctx, n_gpu_layers=asked.n_gpu_layers)
    if asked.session_settings:
        options = dataclasses.replace(options, **asked.session_settings)
    return SessionPlan(path, settings, how, auto, line, sessions, options, asked)


def prefix_state_dir() -> Path:
    """Where saved prompt-prefix states live: the model store's `prefix-states/`."""
    from edge_sql.store.home import store_root

    return store_root() / "prefix-states"


def gguf_name(path: Path) -> str | None:
    """The model's own name in its GGUF metadata (`general.name`), if it has one."""
    from edge_sql.convert.gguf_file import read_gguf

    try:
        return read_gguf(path).name
    except (OSError, EdgeSqlError):  # the file loaded already: a name is only a nicety here
        return None
