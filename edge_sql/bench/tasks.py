"""The tasks a bench hands to its worker processes (serialised as JSON)."""

from __future__ import annotations

from dataclasses import dataclass

from edge_sql.api.agent_settings import AgentSettings, settings_from_json


@dataclass
class EpisodeTask:
    """Run `items` (mode, question id) on one variant and append an "episode" record for each,
    with an Agent of `settings` (`BenchConfig.agent_settings`: the variant's file, threads,
    context, prompt, budget, sampling, speculation and sessions; a JSON object once the task has
    travelled, read back here)."""

    variant: str
    model_path: str
    results_path: str
    dataset: str
    dataset_format: str
    db_root: str | None
    items: list[tuple[str, str]]
    seed: int
    settings: AgentSettings
    record_tokens: bool = False  # keep the transcript's token ids (the reference's, for fidelity)
    score_timeout_s: float = 30.0
    vote_auto: bool = False  # the vote modes' K came from `--vote auto` (their records say so)
    kind: str = "episodes"

    def __post_init__(self) -> None:
        if isinstance(self.settings, dict):  # from the task's JSON (a worker process, a Ray actor)
            self.settings = settings_from_json(self.settings)


@dataclass
class FidelityTask:
    """Teacher-force the reference's transcripts `keys` on the reference and on one variant."""

    variant: str
    model_path: str
    reference_path: str
    results_path: str
    keys: list[tuple[str, str]]  # (mode, question id) of the reference's episodes
    seed: int
    threads: int | None  # the two sessions' llama.cpp threads (the episodes' `n_threads`, or a node's CPUs)
    max_tokens: int
    chunk: int
    reference_name: str = "BF16"
    kind: str = "fidelity"
