"""`edge-sql bench --ray`: the fidelity comparisons as Ray tasks, after the episodes.

Each task takes up to `CHUNK` of one variant's transcripts, loads the BF16 reference and the
variant side by side (both copied to the node if missing, like the episodes' models) and runs
the local worker's own `run_fidelity` on them: the reference's episode records (with their
token ids) are written to a results file private to the task, and the "fidelity" records it
appends there are what the task returns. The driver appends them to the run's results file
when a task returns, so a retried task (Ray retries one whose worker died) counts once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_sql.bench.records import EpisodeRecord, FidelityRecord, crash_record
from edge_sql.bench.results import ResultsLog, WorkKey
from edge_sql.bench.variants import Variant
from edge_sql.cluster.files import SourceFile, start_file_server
from edge_sql.cluster.ray_support import AUTO, connect, error_text, largest_node_cpus

if TYPE_CHECKING:
    from edge_sql.bench.config import BenchConfig

CHUNK = 16  # transcripts per task: each task loads two models, so not one per transcript
MAX_RETRIES = 3


def compare_chunk(
    task: dict[str, Any],  # Any: asdict (a FidelityTask, rebuilt on the node)
    transcripts: list[EpisodeRecord],
    models: dict[str, SourceFile],
    store_name: str,
    server: str,
) -> list[FidelityRecord]:
    """What one Ray task runs: `worker.run_fidelity` on `transcripts` (reference episode records)."""
    import tempfile

    from edge_sql.bench.tasks import FidelityTask
    from edge_sql.bench.worker import run_fidelity
    from edge_sql.cluster.files import local_model
    from edge_sql.cluster.ray_support import assigned_cpus

    paths = {
        name: str(local_model(source, server, store_name=store_name, variant=name)[0])
        for name, source in models.items()
    }
    with tempfile.TemporaryDirectory(prefix="edge-sql-fidelity-") as work:
        log = ResultsLog(Path(work) / "results.jsonl")
        for record in transcripts:
            log.append(record)
        run_fidelity(
            FidelityTask(
                **{
                    **task,
                    "results_path": str(log.path),
                    "threads": assigned_cpus(),
                    "model_path": paths[task["variant"]],
                    "reference_path": paths[task["reference_name"]],
                }
            )
        )
        return list(log.records("fidelity"))


def run_fidelity_on_ray(
    config: BenchConfig,
    variants: Sequence[Variant],
    planned: set[WorkKey],
    results: ResultsLog,
    *,
    log: Callable[[str], None] = lambda _msg: None,
) -> int:
    """Every variant's pending fidelity comparisons on the Ray cluster; returns how many ran."""
    from edge_sql.bench.pending_work import fidelity_task, pending_fidelity

    ray = connect(config.ray or AUTO, log=log)
    threads = min(config.episodes.n_threads or 4, largest_node_cpus())
    reference = variants[0]
    store_name = config.model or f"bench-{Path(reference.path).stem}"
    server, server_name = start_file_server([str(v.path) for v in variants])
    remote = ray.remote(max_retries=MAX_RETRIES)(compare_chunk)
    refs: dict[Any, tuple[Variant, list[tuple[str, str]]]] = {}  # Any: ray
    try:
        for variant in variants:
            keys = pending_fidelity(config, reference, variant, planned, results)
            if not keys:
                continue
            log(f"{variant.name}: fidelity against {reference.name} on {len(keys)} transcripts (Ray)")
            wanted = set(keys)
            transcripts = [
                r
                for r in results.records("episode")
                if r["variant"] == reference.name
                and r.get("tokens")
                and (r["mode"], str(r["question_id"])) in wanted
                and WorkKey.of(r) in planned
            ]
            models = {reference.name: SourceFile.of(reference.path), variant.name: SourceFile.of(variant.path)}
            memory = sum(s.size for s in models.values()) + (768 << 20)
            for start in range(0, len(keys), CHUNK):
                chunk = keys[start : start + CHUNK]
                mine = [r for r in transcripts if (r["mode"], str(r["question_id"])) in set(chunk)]
                task = asdict(fidelity_task(config, reference, variant, chunk, results))
                ref = remote.options(num_cpus=threads, memory=memory).remote(
                    task, mine, models, store_name, server_name
                )
                refs[ref] = (variant, chunk)
        ran = 0
        while refs:
            [ref], _ = ray.wait(list(refs), num_returns=1)
            variant, chunk = refs.pop(ref)
            try:
                records = ray.get(ref)
            except (ray.exceptions.RayTaskError, ray.exceptions.WorkerCrashedError, ray.exceptions.RayError) as exc:
                message = error_text(exc)
                results.append(crash_record("fidelity", variant.name, None, error=message))
                log(
                    f"{variant.name}: a Ray fidelity task failed ({message}); {len(chunk)} transcripts left for --resume"
                )
                continue
            for record in records:
                results.append(record)
            ran += len(records)
        return ran
    finally:
        ray.kill(server)
