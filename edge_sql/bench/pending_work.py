"""What a bench variant still has to do, and the task a worker runs for it.

Why apart from the runners: the local runner (local_runner.py) and the Ray runner
(edge_sql.cluster) build the same tasks from the same results file; one place says what is
pending and what a task holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from edge_sql.bench.config import BenchConfig
from edge_sql.bench.parallel import resolve_parallel
from edge_sql.bench.results import ResultsLog, WorkKey
from edge_sql.bench.tasks import EpisodeTask, FidelityTask
from edge_sql.bench.variants import REFERENCE, Variant
from edge_sql.bench.vote_mode import bench_modes, split_mode
from edge_sql.evaluation.datasets import Question
from edge_sql.runtime.tuning.settings import Settings


def pending_items(
    config: BenchConfig, variant: Variant, questions: Sequence[Question], results: ResultsLog
) -> list[tuple[str, str]]:
    """The (mode, question id) episodes (and votes) of `variant` not yet in the results file."""
    done = results.done("episode")
    return [
        (mode, q.id)
        for mode in bench_modes(config.modes, config.vote)
        for q in questions
        if WorkKey(variant.name, mode, q.id, config.seed) not in done
    ]


def episode_task(
    config: BenchConfig, variant: Variant, items: list[tuple[str, str]], results: ResultsLog, sessions: int = 1
) -> EpisodeTask:
    """The episodes task of `variant` (what a local worker process or a Ray actor runs), on
    `sessions` sessions (`episode_parallel`)."""
    return EpisodeTask(
        variant=variant.name,
        model_path=str(variant.path),
        results_path=str(results.path),
        dataset=str(config.dataset),
        dataset_format=config.dataset_format,
        db_root=None if config.db_root is None else str(config.db_root),
        items=items,
        seed=config.seed,
        settings=config.agent_settings(variant, sessions),
        record_tokens=variant.name == REFERENCE,
        vote_auto=config.vote_auto,
    )


def episode_parallel(
    config: BenchConfig, variant: Variant, items: Sequence[tuple[str, str]], planned: Callable[[], Settings]
) -> int:
    """The sessions `variant`'s worker opens for `items` (bench/parallel.py: auto is the
    calibrated default), under the llama.cpp settings its Agent's plan gives (`planned`, asked
    only when needed: an explicit 1 without votes plans nothing, the path it always took)."""
    votes = [k for k in (split_mode(mode)[1] for mode, _ in items) if k]
    if not items or (config.parallel == 1 and not votes):
        return 1
    return resolve_parallel(config.parallel, planned(), config.agent_settings(variant), vote=max(votes, default=None))


def pending_fidelity(
    config: BenchConfig, reference: Variant, variant: Variant, planned: set[WorkKey], results: ResultsLog
) -> list[tuple[str, str]]:
    """The (mode, question id) of the reference's transcripts `variant` is not yet compared on."""
    transcripts = {
        (r["mode"], str(r["question_id"]))
        for r in results.records("episode")
        if r["variant"] == reference.name and r.get("tokens") and WorkKey.of(r) in planned
    }
    done = results.done("fidelity")
    return sorted(k for k in transcripts if WorkKey(variant.name, k[0], k[1], config.seed) not in done)


def fidelity_task(
    config: BenchConfig, reference: Variant, variant: Variant, keys: list[tuple[str, str]], results: ResultsLog
) -> FidelityTask:
    """The fidelity task of `variant` on `keys` (what a local worker process or a Ray task runs)."""
    return FidelityTask(
        variant=variant.name,
        model_path=str(variant.path),
        reference_path=str(reference.path),
        results_path=str(results.path),
        keys=keys,
        seed=config.seed,
        threads=config.episodes.n_threads,
        max_tokens=config.fidelity_tokens,
        chunk=config.fidelity_chunk,
        reference_name=reference.name,
    )
