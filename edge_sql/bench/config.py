"""`BenchConfig`: everything a bench run depends on, what a resumed run must match.

Why a module of its own: the driver (runner.py), the runners that do its work (local_runner.py,
edge_sql.cluster) and the task builders (pending_work.py) all read it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from edge_sql.api.agent_settings import AgentSettings
from edge_sql.bench.modes import MODES
from edge_sql.bench.variants import REFERENCE, Variant

# bench.json's `settings` (`settings_json`): the keys in the order the bench has always written
# them; those the episodes' `AgentSettings` holds are read from it
SETTINGS_ORDER = (
    *("out_dir", "base", "model", "variants", "dataset", "dataset_format", "db_root", "limit", "modes", "seed"),
    *("n_threads", "n_ctx", "budget", "greedy", "prompt_file", "fidelity_tokens", "fidelity_chunk", "resume"),
    *("note", "verbose", "cache_dir", "ray", "ray_workers", "tune", "speculate", "parallel", "vote", "vote_auto"),
)


@dataclass
class BenchConfig:
    """Everything a bench run depends on. `base` (a BF16 GGUF) or `model` (a store name) is needed.
    `episodes` is what every variant's episodes load with (`AgentSettings`: threads, context,
    prompt, greedy, tuning, speculation); the file, the budget, the sessions and the vote are the
    bench's own (`agent_settings`)."""

    out_dir: Path
    base: Path | None = None
    model: str | None = None
    variants: list[str] = field(default_factory=lambda: [REFERENCE])
    dataset: str = "bundled"
    dataset_format: str = "bird"
    db_root: Path | None = None
    limit: int | None = None
    modes: list[str] = field(default_factory=lambda: list(MODES))
    seed: int = 0
    episodes: AgentSettings = field(default_factory=AgentSettings)
    budget: dict[str, int] = field(default_factory=dict)  # agent Budget fields to override
    fidelity_tokens: int = 4096  # at most this many tokens of each transcript are teacher-forced
    fidelity_chunk: int = 64
    resume: bool = True
    note: str = ""  # shown under the report's heading and the plots' titles
    verbose: bool = False  # llama.cpp's own log (e.g. the quantizer's line per tensor) on stderr
    cache_dir: Path | None = None  # quantized files; default <out_dir>/cache
    ray: str | None = None  # a Ray cluster's address, or "local": episodes run there (edge_sql.cluster)
    ray_workers: int | None = None  # Ray actors per variant (default: as many as the cluster's CPUs allow)
    parallel: int | None = None  # episodes at once per variant, each on its own session (same records, but
    # timings); None: auto, the variant's calibrated default (bench/parallel.py)
    vote: int | Literal["auto"] | None = None  # also answer each (mode, question) by a vote of this many sampled
    # episodes (vote_mode.py); "auto": resolved by `run_bench` from the variants' calibrations (`resolve_bench_vote`)
    vote_auto: bool = False  # the vote's K came from "auto"

    def agent_settings(self, variant: Variant, sessions: int = 1) -> AgentSettings:
        """The settings `variant`'s episodes load with (its file, on `sessions` sessions): the one
        place the bench's options become an Agent's."""
        from edge_sql.agent.budget import Budget

        prompt = self.episodes.prompt_file
        return self.episodes.with_(  # strings, not paths: a task travels as JSON
            model=str(variant.path),
            prompt_file=None if prompt is None else str(prompt),
            budget=Budget(**self.budget),
            parallel=sessions,
            pull_if_missing=False,
            prefix_cache=False,
        )

    def settings_json(self) -> dict[str, object]:
        """Every setting as bench.json shows it (before JSON: paths are still paths), flat."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "episodes"}
        episodes = {f.name: getattr(self.episodes, f.name) for f in fields(self.episodes)}
        return {key: copy.deepcopy(own[key] if key in own else episodes[key]) for key in SETTINGS_ORDER}

    def fingerprint(self) -> dict[str, object]:
        """The settings finished episodes depend on: a resumed run must have the same ones."""
        episodes = self.episodes
        return {
            "base": str(self.base),
            "dataset": str(self.dataset),
            "dataset_format": self.dataset_format,
            "db_root": str(self.db_root),
            "n_ctx": episodes.n_ctx,
            "budget": dict(sorted(self.budget.items())),
            "greedy": episodes.greedy,
            "prompt_file": str(episodes.prompt_file),
            "fidelity_tokens": self.fidelity_tokens,
            "fidelity_on": "generated tokens",  # earlier runs compared every position
            "tune": episodes.tune,
            **({"speculate": episodes.speculate} if episodes.speculate != "off" else {}),  # speed figures differ
        }
