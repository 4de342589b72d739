"""`edge-sql bench --ray`: the episodes of every variant as Ray tasks on actors.

Each actor (`EpisodeActor`) loads one variant once, with as many llama.cpp threads as Ray
gave it CPUs, and answers one (mode, question) per call through the same `EpisodeRunner` the
local worker process uses. The driver (this process) keeps a queue of pending episodes per
variant, hands the next one to whichever actor of that variant finished, and appends every
record to the run's results file itself: workers never write files of the driver's machine,
so a run resumes (`--resume`) exactly like a local one, and the same summary makes the report.

An actor whose process dies (a killed worker, an out-of-memory kill, a node lost) is restarted
by Ray, which reloads the variant and retries the call in progress: the episode is recorded
once, when a call returns. Only after `MAX_RESTARTS` restarts is the actor given up, its
episode left for `--resume`, and a "crash" record written.

Variants and databases that a node does not see at the driver's paths are copied there (see
`edge_sql.cluster.files`): models into the node's model store, databases into its cache.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from edge_sql.bench.records import crash_record
from edge_sql.bench.results import ResultsLog
from edge_sql.bench.variants import Variant
from edge_sql.cluster.files import SourceFile, start_file_server
from edge_sql.cluster.ray_support import AUTO, connect, error_text, largest_node_cpus
from edge_sql.evaluation.datasets import Question

if TYPE_CHECKING:
    from edge_sql.bench.config import BenchConfig
    from edge_sql.bench.records import PeakRecord

MAX_RESTARTS = 3  # restarts of one actor (each reloads the variant) before it is given up
DEFAULT_THREADS = 4  # llama.cpp threads (Ray CPUs) per actor when --threads is not given
MEMORY_OVERHEAD_BYTES = 768 << 20  # context, compute buffer and Python beside the model file


@dataclass
class DataSources:
    """The dataset file and databases on the driver, for nodes that must fetch copies."""

    dataset: SourceFile | None  # None: the bundled set (installed with edge-sql on every node)
    db_root: str | None
    databases: dict[str, SourceFile] = field(default_factory=dict)  # db_id -> file

    def all_files(self) -> list[str]:
        return ([self.dataset.path] if self.dataset else []) + [s.path for s in self.databases.values()]


def data_sources(config: BenchConfig, questions: Sequence[Question]) -> DataSources:
    if str(config.dataset) == "bundled":
        return DataSources(None, None)
    databases = {q.db_id: SourceFile.of(q.db_path) for q in questions}
    return DataSources(SourceFile.of(config.dataset), str(config.db_root), databases)


def localize_data(task: dict[str, Any], sources: DataSources, server: str) -> dict[str, Any]:  # Any: asdict
    """`task` with its dataset and db_root on this node (the driver's paths, or copies)."""
    from edge_sql.cluster.files import cluster_files_dir, local_file

    if sources.dataset is None or (
        sources.dataset.present_here() and all(s.present_here() for s in sources.databases.values())
    ):
        return task
    root = cluster_files_dir(f"{sources.db_root}\0{sources.dataset.path}\0{sources.dataset.revision}")
    dataset = local_file(sources.dataset, server, target=root / Path(sources.dataset.path).name)
    for db_id, source in sources.databases.items():  # under its own name: <db_id>.sqlite, or a data file
        local_file(source, server, target=root / db_id / Path(source.path).name)
    return {**task, "dataset": str(dataset), "db_root": str(root)}


def episode_actor_class() -> Any:  # Any: ray
    """The `EpisodeActor` class (made on first use: importing this module needs no Ray)."""
    import ray

    @ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)
    class EpisodeActor:
        """One loaded variant answering episodes; its threads are its Ray CPUs."""

        def __init__(
            self,
            task: dict[str, Any],  # Any: asdict
            model: SourceFile,
            store_name: str,
            sources: DataSources,
            server: str,
        ) -> None:
            from edge_sql.bench.episodes import EpisodeRunner
            from edge_sql.bench.tasks import EpisodeTask
            from edge_sql.cluster.files import local_model
            from edge_sql.cluster.ray_support import assigned_cpus

            path, copied = local_model(model, server, store_name=store_name, variant=task["variant"])
            settings = {**task["settings"], "n_threads": assigned_cpus()}  # the Agent's threads: its Ray CPUs
            task = localize_data({**task, "settings": settings}, sources, server)
            self.runner = EpisodeRunner(EpisodeTask(**task), model_path=str(path))
            self.runner.load_record.update({"pid": os.getpid(), "model_path": str(path), "model_copied": copied})
            self.load_sent = False

        def run(self, mode: str, question_id: str) -> dict[str, Any]:  # Any: records
            """The episode's record, and this actor's load record with its first episode (a
            restarted actor loads again, and says so with its next episode)."""
            started = time.perf_counter()
            record = self.runner.run(mode, question_id)
            load, self.load_sent = (None if self.load_sent else self.runner.load_record), True
            return {"episode": record, "load": load, "actor_s": time.perf_counter() - started}

        def finish(self) -> PeakRecord:
            """The "peak" record of this actor's process, then the model is released."""
            from edge_sql.bench.child import own_peak_rss_bytes
            from edge_sql.bench.records import peak_record

            self.runner.close()
            return peak_record("episodes", self.runner.task.variant, own_peak_rss_bytes(), self.runner.node)

    return EpisodeActor


