"""The shapes of what the aggregate makes of the records: bench.json's figures, typed where
the report, the plots, the template comparison and the per-node table read them.

Why a module of its own: records.py holds what is written per piece of work; this holds what is
computed from all of it (`aggregate.summarize`), so a reader sees one name for each figure.
TypedDicts, since bench.json is read back as plain dicts (a resumed report, the plots).
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from edge_sql.bench.records import DraftCounts, EpisodeRecord, FidelityRecord, MachineDescription


class DraftFigures(DraftCounts):
    """A draft source's counts summed over episodes, and the share of drafts accepted."""

    acceptance: NotRequired[float | None]


class SpeedFigures(TypedDict):
    """Token rates over a set of episodes and their wall times (`aggregate.speed_figures`)."""

    episodes: int
    prompt_tokens: int
    generated_tokens: int
    prompt_tok_s: float | None
    decode_tok_s: float | None
    wall_s_median: float | None
    wall_s_p95: float | None
    drafts: dict[str, DraftFigures]


class AccuracyEntry(TypedDict):
    """`Accuracy.to_json()`: right answers of how many."""

    correct: int
    total: int
    percent: float


class ModeAccuracy(TypedDict):
    overall: AccuracyEntry
    by_difficulty: dict[str, AccuracyEntry]


# the share agreeing with the reference overall and per mode (the modes are keys beside the counts)
AgreementFigures = dict[str, float | int | None]


class FidelityFigures(TypedDict):
    transcripts: int
    positions: int
    kl_mean: float | None
    kl_max: float | None
    top1: float | None


class PeakMemory(TypedDict):
    peak_rss_bytes: int | None
    peak_rss_is_upper_bound: bool


class NodeFigures(SpeedFigures):
    """One variant's episodes on one node (`nodes.per_node_figures`)."""

    episode_keys: list[list[str]]
    loads: int
    load_s: float | None
    n_threads: int | None
    peak_rss_bytes: int | None


class LevelFigures(TypedDict):
    answers: int
    right: int
    accuracy: float | None


class CoveragePoint(TypedDict):
    level: str
    answered: int
    right: int
    coverage: float
    accuracy: float | None


class ConfidenceFigures(TypedDict):
    """One mode's accuracy by confidence level and its risk-coverage (`confidence.py`)."""

    levels: dict[str, LevelFigures]
    coverage: list[CoveragePoint]
    questions: int
    unlabelled: int


class VoteFigures(TypedDict):
    """One vote mode against the single episode on the same questions (`vote_mode.vote_figures`)."""

    mode: str
    base_mode: str
    k: int
    votes: int
    compared: int
    vote_accuracy: float | None
    single_accuracy: float | None
    vote_correct: int
    single_correct: int
    agreement_mean: float | None
    unanimous: int
    single_wall_s_median: float | None
    vote_wall_s_median: float | None


class EpisodeErrorEntry(TypedDict):
    mode: str
    question_id: str
    error: str


class VariantRow(PeakMemory, SpeedFigures):
    """One variant's row of figures (`aggregate.summarize`): its peak memory and speed figures,
    and these (bench.json's key order is the order `summarize` writes them in)."""

    name: str
    path: str
    size_bytes: int
    load_s: float | None
    settings: str | None
    tuning: str | None
    parallel: int | None
    fidelity: FidelityFigures
    answer_agreement: AgreementFigures
    accuracy: dict[str, ModeAccuracy]
    episode_errors: list[EpisodeErrorEntry]
    crashes: list[dict[str, object]]
    per_node: dict[str, NodeFigures]
    votes: list[VoteFigures]
    confidence: dict[str, ConfidenceFigures]
    mixed_hardware: bool


class BenchSettings(TypedDict):
    """bench.json's `settings`: every `BenchConfig` setting as JSON (`settings_json`: flat, the
    episodes' `AgentSettings` among them; paths as strings), then what the run resolved
    (`runner.run_bench`)."""

    out_dir: str
    base: str
    model: str | None
    variants: list[str]
    dataset: str
    dataset_format: str
    db_root: str | None
    limit: int | None
    modes: list[str]
    seed: int
    n_threads: int | None
    n_ctx: int
    budget: dict[str, int]
    greedy: bool
    prompt_file: str | None
    fidelity_tokens: int
    fidelity_chunk: int
    resume: bool
    note: str
    verbose: bool
    cache_dir: str | None
    ray: str | None
    ray_workers: int | None
    tune: bool
    speculate: str
    parallel: int | None
    vote: int | None
    vote_auto: bool
    reference: str
    questions: int
    question_ids: list[str]


class BenchFigures(TypedDict):
    """What `aggregate.summarize` makes of the records: a row of figures per variant, the nodes'
    machines, and the records themselves (token ids left out), in the bench's plan order."""

    variants: list[VariantRow]
    nodes: dict[str, MachineDescription]
    episodes: list[EpisodeRecord]
    fidelity: list[FidelityRecord]


class BenchSummary(BenchFigures):
    """bench.json: the run's settings and machine, then the figures (report_files.py writes it
    and bench.md from it, plots.py draws it)."""

    settings: BenchSettings
    machine: MachineDescription
