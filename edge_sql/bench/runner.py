"""`run_bench`: every variant's episodes and fidelity, then bench.json, bench.md and the plots.

Order of work: the BF16 reference's episodes first (their transcripts are what fidelity is
measured on), then each other variant's episodes, each variant in its own child process;
then, per variant, a child that loads BF16 and the variant side by side for fidelity.
Finished items are in the results file, so a rerun with `resume` only does what is missing.

Where that work runs is a `WorkRunner`: `LocalRunner` (child processes on this machine) unless
the caller passes another. The Ray runner lives above the bench, in `edge_sql.cluster`, so the
bench never imports it; `edge-sql bench --ray` passes it in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from edge_sql.bench.aggregate import summarize
from edge_sql.bench.agreement import ResultCache
from edge_sql.bench.child import ChildOutcome, run_worker
from edge_sql.bench.machine import machine_description
from edge_sql.bench.modes import MODES
from edge_sql.bench.parallel import resolve_parallel
from edge_sql.bench.plots import write_plots
from edge_sql.bench.report import write_json, write_markdown
from edge_sql.bench.results import RESULTS_FILE_NAME, ResultsLog, WorkKey
from edge_sql.bench.tasks import EpisodeTask, FidelityTask
from edge_sql.bench.variants import REFERENCE, BenchSetupError, Variant, prepare_variants
from edge_sql.bench.voting import bench_modes, split_mode
from edge_sql.errors import ModelFileError
from edge_sql.evaluation.datasets import Question, load_dataset, require_databases
from edge_sql.runtime.options import DEFAULT_CONTEXT_TOKENS

if TYPE_CHECKING:
    from edge_sql.runtime import SpeculateMode

SETTINGS_FILE_NAME = "settings.json"
CACHE_DIR_NAME = "cache"


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
    budget: dict[str, Any] = field(default_factory=dict)  # agent Budget fields to override
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
    # episodes (voting.py); "auto": resolved by `run_bench` from the variants' calibrations (`resolve_auto_vote`)
    vote_auto: bool = False  # the vote's K came from "auto"

    def fingerprint(self) -> dict[str, Any]:
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


@dataclass
class BenchOutcome:
    """Where the reports went and how much work this run did."""

    out_dir: Path
    summary: dict[str, Any]
    files: list[Path]
    episodes_run: int
    fidelity_run: int


def spread_by_difficulty(questions: Sequence[Question], limit: int | None) -> list[Question]:
    """The first `limit` questions taking each difficulty label in turn (file order within a label)."""
    if limit is None or limit >= len(questions):
        return list(questions)
    groups: dict[str | None, list[Question]] = {}
    for question in questions:
        groups.setdefault(question.difficulty, []).append(question)
    picked: list[Question] = []
    while len(picked) < limit:
        for group in groups.values():
            if group and len(picked) < limit:
                picked.append(group.pop(0))
    return picked


def resolve_base(config: BenchConfig) -> tuple[Path, Callable[[str], Path | None] | None]:
    """The BF16 file, and (for a store model) a lookup of variants already in the store."""
    if (config.base is None) == (config.model is None):
        raise BenchSetupError("give either --base BF16.gguf or --model NAME")
    if config.base is not None:
        return Path(config.base), None
    from edge_sql.store import resolve_model
    from edge_sql.store.resolve import looks_like_path
    from edge_sql.store.spec import ModelSpec

    model = config.model
    assert model is not None  # exactly one of base and model (checked above)
    if looks_like_path(model):
        raise BenchSetupError(
            f"--model takes a model-store name such as synsql (got the path {model!r}); "
            "give a BF16 GGUF file with --base FILE.gguf"
        )
    spec = ModelSpec.parse(model)
    if spec.variant is not None:
        raise BenchSetupError(
            f"--model takes a model name without a variant (got {config.model!r}); "
            "the bench picks the variants (see --variants)"
        )

    def from_store(variant: str) -> Path | None:
        try:
            return resolve_model(str(spec.with_variant(variant)))
        except ModelFileError:
            return None

    return resolve_model(str(spec.with_variant(REFERENCE))), from_store


def _check_settings(config: BenchConfig, out_dir: Path, log: ResultsLog) -> None:
    path = out_dir / SETTINGS_FILE_NAME
    current = config.fingerprint()
    if config.resume and path.is_file() and log.path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        if previous != current:
            changed = ", ".join(k for k in current if previous.get(k) != current[k])
            raise BenchSetupError(
                f"{out_dir} holds results made with other settings ({changed}); use --no-resume or another --out"
            )
    if not config.resume:
        log.clear()
    path.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")


class WorkRunner(Protocol):
    """Where a bench's episodes and fidelity comparisons run. Each method does what the results
    file lacks, appends what it ran to it, and returns how many items ran."""

    def episodes(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        questions: Sequence[Question],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int: ...

    def fidelity(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        planned: set[WorkKey],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int: ...


class LocalRunner:
    """This machine: one child process per variant for its episodes, then one per variant that
    loads the reference beside it for fidelity (so each variant's peak RSS is its own)."""

    def episodes(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        questions: Sequence[Question],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int:
        # every variant's sessions first: a count that does not fit is refused before any episode runs
        sizes = {
            v.name: episode_parallel(config, v, pending_items(config, v, questions, results), log) for v in variants
        }
        return sum(
            _run_episodes(config, variant, questions, results, Path(config.out_dir), log, sizes[variant.name])
            for variant in variants
        )

    def fidelity(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        planned: set[WorkKey],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int:
        return sum(
            _run_fidelity(config, variants[0], variant, planned, results, Path(config.out_dir), log)
            for variant in variants
        )


def run_bench(
    config: BenchConfig, *, log: Callable[[str], None] = lambda _msg: None, runner: WorkRunner | None = None
) -> BenchOutcome:
    """Run (or resume) a bench and write its reports into `config.out_dir`. `runner` says where
    the work runs (default: `LocalRunner`); a config with `ray` set needs the Ray runner
    (`edge_sql.cluster.runner.RayRunner`), which `edge-sql bench --ray` passes."""
    if runner is None:
        if config.ray is not None:
            raise BenchSetupError(
                f"a bench on Ray (ray={config.ray!r}) runs through edge_sql.cluster.runner.RayRunner: "
                "pass run_bench(config, runner=RayRunner())"
            )
        runner = LocalRunner()
    if config.ray is not None and config.parallel is not None and config.parallel > 1:
        raise BenchSetupError(
            "--parallel runs several episodes in one local process; with --ray each actor runs "
            "one at a time and --ray-workers sets how many run at once"
        )
    if config.ray is not None and config.vote:
        raise BenchSetupError(
            "--vote runs a question's K episodes at once in one local process; with --ray each "
            "actor runs one episode at a time"
        )
    if config.parallel is not None and config.parallel < 1:
        raise BenchSetupError(f"parallel must be at least 1, got {config.parallel}")
    if isinstance(config.vote, int) and config.vote < 2:
        raise BenchSetupError(f"a vote needs at least 2 episodes, got {config.vote}")
    if config.vote and config.greedy:
        raise BenchSetupError("--vote samples K episodes and --greedy would make them all the same: use one")
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = ResultsLog(out_dir / RESULTS_FILE_NAME)
    _check_settings(config, out_dir, results)
    base, from_store = resolve_base(config)
    questions = spread_by_difficulty(
        load_dataset(config.dataset, fmt=config.dataset_format, db_root=config.db_root), config.limit
    )
    if not questions:
        raise BenchSetupError(f"the dataset {config.dataset} has no questions")
    require_databases(questions)
    variants = prepare_variants(
        base,
        config.variants,
        cache_dir=config.cache_dir or out_dir / CACHE_DIR_NAME,
        from_store=from_store,
        n_threads=config.n_threads,
        log=log,
        verbose=config.verbose,
    )
    if config.vote == "auto":
        config = resolve_auto_vote(config, variants, log)
    modes = bench_modes(config.modes, config.vote)
    planned = {WorkKey(v.name, mode, q.id, config.seed) for v in variants for mode in modes for q in questions}

    episodes_run = runner.episodes(config, variants, questions, results, log)
    fidelity_run = runner.fidelity(config, variants, planned, results, log)

    summary = summarize(
        variants,
        results.records(),
        planned=planned,
        questions={q.id: q for q in questions},
        modes=modes,
        reference_name=REFERENCE,
        cache=ResultCache(),
    )
    summary = {
        "settings": {
            **asdict(config),
            "out_dir": str(out_dir),
            "base": str(base),
            "reference": REFERENCE,
            "variants": [v.name for v in variants],
            "questions": len(questions),
            "question_ids": [q.id for q in questions],
        },
        "machine": machine_description(),
        **summary,
    }
    summary["settings"] = json.loads(json.dumps(summary["settings"], default=str))
    files = [write_json(summary, out_dir), write_markdown(summary, out_dir), *write_plots(summary, out_dir, log)]
    return BenchOutcome(out_dir, summary, files, episodes_run, fidelity_run)


def resolve_auto_vote(config: BenchConfig, variants: Sequence[Variant], log: Callable[[str], None]) -> BenchConfig:
    """`config` with `vote="auto"` resolved: the smallest of the variants' `auto_vote_k` (each from
    its own calibration, as `run --vote auto` does; one K so that every variant's vote mode is the
    same and compares), None when that is 1 (no vote)."""
    from edge_sql.api import auto_vote_k

    picks = []
    for variant in variants:
        k, line = auto_vote_k(
            variant.path,
            tune=config.tune,
            n_ctx=config.n_ctx,
            n_threads=config.n_threads,
            pull_if_missing=False,
            log=log,
        )
        log(f"{variant.name}: {line}")
        picks.append(k)
    k = min(picks, default=1)
    return replace(config, vote=k if k >= 2 else None, vote_auto=True)


def _record_process(
    results: ResultsLog, variant: Variant, task: str, outcome: ChildOutcome, log: Callable[[str], None]
) -> None:
    results.append(
        {
            "kind": "process",
            "task": task,
            "variant": variant.name,
            "returncode": outcome.returncode,
            "maxrss_upper_bound_bytes": outcome.maxrss_upper_bound_bytes,
        }
    )
    if not outcome.ok:
        results.append({"kind": "crash", "task": task, "variant": variant.name, "returncode": outcome.returncode})
        log(f"{variant.name}: the {task} worker exited with status {outcome.returncode}; continuing")


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
    config: BenchConfig, variant: Variant, items: list[tuple[str, str]], results: ResultsLog, parallel: int = 1
) -> EpisodeTask:
    """The episodes task of `variant` (what a local worker process or a Ray actor runs), on
    `parallel` sessions (`episode_parallel`)."""
    return EpisodeTask(
        variant=variant.name,
        model_path=str(variant.path),
        results_path=str(results.path),
        dataset=str(config.dataset),
        dataset_format=config.dataset_format,
        db_root=None if config.db_root is None else str(config.db_root),
        items=items,
        seed=config.seed,
        n_threads=config.n_threads,
        n_ctx=config.n_ctx,
        budget=config.budget,
        greedy=config.greedy,
        prompt_file=None if config.prompt_file is None else str(config.prompt_file),
        record_tokens=variant.name == REFERENCE,
        tune=config.tune,
        speculate=config.speculate,
        parallel=parallel,
        vote_auto=config.vote_auto,
    )


def episode_parallel(
    config: BenchConfig, variant: Variant, items: Sequence[tuple[str, str]], log: Callable[[str], None]
) -> int:
    """The sessions `variant`'s worker opens for `items` (bench/parallel.py: auto is the
    calibrated default). An explicit 1 without votes loads no settings here: the path it always took."""
    votes = [k for k in (split_mode(mode)[1] for mode, _ in items) if k]
    if not items or (config.parallel == 1 and not votes):
        return 1
    from edge_sql.api import load_settings

    settings, _how = load_settings(
        Path(variant.path), tune=config.tune, n_gpu_layers=None, n_ctx=config.n_ctx, n_threads=config.n_threads, log=log
    )
    return resolve_parallel(config.parallel, settings, vote=max(votes, default=None), speculate=config.speculate)


def _run_episodes(
    config: BenchConfig,
    variant: Variant,
    questions: Sequence[Question],
    results: ResultsLog,
    out_dir: Path,
    log: Callable[[str], None],
    parallel: int,
) -> int:
    items = pending_items(config, variant, questions, results)
    if not items:
        log(f"{variant.name}: all {len(bench_modes(config.modes, config.vote)) * len(questions)} episodes already done")
        return 0
    votes = sum(1 for mode, _ in items if split_mode(mode)[1])
    log(
        f"{variant.name}: {len(items) - votes} episodes"
        + (f" and {votes} votes of {config.vote}" if votes else "")
        + (f", {parallel} at once" if parallel > 1 else "")
        + f" ({variant.path.name}, {variant.size_bytes / 1e6:.0f} MB)"
    )
    task = episode_task(config, variant, items, results, parallel)
    outcome = run_worker(asdict(task), out_dir)
    _record_process(results, variant, "episodes", outcome, log)
    return len(results.done("episode") & {WorkKey(variant.name, m, q, config.seed) for m, q in items})


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
        n_threads=config.n_threads,
        max_tokens=config.fidelity_tokens,
        chunk=config.fidelity_chunk,
        reference_name=reference.name,
    )


def _run_fidelity(
    config: BenchConfig,
    reference: Variant,
    variant: Variant,
    planned: set[WorkKey],
    results: ResultsLog,
    out_dir: Path,
    log: Callable[[str], None],
) -> int:
    keys = pending_fidelity(config, reference, variant, planned, results)
    if not keys:
        return 0
    log(f"{variant.name}: fidelity against {reference.name} on {len(keys)} transcripts")
    task = fidelity_task(config, reference, variant, keys, results)
    outcome = run_worker(asdict(task), out_dir)
    _record_process(results, variant, "fidelity", outcome, log)
    return len(results.done("fidelity") & {WorkKey(variant.name, m, q, config.seed) for m, q in keys})
