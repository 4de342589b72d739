"""`edge-sql bench`: compare BF16 and its quantized variants on speed, fidelity and accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from edge_sql.commands.options import VOTE, budget_options, context_option, speculate_option, threads_option
from edge_sql.commands.ray_options import ray_options

if TYPE_CHECKING:  # the CLI imports the runtime only when a command runs
    from edge_sql.runtime import SpeculateMode


class ParallelCount(click.ParamType):
    """`auto` (None: the calibrated default) or a count of at least 1."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:  # Any: click
        if value is None or isinstance(value, int):
            return value
        if str(value).strip().lower() == "auto":
            return None
        try:
            count = int(value)
        except ValueError:
            self.fail(f"{value!r} is neither 'auto' nor a whole number", param, ctx)
        if count < 1:
            self.fail(f"{count} is not at least 1", param, ctx)
        return count


@click.command(name="bench")
@click.option(
    "--base",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The BF16 GGUF file every variant is made from and compared with.",
)
@click.option(
    "--model",
    metavar="NAME",
    help="A model in the local store (e.g. synsql): its BF16 file is the base, and variants "
    "already in the store are used as they are. Use this or --base.",
)
@click.option(
    "--variants",
    "variants_text",
    metavar="LIST",
    help="Comma-separated variants: quantization types, recipe names or GGUF paths. "
    "BF16 (the reference) is always included. Default: BF16,Q8_0,Q6_K,Q5_K_M,Q4_K_M and "
    "Q4_K_M-sensitive-q8, the recipe that keeps the most quantization-sensitive tensors at Q8_0 "
    "(`edge-sql quantize --help` lists the types and recipes).",
)
@click.option(
    "--dataset",
    default="bundled",
    show_default=True,
    metavar="FILE|bundled",
    help="Labelled questions: 'bundled' (64 questions over Chinook and Northwind) or a "
    "BIRD/Spider-style questions file.",
)
@click.option(
    "--format",
    "dataset_format",
    type=click.Choice(["bird", "spider"]),
    default="bird",
    show_default=True,
    help="Format of the questions file.",
)
@click.option(
    "--db-root",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder with the databases as <db_id>/<db_id>.sqlite (not needed for 'bundled').",
)
@click.option("--limit", type=click.IntRange(min=1), help="Use only N questions, taking the difficulty labels in turn.")
@click.option(
    "--modes",
    default="withheld,given",
    show_default=True,
    help="'withheld': the schema is not in the prompt (the trained protocol); 'given': the "
    "CREATE TABLE statements are in the user turn (the model card's 'full' figure); "
    "'withheld+notes': withheld, with the notes your knowledge store holds for each database in the "
    "evidence; 'withheld+examples': withheld, with the three most similar other questions of the same "
    "database and their gold SQL as verified examples (leave one out; docs/knowledge.md).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed of every episode.")