@dataclass
class _Pool:
    """One variant's pending episodes and the actors answering them."""

    variant: Variant
    queue: deque[tuple[str, str]]
    actors: list[Any]  # Any: ray


def actor_memory_bytes(variant: Variant) -> int:
    """What an actor asks Ray for in memory, so a node is not given more models than fit."""
    return variant.size_bytes + MEMORY_OVERHEAD_BYTES


def run_episodes_on_ray(
    config: BenchConfig,
    variants: Sequence[Variant],
    questions: Sequence[Question],
    results: ResultsLog,
    *,
    log: Callable[[str], None] = lambda _msg: None,
    overheads: list[float] | None = None,
) -> int:
    """Run every variant's pending episodes on the Ray cluster of `config.ray`; returns how many ran.
    `overheads` (if given) receives each call's scheduling overhead in seconds: the driver's round
    trip minus the actor's own time, for every call but an actor's first (which also loads)."""
    from edge_sql.bench.pending_work import episode_task, pending_items

    ray = connect(config.ray or AUTO, log=log)
    threads = min(config.episodes.n_threads or DEFAULT_THREADS, largest_node_cpus())
    workers = config.ray_workers or max(1, int(ray.cluster_resources().get("CPU", 1)) // threads)
    sources = data_sources(config, questions)
    server, server_name = start_file_server([str(v.path) for v in variants] + sources.all_files())
    store_name = config.model or f"bench-{Path(variants[0].path).stem}"
    actor_class = episode_actor_class()

    pools: list[_Pool] = []
    for variant in variants:  # the reference first: its actors get the cluster's CPUs first
        items = pending_items(config, variant, questions, results)
        if not items:
            log(f"{variant.name}: all {len(config.modes) * len(questions)} episodes already done")
            continue
        task = asdict(episode_task(config, variant, [], results))
        count = min(workers, len(items))
        log(f"{variant.name}: {len(items)} episodes on {count} Ray worker(s) of {threads} CPUs each")
        actors = [
            actor_class.options(num_cpus=threads, memory=actor_memory_bytes(variant)).remote(
                task, SourceFile.of(variant.path), store_name, sources, server_name
            )
            for _ in range(count)
        ]
        pools.append(_Pool(variant, deque(items), actors))

    in_flight: dict[Any, tuple[_Pool, Any, tuple[str, str] | None]] = {}  # Any: ray
    sent: dict[Any, float] = {}  # Any: ray

    def next_call(pool: _Pool, actor: Any) -> None:  # Any: ray
        if pool.queue:
            item = pool.queue.popleft()
            ref = actor.run.remote(*item)
            in_flight[ref], sent[ref] = (pool, actor, item), time.perf_counter()
        else:
            in_flight[actor.finish.remote()] = (pool, actor, None)

    episodes_run = 0
    try:
        for pool in pools:
            for actor in pool.actors:
                next_call(pool, actor)
        episodes_run = _drain(ray, in_flight, next_call, results, log, sent, overheads if overheads is not None else [])
    finally:  # on an interruption too: free the cluster's CPUs and memory
        for actor in [server, *(a for pool in pools for a in pool.actors)]:
            ray.kill(actor)
    return episodes_run


def _drain(
    ray: ModuleType,
    in_flight: dict[Any, tuple[_Pool, Any, tuple[str, str] | None]],  # Any: ray
    next_call: Callable[[_Pool, Any], None],  # Any: ray
    results: ResultsLog,
    log: Callable[[str], None],
    sent: dict[Any, float],  # Any: ray
    overheads: list[float],
) -> int:
    """Append each answer as it comes and give its actor the next episode; returns episodes run."""
    episodes_run = 0
    while in_flight:
        [ref], _ = ray.wait(list(in_flight), num_returns=1)
        pool, actor, item = in_flight.pop(ref)
        round_trip = time.perf_counter() - sent.pop(ref, 0.0)
        try:
            answer = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
            _give_up(ray, results, pool, actor, item, exc, log)
            continue
        if item is None:  # the actor's "finish": its peak memory; its CPUs go to the next variant
            results.append(answer)
            pool.actors.remove(actor)
            ray.kill(actor)
            continue
        if answer["load"] is not None:
            results.append(answer["load"])
        else:
            overheads.append(round_trip - answer["actor_s"])
        results.append(answer["episode"])
        episodes_run += 1
        next_call(pool, actor)
    return episodes_run


def _give_up(
    ray: ModuleType,
    results: ResultsLog,
    pool: _Pool,
    actor: Any,  # Any: ray
    item: tuple[str, str] | None,
    exc: BaseException,
    log: Callable[[str], None],
) -> None:
    """An actor that cannot go on (its variant fails to load, or it died too often): recorded as
    a crash; its episode stays pending for --resume. If it was the variant's last actor, the
    variant's remaining episodes stay pending too."""
    pool.actors.remove(actor)
    message = error_text(exc)
    results.append(crash_record("episodes", pool.variant.name, None, error=message, item=item))
    log(f"{pool.variant.name}: a Ray worker failed ({message}); continuing")
    ray.kill(actor)
    if not pool.actors and pool.queue:
        log(f"{pool.variant.name}: no worker left; {len(pool.queue)} episodes left for --resume")
        pool.queue.clear()
