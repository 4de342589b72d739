"""The tasks a bench hands to its worker processes (serialised as JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the tasks travel to child processes: they import nothing heavy
    from edge_sql.runtime import SpeculateMode


@dataclass
class EpisodeTask:
    """Run `items` (mode, question id) on one variant and append an "episode" record for each."""

    variant: str
    model_path: str
    results_path: str
    dataset: str
    dataset_format: str
    db_root: str | None
    items: list[tuple[str, str]]
    seed: int
    n_threads: int | None
    n_ctx: int
    budget: dict[str, int] = field(default_factory=dict)
    greedy: bool = False
    prompt_file: str | None = None
    record_tokens: bool = False  # keep the transcript's token ids (the reference's, for fidelity)
    score_timeout_s: float = 30.0
    tune: bool = True  # load with the settings calibrated for this machine (else safe defaults)
    speculate: SpeculateMode = "off"  # speculative decoding mode of the session (runtime/speculation/speculative.py)
    parallel: int = 1  # episodes at once, each on its own session of one model (open_sessions)
    vote_auto: bool = False  # the vote modes' K came from `--vote auto` (their records say so)
    kind: str = "episodes"


@dataclass
class FidelityTask:
    """Teacher-force the reference's transcripts `keys` on the reference and on one variant."""

    variant: str
    model_path: str
    reference_path: str
    results_path: str
    keys: list[tuple[str, str]]  # (mode, question id) of the reference's episodes
    seed: int
    n_threads: int | None
    max_tokens: int
    chunk: int
    reference_name: str = "BF16"
    kind: str = "fidelity"
