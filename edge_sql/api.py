"""The Python API: `Agent` loads a model once and answers many questions offline.

    from edge_sql import Agent

    with Agent() as agent:                       # the default model (pulled if absent)
        result = agent.ask("How many albums are there?", "chinook.sqlite")
        print(result.sql, result.rows)
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from edge_sql.agent.budget import Budget
from edge_sql.agent.episode import EpisodeEvent, run_episode
from edge_sql.agent.prompt import PromptTemplate, load_prompt
from edge_sql.agent.result import EpisodeResult
from edge_sql.errors import EdgeSqlError
from edge_sql.runtime import PrefixCache, SamplingParams, Session, SessionInfo
from edge_sql.runtime.tuning import Settings
from edge_sql.tools import ReadOnlyDatabase, Toolbox

_log = logging.getLogger(__name__)


def resolve_model_path(model: str | Path | None, *, pull_if_missing: bool = True,
                       log: Callable[[str], None] = lambda _m: None) -> Path:
    """A GGUF path for `model`: a file, a store name, or None for the default model."""
    from edge_sql.store import ensure_model, resolve_model

    spec = str(model) if model is not None else None
    if pull_if_missing:
        return ensure_model(spec, pull_if_missing=True, log=log)
    return resolve_model(spec)


def load_settings(model_path: Path, *, tune: bool, n_gpu_layers: int | None,
                  log: Callable[[str], None] = lambda _m: None, n_ctx: int = 12288,
                  n_threads: int | None = None, speculate: str = "off") -> tuple[Settings, str]:
    """The llama.cpp settings to load `model_path` with, and how they were chosen:
    "cached" or "calibrated" (see `runtime.tuning`), "off" (`tune=False`: safe defaults) or
    "gpu" (layers are offloaded: calibration does not apply, offload keeps its defaults).
    Calibrated settings carry the most drafts per verify batch that fit the memory budget;
    `speculate` other than "off" only makes the log say when none fits."""
    settings, how = _settings(model_path, tune=tune, n_gpu_layers=n_gpu_layers, log=log, n_ctx=n_ctx,
                              n_threads=n_threads)
    if speculate != "off" and settings.speculation(speculate)[0] != speculate:
        log(f"--speculate {speculate}: {settings.speculation(speculate)[0]} within the memory budget with these "
            "settings (each draft keeps a copy of the recurrent state, the MTP drafter a context of its own; "
            "`edge-sql tune` shows what fits)")
    return settings, how


def _settings(model_path: Path, *, tune: bool, n_gpu_layers: int | None, log: Callable[[str], None],
              n_ctx: int, n_threads: int | None) -> tuple[Settings, str]:
    from edge_sql.runtime.backend import gpu_backend_name, init_backend
    from edge_sql.runtime.tuning import default_settings, tuned_settings

    init_backend()
    if gpu_backend_name() and n_gpu_layers != 0:
        return default_settings(), "gpu"
    if not tune:
        return default_settings(), "off"

    def progress(message: str) -> None:  # a first calibration takes a while: say so through logging too
        _log.info(message)
        log(message)

    return tuned_settings(model_path, progress=progress, n_ctx=n_ctx, n_threads=n_threads)


def prefix_state_dir() -> Path:
    """Where saved prompt-prefix states live: the model store's `prefix-states/`."""
    from edge_sql.store.home import store_root

    return store_root() / "prefix-states"


