"""The shapes of a bench's records and summary, and the one writer of each.

Why typed: the results file (results.py) is what a resumed run, the Ray driver, the aggregate,
the reports and the plots all read; each record kind is written in one place here (or, for the
episode record, built by `EpisodeRunner` as an `EpisodeRecord`), so a field is added or renamed
once. They are TypedDicts, not dataclasses: the records are JSON lines, read back as dicts by
every reader, and a TypedDict is exactly that dict, with its keys checked where it is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict

if TYPE_CHECKING:
    from edge_sql.bench.fidelity import FidelityStats

TaskKind = Literal["episodes", "fidelity"]


class KeyFields(TypedDict):
    """A work item's key (`WorkKey.as_fields`): what resume skips on."""

    variant: str
    mode: str
    question_id: str
    seed: int


class DraftCounts(TypedDict):
    """One draft source's speculative decoding counts (`DraftStats.to_json`)."""

    drafted: int
    accepted: int
    rolled_back: int
    batches: int


class VoteEpisodeData(TypedDict):
    """One episode of a vote (`VoteEpisode.to_json(runs=True)`)."""

    sql: str | None
    group: int | None
    failed_queries: int
    reason: NotRequired[str]
    seed: NotRequired[int]
    stop: NotRequired[str | None]
    wall_s: NotRequired[float | None]


class VoteData(TypedDict):
    """How a vote went (`VoteStats.to_json(runs=True)`), plus `auto` when K was `--vote auto`'s."""

    k: int
    chosen: int
    agreed: int
    voters: int
    agreement: float
    finished: int
    episodes: list[VoteEpisodeData]
    seeds: NotRequired[list[int]]
    wall_s: NotRequired[float]
    prompt_tokens_evaluated: NotRequired[int]
    auto: NotRequired[bool]


class MachineDescription(TypedDict):
    """`machine.machine_description()`: what a load record says of the machine it ran on."""

    platform: str
    processor: str
    cpu_model: str
    cpu_count: int | None
    memory_bytes: int | None
    python: str
    llama_cpp_python: str


class EpisodeRecord(KeyFields):
    """One (mode, question)'s answer scored: a single episode (counts, seconds, tokens for
    fidelity) or a vote (`vote`: vote_mode.py), or an episode that could not run (`episode_error`)."""

    kind: Literal["episode"]
    db_id: str
    difficulty: str
    sql: str | None
    correct: bool
    error: str | None
    node: str
    episode_error: NotRequired[str]
    stop: NotRequired[str]
    forced: NotRequired[bool]
    fallback: NotRequired[bool]
    confidence: NotRequired[str | None]
    confidence_reasons: NotRequired[list[str]]
    rounds: NotRequired[int]
    calls: NotRequired[int]
    wall_s: NotRequired[float | None]
    vote: NotRequired[VoteData]
    tokens: NotRequired[list[int]]  # the reference's: what fidelity teacher-forces
    generated_spans: NotRequired[list[list[int]]]  # [start, end) of the model's own tokens
    # and, for a single episode, `EpisodeFigures.record_fields()`: counts and seconds
    prompt_tokens: NotRequired[int]
    prefix_tokens_restored: NotRequired[int]
    prompt_s: NotRequired[float]
    generated_tokens: NotRequired[int]
    generate_s: NotRequired[float]
    transcript_tokens: NotRequired[int]
    draft_tokens: NotRequired[int]
    draft_tokens_accepted: NotRequired[int]
    draft_tokens_rolled_back: NotRequired[int]
    drafts: NotRequired[dict[str, DraftCounts]]


class LoadRecord(TypedDict):
    """How a worker loaded its variant: seconds, threads, settings, where."""

    kind: Literal["load"]
    variant: str
    load_s: float
    grammar_setup_s: float
    n_threads: int
    settings: str
    tuning: str | None
    n_ctx: int
    time: float
    node: str
    machine: MachineDescription
    parallel: NotRequired[int]  # only when above 1
    pid: NotRequired[int]  # a Ray actor's: its process, its copy of the model
    model_path: NotRequired[str]
    model_copied: NotRequired[bool]


class FidelityRecord(KeyFields):
    """A variant's next-token distributions against the reference's on one transcript."""

    kind: Literal["fidelity"]
    positions: int
    kl_sum: float
    kl_max: float
    top1_agree: int
    seconds: float


class ProcessRecord(TypedDict):
    """A local worker process's exit status and the kernel's bound on its peak memory."""

    kind: Literal["process"]
    task: TaskKind
    variant: str
    returncode: int
    maxrss_upper_bound_bytes: int


class PeakRecord(TypedDict):
    """A worker's own peak memory, written as it ends (a local child or a Ray actor)."""

    kind: Literal["peak"]
    task: TaskKind
    variant: str
    peak_rss_bytes: int
    node: str


class CrashRecord(TypedDict):
    """Work that did not finish: a worker's exit status, or a Ray worker's error."""

    kind: Literal["crash"]
    task: TaskKind
    variant: str
    returncode: int | None
    error: NotRequired[str]
    mode: NotRequired[str]
    question_id: NotRequired[str]


BenchRecord = EpisodeRecord | LoadRecord | FidelityRecord | ProcessRecord | PeakRecord | CrashRecord


def fidelity_record(key: KeyFields, stats: FidelityStats, seconds: float) -> FidelityRecord:
    return {
        "kind": "fidelity",
        "variant": key["variant"],
        "mode": key["mode"],
        "question_id": key["question_id"],
        "seed": key["seed"],
        "positions": stats.positions,
        "kl_sum": stats.kl_sum,
        "kl_max": stats.kl_max,
        "top1_agree": stats.top1_agree,
        "seconds": seconds,
    }


def process_record(task: TaskKind, variant: str, returncode: int, maxrss_upper_bound_bytes: int) -> ProcessRecord:
    return {
        "kind": "process",
        "task": task,
        "variant": variant,
        "returncode": returncode,
        "maxrss_upper_bound_bytes": maxrss_upper_bound_bytes,
    }


def peak_record(task: TaskKind, variant: str, peak_rss_bytes: int, node: str) -> PeakRecord:
    return {"kind": "peak", "task": task, "variant": variant, "peak_rss_bytes": peak_rss_bytes, "node": node}


def crash_record(
    task: TaskKind,
    variant: str,
    returncode: int | None,
    *,
    error: str | None = None,
    item: tuple[str, str] | None = None,
) -> CrashRecord:
    """A local worker's exit status (`returncode`), or a Ray worker's `error` (returncode None)
    with the (mode, question id) it was running, if any."""
    record: CrashRecord = {"kind": "crash", "task": task, "variant": variant, "returncode": returncode}
    if error is not None:
        record["error"] = error
    if item is not None:
        record["mode"], record["question_id"] = item
    return record
