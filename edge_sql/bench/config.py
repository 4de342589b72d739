"""`BenchConfig`: everything a bench run depends on, what a resumed run must match.

Why a module of its own: the driver (runner.py), the runners that do its work (local_runner.py,
edge_sql.cluster) and the task builders (pending_work.py) all read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from edge_sql.bench.modes import MODES
from edge_sql.bench.variants import REFERENCE, Variant
from edge_sql.runtime.options import DEFAULT_CONTEXT_TOKENS

if TYPE_CHECKING:
    from edge_sql.api.agent_settings import AgentSettings
    from edge_sql.runtime import SpeculateMode


@dataclass
class BenchConfig:
    """Everything a bench run depends on. `base` (a BF16 GGUF) or `model` (a store name) is needed."""

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
    n_threads: int | None = None
    n_ctx: int = DEFAULT_CONTEXT_TOKENS
    budget: dict[str, int] = field(default_factory=dict)  # agent Budget fields to override
    greedy: bool = False
    prompt_file: Path | None = None
    fidelity_tokens: int = 4096  # at most this many tokens of each transcript are teacher-forced
    fidelity_chunk: int = 64
    resume: bool = True
    note: str = ""  # shown under the report's heading and the plots' titles
    verbose: bool = False  # llama.cpp's own log (e.g. the quantizer's line per tensor) on stderr
    cache_dir: Path | None = None  # quantized files; default <out_dir>/cache
    ray: str | None = None  # a Ray cluster's address, or "local": episodes run there (edge_sql.cluster)
    ray_workers: int | None = None  # Ray actors per variant (default: as many as the cluster's CPUs allow)
    tune: bool = True  # episodes run with the calibrated llama.cpp settings (False: safe defaults)
    speculate: SpeculateMode = "off"  # speculative decoding (same answers; speed and draft acceptance change)
    parallel: int | None = None  # episodes at once per variant, each on its own session (same records, but
    # timings); None: auto, the variant's calibrated default (bench/parallel.py)
    vote: int | Literal["auto"] | None = None  # also answer each (mode, question) by a vote of this many sampled
    # episodes (vote_mode.py); "auto": resolved by `run_bench` from the variants' calibrations (`resolve_bench_vote`)
    vote_auto: bool = False  # the vote's K came from "auto"

    def agent_settings(self, variant: Variant, sessions: int = 1) -> AgentSettings:
        """The settings `variant`'s episodes load with (its file, on `sessions` sessions): the one
        place the bench's options become an Agent's."""
        from edge_sql.agent.budget import Budget
        from edge_sql.api.agent_settings import make_settings

        return make_settings(  # strings, not paths: a task travels as JSON
            model=str(variant.path),
            n_threads=self.n_threads,
            n_ctx=self.n_ctx,
            prompt_file=None if self.prompt_file is None else str(self.prompt_file),
            budget=Budget(**self.budget),
            greedy=self.greedy,
            tune=self.tune,
            speculate=self.speculate,
            parallel=sessions,
            pull_if_missing=False,
            prefix_cache=False,
        )

    def fingerprint(self) -> dict[str, object]:
        """The settings finished episodes depend on: a resumed run must have the same ones."""
        return {
            "base": str(self.base),
            "dataset": str(self.dataset),
            "dataset_format": self.dataset_format,
            "db_root": str(self.db_root),
            "n_ctx": self.n_ctx,
            "budget": dict(sorted(self.budget.items())),
            "greedy": self.greedy,
            "prompt_file": str(self.prompt_file),
            "fidelity_tokens": self.fidelity_tokens,
            "fidelity_on": "generated tokens",  # earlier runs compared every position
            "tune": self.tune,
            **({"speculate": self.speculate} if self.speculate != "off" else {}),  # speed figures differ
        }