class Agent:
    """A loaded model that answers questions about SQLite databases.

    `model` is a GGUF path, a model-store name (`synsql`, `synsql:Q4_K_M`) or None for the
    default model, which is pulled (downloaded and converted) the first time if it is not in
    the store. The model is loaded once; every `ask` is a new episode on the same context.

    `tune` loads the model with the settings calibrated for this file on this machine (a quick
    calibration the first time, cached in the store, its progress sent to `log` and to the
    `edge_sql.api` logger at INFO; `tuning` says "cached", "calibrated",
    "off" or "gpu"); `tune=False` uses safe defaults. `prefix_cache` also keeps the state after
    the shared system prompt on disk, so a later process skips evaluating it (in memory it is
    always kept between questions). `speculate` ("off", "lookup", "auto"; "mtp" once model files
    carry an MTP head) decodes drafted tokens in batches and keeps only those the model itself
    would write: the same answers for fewer decodes (`runtime/speculative.py`).

    Thread safety: one Agent holds one llama.cpp context, so `ask` calls are serialized by a
    lock. Calling `ask` from several threads is safe; the calls run one after another and each
    gets its own result. For parallel episodes, create one Agent per thread (each loads the
    model and needs its memory).
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        n_threads: int | None = None,
        n_gpu_layers: int | None = None,
        n_ctx: int = 12288,
        prompt_file: str | Path | None = None,
        budget: Budget | None = None,
        pull_if_missing: bool = True,
        log: Callable[[str], None] = lambda _m: None,
        tune: bool = True,
        prefix_cache: bool = True,
        speculate: str = "off",
    ) -> None:
        self.prompt: PromptTemplate = load_prompt(prompt_file)
        self.budget = budget or Budget()
        self.model_path = resolve_model_path(model, pull_if_missing=pull_if_missing, log=log)
        settings, self.tuning = load_settings(self.model_path, tune=tune, n_gpu_layers=n_gpu_layers, log=log,
                                              n_ctx=n_ctx, n_threads=n_threads, speculate=speculate)
        if n_threads is not None:  # the caller's thread count wins over the calibrated one
            settings = dataclasses.replace(settings, n_threads=n_threads)
        self.session = Session(
            self.model_path, settings.session_options(speculate, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers),
            prefix_cache=PrefixCache(prefix_state_dir() if prefix_cache else None, log=log),
        )
        self._lock = threading.Lock()

    @property
    def info(self) -> SessionInfo:
        """How the model was loaded (file, backend, GPU layers, threads, context)."""
        if self.session is None:
            raise EdgeSqlError("this Agent is closed")
        return self.session.info

    def warm_up(self) -> None:
        """Build what the first question would otherwise wait for: the grammar engine's view of the
        vocabulary (seconds for 248k tokens, holding the GIL and not cancellable). Servers call it
        at start so no client's first request pays for it."""
        if self.session is None:
            raise EdgeSqlError("this Agent is closed")
        self.session.lltokenizer()

    def ask(
        self,
        question: str,
        db: str | Path | ReadOnlyDatabase,
        *,
        evidence: str | None = None,
        seed: int | None = None,
        greedy: bool = False,
        on_event: Callable[[EpisodeEvent], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> EpisodeResult:
        """Answer `question` about `db` (a path, opened read-only, or an open ReadOnlyDatabase).

        `seed` makes sampling reproducible; `greedy` always takes the most likely token.
        `on_event` sees each round and call as it happens; `should_stop` returning True ends
        the episode early (`result.stop == "cancelled"`). Raises EdgeSqlError for a bad
        database or an empty question.
        """
        if not question or not question.strip():
            raise EdgeSqlError("empty question")
        params = SamplingParams(seed=seed, greedy=greedy)
        own_db = not isinstance(db, ReadOnlyDatabase)
        database = ReadOnlyDatabase(db) if own_db else db
        try:
            with self._lock:
                if self.session is None:
                    raise EdgeSqlError("this Agent is closed")
                result = run_episode(
                    self.session, Toolbox(database), question, evidence=evidence, params=params,
                    prompt=self.prompt, budget=self.budget, should_stop=should_stop, on_event=on_event,
                )
                result.stats["llama_settings"] = self.session.info.settings
                result.stats["tuning"] = self.tuning
                return result
        finally:
            if own_db:
                database.close()

    def close(self) -> None:
        """Free the context (idempotent). Waits for a running `ask` to finish. The loaded model
        stays in the process until another model is loaded, so a new Agent on the same file
        starts at once; `edge_sql.runtime.release_idle()` frees it now."""
        with self._lock:
            if self.session is not None:
                self.session.close()
                self.session = None

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