@click.option("--greedy", is_flag=True, help="Greedy decoding instead of the trained sampling settings.")
@threads_option
@context_option("Context size of each episode.")
@click.option(
    "--fidelity-tokens",
    type=click.IntRange(min=1),
    default=4096,
    show_default=True,
    help="Teacher-force at most this many tokens of each BF16 transcript.",
)
@click.option(
    "--prompt-file",
    "prompt_files",
    multiple=True,
    metavar="FILE|NAME",
    help="A prompt template (a TOML file, or a packaged one: sqale-v1, sqale-v2) replacing the "
    "default. Repeat it to compare templates: one bench per template in <out>/<version>/ and a "
    "side-by-side table in templates.md.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("bench-out"),
    show_default=True,
    help="Folder for bench.json, bench.md, the PNG plots, the results file and the cache of quantized files.",
)
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder for the variants quantized from --base (default: <out>/cache). Share one "
    "between benches of the same base to quantize each variant once; a file older than the "
    "base is made again.",
)
@click.option(
    "--note",
    default="",
    metavar="TEXT",
    help="A line shown under the report's heading and the plots' titles (e.g. 'random weights').",
)
@click.option("--verbose", is_flag=True, help="Show llama.cpp's own log (e.g. the quantizer's line per tensor).")
@budget_options
@speculate_option
@click.option(
    "--parallel",
    type=ParallelCount(),
    default="auto",
    show_default=True,
    metavar="auto|N",
    help="Episodes run at the same time per variant, each on its own sequence of the model's context "
    "(one --ctx window each). The records are those of a serial run but for the timings. 'auto': the "
    "variant's calibrated N, the fewest sequences that decode near the fastest measured on this machine "
    "among those that fit the memory budget (`edge-sql tune` shows it); 1 with "
    "--no-tune, on a GPU, with --speculate on (lookup: slower several at once), and with --ray. "
    "N more than fit is refused.",
)
@click.option(
    "--vote",
    type=VOTE,
    default=None,
    metavar="K|auto",
    help="Also answer each question by vote in each mode (reported as e.g. withheld+vote4): K sampled "
    "episodes (seeds --seed..--seed+K-1) run at once, the answer is the result set most of them "
    "return; the report sets its accuracy beside the single episode's, with how often they agreed. "
    "'auto': the largest K every variant answers within 2x one episode on this machine, from their "
    "calibrated decode rates (the mode then names that K; its records say it was auto). "
    "Not with --greedy or --ray.",
)
@click.option(
    "--resume/--no-resume",
    default=True,
    show_default=True,
    help="Skip episodes already in the out folder's results file (after a crash or a stop).",
)
@ray_options
@click.option(
    "--no-tune",
    is_flag=True,
    help="Run every variant with safe llama.cpp defaults instead of its calibrated settings (to compare).",
)
def command(
    base: Path | None,
    model: str | None,
    variants_text: str | None,
    dataset: str,
    dataset_format: str,
    db_root: Path | None,
    limit: int | None,
    modes: str,
    seed: int,
    greedy: bool,
    threads: int | None,
    n_ctx: int,
    fidelity_tokens: int,
    prompt_files: tuple[str, ...],
    out_dir: Path,
    cache_dir: Path | None,
    note: str,
    verbose: bool,
    resume: bool,
    budget: dict[str, int],
    ray_address: str | None,
    ray_workers: int | None,
    no_tune: bool = False,
    speculate: SpeculateMode = "off",
    parallel: int | None = None,
    vote: int | Literal["auto"] | None = None,
) -> None:
    """Benchmark BF16 and its quantized variants: size, load time, peak RSS, prompt and decode
    speed, episode wall time, fidelity to BF16 (KL divergence, top-1 agreement, answer
    agreement) and execution accuracy with the schema withheld and given.

    Example: edge-sql bench --model synsql --dataset mini_dev_sqlite.json --db-root dev_databases
    """
    from edge_sql.agent.majority_vote import vote_refusal
    from edge_sql.api.agent_settings import AgentSettings
    from edge_sql.bench import BenchConfig, parse_variant_names, run_bench
    from edge_sql.bench.modes import parse_modes

    problem = vote_refusal(vote, greedy, flags=True)
    if problem is not None:
        raise click.UsageError(problem)
    config = BenchConfig(
        out_dir=out_dir,
        base=base,
        model=model,
        variants=parse_variant_names(variants_text),
        dataset=dataset,
        dataset_format=dataset_format,
        db_root=db_root,
        limit=limit,
        modes=parse_modes(modes),
        seed=seed,
        episodes=AgentSettings(
            n_threads=threads,
            n_ctx=n_ctx,
            greedy=greedy,
            prompt_file=Path(prompt_files[0]) if len(prompt_files) == 1 else None,
            tune=not no_tune,
            speculate=speculate,
        ),
        budget=budget,
        fidelity_tokens=fidelity_tokens,
        resume=resume,
        note=note,
        verbose=verbose,
        cache_dir=cache_dir,
        ray=ray_address,
        ray_workers=ray_workers,
        parallel=parallel,
        vote=vote,
    )

    def log(message: str) -> None:
        click.echo(message, err=True)

    runner = None
    if ray_address is not None:
        from edge_sql.cluster.runner import RayRunner

        runner = RayRunner()
    if len(prompt_files) > 1:
        from edge_sql.bench.templates import run_template_comparison

        outcomes, files = run_template_comparison(config, prompt_files, log=log, runner=runner)
        click.echo(files[-1].read_text(encoding="utf-8"))
        click.echo(
            f"{sum(o.episodes_run for o in outcomes)} episodes run; reports in "
            + ", ".join(str(o.out_dir) for o in outcomes)
            + "; comparison: "
            + ", ".join(map(str, files))
        )
        return
    outcome = run_bench(config, log=log, runner=runner)
    click.echo((outcome.out_dir / "bench.md").read_text(encoding="utf-8"))
    voted = outcome.summary["settings"]["vote"]  # `--vote auto` resolved (None: no vote)
    click.echo(
        f"{outcome.episodes_run} episodes"
        + (" (a vote counts as one)" if voted else "")
        + f" and {outcome.fidelity_run} fidelity comparisons run; "
        f"reports in {outcome.out_dir}: " + ", ".join(p.name for p in outcome.files)
    )
