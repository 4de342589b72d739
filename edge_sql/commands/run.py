"""`edge-sql run`: ask questions about a SQLite database and watch the model explore it."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from edge_sql.commands.options import budget_options, speculate_option
from edge_sql.errors import EdgeSqlError

PROMPT = "edge-sql> "
QUIT_WORDS = {"exit", "quit", r"\q"}
EXIT_INTERRUPTED = 130


@contextmanager
def _ctrl_c_stops(stop: threading.Event, interrupt_db) -> Iterator[None]:
    """While inside, Ctrl-C sets `stop` (the episode ends cleanly) and interrupts SQLite."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        stop.set()
        interrupt_db()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _print_event(event) -> None:
    from edge_sql.agent.display import call_line

    if event.kind == "round":
        click.echo(f"round {event.round}")
    elif event.kind == "call":
        click.echo(call_line(event.call))
    elif event.kind == "forced":
        click.echo("final answer (forced)")


@click.command()
@click.option("--db", "db_path", required=True, type=click.Path(path_type=Path),
              help="The SQLite database file to ask about (opened read-only; never modified).")
@click.option("--model", default=None, metavar="PATH|NAME",
              help="A .gguf file or a model-store name such as synsql:Q4_K_M "
                   "(default: the default model, pulled on first use).")
@click.option("--question", default=None, help="Answer this one question and exit (otherwise: an interactive prompt).")
@click.option("--evidence", default=None, help="A hint that goes with the question, as BIRD questions carry one (interactive: with every question).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per question instead of the live view.")
@click.option("--trace", is_flag=True, help="Also print the raw transcript (the exact text the model saw and wrote).")
@click.option("--seed", type=int, default=None, help="Seed for sampling, for reproducible answers.")
@click.option("--greedy", is_flag=True, help="Always pick the most likely token (no sampling).")
@click.option("--gpu-layers", type=click.IntRange(min=0), default=None,
              help="Layers to offload to the GPU (default: all when llama.cpp has a GPU backend, else none).")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: all available).")
@click.option("--ctx", "n_ctx", type=click.IntRange(min=512), default=12288, show_default=True,
              help="Context size in tokens; an episode uses at most 12,288 of it.")
@click.option("--prompt-file", type=click.Path(path_type=Path), default=None,
              help="A prompt template replacing the default (sqale-v2): a TOML file, or a packaged "
                   "template's name (sqale-v1); see edge_sql/agent/prompts/.")
@budget_options
@speculate_option
@click.option("--no-tune", is_flag=True,
              help="Use safe llama.cpp defaults instead of the settings calibrated for this model on this "
                   "machine (the first run of a model calibrates quickly; `edge-sql tune` runs the full sweep).")
def command(db_path: Path, model: str | None, question: str | None, evidence: str | None, as_json: bool,
            trace: bool, seed: int | None, greedy: bool, gpu_layers: int | None, threads: int | None,
            n_ctx: int, prompt_file: Path | None, budget: dict[str, int], no_tune: bool = False,
            speculate: str = "off") -> None:
    """Answer questions about a SQLite database with the local model.

    Without --question it opens a prompt: type a question, watch each tool round as it
    runs, and get the final SQL with its result. An empty line, `exit` or Ctrl-D quits;
    Ctrl-C stops the current question. The database is checked before the model loads.

    \b
    Examples:
      edge-sql run --db chinook.sqlite
      edge-sql run --db chinook.sqlite --question "How many albums are there?" --json
    """
    from edge_sql.agent.budget import Budget

    try:
        code = _run(db_path, model, question, evidence, as_json, trace, seed, greedy, gpu_layers, threads,
                    n_ctx, prompt_file, Budget(**budget), tune=not no_tune, speculate=speculate)
    except KeyboardInterrupt:
        click.echo("\nstopped.", err=True)
        code = EXIT_INTERRUPTED
    if code:
        sys.exit(code)


def _run(db_path, model, question, evidence, as_json, trace, seed, greedy, gpu_layers, threads, n_ctx,
         prompt_file, budget, tune: bool = True, speculate: str = "off") -> int:
    from edge_sql.agent import load_prompt
    from edge_sql.tools import ReadOnlyDatabase

    if question is not None and not question.strip():
        raise EdgeSqlError("empty question: pass some text to --question")
    db = ReadOnlyDatabase(db_path)  # a bad database fails here, before the model loads
    try:
        load_prompt(prompt_file)  # so is a bad prompt file
        agent = _load_agent(model, threads, gpu_layers, n_ctx, prompt_file, budget, tune, speculate)
        try:
            if question is not None:
                return _answer(agent, db, question, evidence, as_json, trace, seed, greedy)
            _interactive(agent, db, evidence, as_json, trace, seed, greedy)
            return 0
        finally:
            agent.close()
    finally:
        db.close()


def _load_agent(model, threads, gpu_layers, n_ctx, prompt_file, budget, tune=True, speculate="off"):
    from edge_sql.api import Agent

    click.echo(f"loading {model or 'the default model'} ...", err=True)
    agent = Agent(model, n_threads=threads, n_gpu_layers=gpu_layers, n_ctx=n_ctx, prompt_file=prompt_file,
                  budget=budget, log=lambda message: click.echo(message, err=True), tune=tune, speculate=speculate)
    click.echo(f"loaded {agent.info.describe()}", err=True)
    click.echo(f"settings ({agent.tuning}): {agent.info.settings}", err=True)
    return agent


def _answer(agent, db, question, evidence, as_json, trace, seed, greedy) -> int:
    """One question; returns the exit status (0 done, even without an answer; 130 stopped)."""
    from edge_sql.agent.display import answer_text

    stop = threading.Event()
    with _ctrl_c_stops(stop, db.interrupt):
        result = agent.ask(question, db, evidence=evidence, seed=seed, greedy=greedy,
                           on_event=None if as_json else _print_event, should_stop=stop.is_set)
    if as_json:
        click.echo(json.dumps(result.to_json(transcript=trace), ensure_ascii=False))
    else:
        click.echo(answer_text(result))
        if trace:
            click.echo("\n--- transcript ---\n" + result.transcript)
    return EXIT_INTERRUPTED if result.stop == "cancelled" else 0


def _interactive(agent, db, evidence, as_json, trace, seed, greedy) -> None:
    """Read questions until an empty line, `exit` or end of input."""
    if not as_json:
        click.echo(f"Ask about {db.path.name} ({len(db.table_names())} tables). "
                   "An empty line or `exit` quits; Ctrl-C stops a question.", err=True)
    while True:
        try:
            if as_json:  # keep stdout for the JSON lines
                click.echo(PROMPT, nl=False, err=True)
                line = input()
            else:
                line = input(PROMPT)
        except EOFError:
            click.echo("", err=True)
            return
        except KeyboardInterrupt:
            click.echo("\n(Ctrl-D, an empty line or `exit` quits)", err=True)
            continue
        text = line.strip()
        if not text or text.lower() in QUIT_WORDS:
            return
        code = _answer(agent, db, text, evidence, as_json, trace, seed, greedy)
        if code == EXIT_INTERRUPTED and not as_json:
            click.echo("(stopped; ask another question)", err=True)
