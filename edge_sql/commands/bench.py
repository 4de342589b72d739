"""`edge-sql bench`: compare BF16 and its quantized variants on speed, fidelity and accuracy."""

from __future__ import annotations

from pathlib import Path

import click

from edge_sql.errors import EdgeSqlError


def parse_budget_items(items: tuple[str, ...]) -> dict[str, int]:
    """`("max_rounds=2",)` -> {"max_rounds": 2}, checked against the agent's Budget fields."""
    from edge_sql.agent.budget import parse_budget_items as parse

    try:
        return parse(items)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--budget") from None


@click.command(name="bench")
@click.option("--base", type=click.Path(path_type=Path, dir_okay=False),
              help="The BF16 GGUF file every variant is made from and compared with.")
@click.option("--model", metavar="NAME",
              help="A model in the local store (e.g. synsql): its BF16 file is the base, and variants "
              "already in the store are used as they are. Use this or --base.")
@click.option("--variants", "variants_text", metavar="LIST",
              help="Comma-separated variants: quantization types, recipe names or GGUF paths. "
              "BF16 (the reference) is always included. Default: BF16,Q8_0,Q6_K,Q5_K_M,Q4_K_M and "
              "the recipe keeping ssm_out/attn_qkv/attn_gate at Q8_0.")
@click.option("--dataset", default="bundled", show_default=True, metavar="FILE|bundled",
              help="Labelled questions: 'bundled' (64 questions over Chinook and Northwind) or a "
              "BIRD/Spider-style questions file.")
@click.option("--format", "dataset_format", type=click.Choice(["bird", "spider"]), default="bird",
              show_default=True, help="Format of the questions file.")
@click.option("--db-root", type=click.Path(path_type=Path, file_okay=False),
              help="Folder with the databases as <db_id>/<db_id>.sqlite (not needed for 'bundled').")
@click.option("--limit", type=click.IntRange(min=1),
              help="Use only N questions, taking the difficulty labels in turn.")
@click.option("--modes", default="withheld,given", show_default=True,
              help="'withheld': the schema is not in the prompt (the trained protocol); 'given': the "
              "CREATE TABLE statements are in the user turn (the model card's 'full' figure).")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed of every episode.")
@click.option("--greedy", is_flag=True, help="Greedy decoding instead of the trained sampling settings.")
@click.option("--threads", type=click.IntRange(min=1), help="CPU threads (default: all available).")
@click.option("--ctx", "n_ctx", type=click.IntRange(min=256), default=12288, show_default=True,
              help="Context size of each episode.")
@click.option("--max-rounds", type=click.IntRange(min=1), help="Tool rounds before the forced answer (protocol: 6).")
@click.option("--think-tokens", type=click.IntRange(min=1),
              help="Bound on each <think> block (default: the agent's).")
@click.option("--calls-per-turn", type=click.IntRange(min=1), help="Bound on tool calls in one turn.")
@click.option("--episode-tokens", type=click.IntRange(min=256), help="Token budget of an episode (protocol: 12288).")
@click.option("--budget", "budget_items", multiple=True, metavar="FIELD=N",
              help="Set any other field of the agent's Budget, e.g. --budget max_final_sql_tokens=64 "
              "(repeatable).")
@click.option("--fidelity-tokens", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Teacher-force at most this many tokens of each BF16 transcript.")
@click.option("--prompt-file", type=click.Path(path_type=Path, dir_okay=False),
              help="A prompt template TOML file replacing the packaged one.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), default=Path("bench-out"),
              show_default=True, help="Folder for bench.json, bench.md, the PNG plots, the results file "
              "and the cache of quantized files.")
@click.option("--note", default="", metavar="TEXT",
              help="A line shown under the report's heading and the plots' titles (e.g. 'random weights').")
@click.option("--resume/--no-resume", default=True, show_default=True,
              help="Skip episodes already in the out folder's results file (after a crash or a stop).")
@click.option("--no-tune", is_flag=True,
              help="Run every variant with safe llama.cpp defaults instead of its calibrated settings (to compare).")
def command(base: Path | None, model: str | None, variants_text: str | None, dataset: str, dataset_format: str,
            db_root: Path | None, limit: int | None, modes: str, seed: int, greedy: bool, threads: int | None,
            n_ctx: int, max_rounds: int | None, think_tokens: int | None, calls_per_turn: int | None,
            episode_tokens: int | None, budget_items: tuple[str, ...], fidelity_tokens: int, prompt_file: Path | None, out_dir: Path,
            note: str, resume: bool, no_tune: bool = False) -> None:
    """Benchmark BF16 and its quantized variants: size, load time, peak RSS, prompt and decode
    speed, episode wall time, fidelity to BF16 (KL divergence, top-1 agreement, answer
    agreement) and execution accuracy with the schema withheld and given.

    Example: edge-sql bench --model synsql --dataset mini_dev_sqlite.json --db-root dev_databases
    """
    from edge_sql.bench import BenchConfig, parse_variant_names, run_bench
    from edge_sql.bench.modes import parse_modes

    budget = {key: value for key, value in {
        "max_rounds": max_rounds, "max_think_tokens": think_tokens, "max_final_think_tokens": think_tokens,
        "max_calls_per_turn": calls_per_turn, "max_tokens": episode_tokens,
    }.items() if value is not None}
    try:
        budget.update(parse_budget_items(budget_items))
        config = BenchConfig(
            out_dir=out_dir, base=base, model=model, variants=parse_variant_names(variants_text),
            dataset=dataset, dataset_format=dataset_format, db_root=db_root, limit=limit,
            modes=parse_modes(modes), seed=seed, n_threads=threads, n_ctx=n_ctx, budget=budget, greedy=greedy,
            prompt_file=prompt_file, fidelity_tokens=fidelity_tokens, resume=resume, note=note, tune=not no_tune,
        )
        outcome = run_bench(config, log=lambda message: click.echo(message, err=True))
    except EdgeSqlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo((outcome.out_dir / "bench.md").read_text(encoding="utf-8"))
    click.echo(f"{outcome.episodes_run} episodes and {outcome.fidelity_run} fidelity comparisons run; "
               f"reports in {outcome.out_dir}: " + ", ".join(p.name for p in outcome.files))
