"""`edge-sql tune`: calibrate llama.cpp's settings for a model on this machine (the full sweep)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from edge_sql.runtime.tuning import Calibration


@click.command("tune")
@click.argument("model", required=False, metavar="[PATH|NAME]")
@click.option("--quick", is_flag=True, help="Only the short calibration `run` does on first use.")
@click.option(
    "--gpu-layers",
    type=click.IntRange(min=-1),
    default=None,
    help="Layers that would be offloaded to the GPU; -1 all (default: all when llama.cpp has a GPU backend).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON.")
def command(model: str | None, quick: bool, gpu_layers: int | None, as_json: bool) -> None:
    """Measure prefill and decode speed under each candidate setting and keep the fastest that fits.

    Candidates: n_ubatch 64-512, all CPUs or physical cores only, and repacked weights where
    this llama.cpp build runs them safely; flash attention off, except on one thread where both
    are tried (above one thread the count follows the machine's load, and flash attention's
    sums would change with it). The choice minimises the time of a typical six-round episode
    growing to 12,288 tokens, among settings whose memory at a full context stays within the
    model file + 400 MiB. The result is cached in the model
    store for this file on this machine; `edge-sql run` then loads the model with it and
    `edge-sql models` shows it. MODEL is a .gguf path or a store name (default: the default model).
    """
    from edge_sql.api import resolve_model_path
    from edge_sql.runtime.llama.backend import gpu_backend_name, init_backend
    from edge_sql.runtime.tuning import busy_check, calibrate, save_calibration

    path = resolve_model_path(model, pull_if_missing=False)
    init_backend()
    gpu = gpu_backend_name()
    if gpu and gpu_layers != 0:
        click.echo(
            f"calibration does not apply: layers are offloaded to the GPU ({gpu}), which keeps its own "
            "defaults. Use --gpu-layers 0 to calibrate for the CPU."
        )
        return
    calibration = calibrate(path, full=not quick, progress=lambda message: click.echo(message, err=True))
    saved = save_calibration(calibration)
    click.echo("timing the chosen settings quiet and beside one other busy program ...", err=True)
    busy = busy_check(path, calibration.chosen)
    if as_json:
        click.echo(json.dumps({**calibration.to_json(), "busy_check": busy.to_json()}, indent=2))
        return
    click.echo(calibration_table(calibration))
    chosen, best = calibration.chosen_measurement(), calibration.best()
    click.echo(
        f"\nchosen: {calibration.chosen.label} ({chosen.episode_s:.0f} s per episode predicted; "
        f"fastest measured: {best.episode_s:.0f} s)"
    )
    click.echo(busy.line())
    if calibration.note:
        click.echo(f"note: {calibration.note}")
    click.echo(
        f"calibrated in {calibration.seconds:.0f} s on {calibration.machine}, {calibration.build}; saved to {saved}"
    )


def calibration_table(calibration: Calibration) -> str:
    """The sweep as a text table, fastest first; `*` marks the chosen setting."""
    from edge_sql.runtime.tuning import EPISODE_TOKENS

    measured = sorted(calibration.measurements, key=lambda m: m.episode_s)
    points = next((m.points for m in measured if m.points), [])  # candidates over budget: untimed
    lines = [
        f"{'':2}{'settings':<52} {'episode s':>9} {'memory MiB':>10}  "
        + "  ".join(f"{'@' + str(p):>13}" for p in points),
        f"{'':2}{'':<52} {'':>9} {'':>10}  " + "  ".join(f"{'prefill/decode':>13}" for _ in points),
    ]
    for m in measured:
        mark = "* " if m.settings == calibration.chosen else "  "
        speeds = "  ".join(f"{1 / p:6.0f}/{1 / d:6.1f}" for p, d in zip(m.prefill_s, m.decode_s))
        over = "" if m.fits else " (over)"
        if not m.points:
            over = "(over: not timed)" if not m.fits else "(not timed: the quick calibration's time was up)"
        episode = f"{m.episode_s:9.1f}" if m.points else f"{'-':>9}"
        lines.append(f"{mark}{m.settings.label:<52} {episode} {m.memory_bytes / 2**20:10.0f}  {speeds}{over}")
    lines.append(
        f"(tok/s at each context length; memory: bound beyond the file at a {EPISODE_TOKENS}-token "
        f"context, budget {calibration.memory_allowance / 2**20:.0f} MiB)"
    )
    lines.append(_speculation_line(calibration))
    lines.append(_parallel_line(calibration))
    lines.append(_vote_line(calibration))
    return "\n".join(lines)


def _vote_line(calibration: Calibration) -> str:
    """What `--vote auto` picks from the measured rates, and why (runtime/tuning/auto_vote.py)."""
    from edge_sql.runtime.tuning.auto_vote import auto_vote_line

    return f"({auto_vote_line(calibration.parallel_rates, calibration.chosen.parallel_limit or 1)})"


def _parallel_line(calibration: Calibration) -> str:
    """How many episodes at once fit (`--parallel`), what each width measured, and the default."""
    chosen = calibration.chosen
    rates = calibration.parallel_rates  # width 1 is always among them (tuning/parallel.py: WIDTHS)
    measured = ""
    if rates:
        measured = (
            "; decode tok/s at "
            + ", ".join(f"{int(width)}: {rate:.1f}" for width, rate in rates)
            + f"; default {chosen.parallel}, {calibration.parallel_speedup:.2f}x one"
        )
    return (
        f"(episodes at once within {calibration.parallel_allowance / 2**20:.0f} MiB: up to {chosen.parallel_limit}, "
        f"{chosen.sequence_bytes / 2**20:.0f} MiB per sequence{measured}; the default of --parallel)"
    )


def _speculation_line(calibration: Calibration) -> str:
    """How many drafts per verify batch the chosen settings leave room for."""
    from edge_sql.runtime.tuning import speculation_bytes

    chosen, measured = calibration.chosen, calibration.chosen_measurement()
    per_draft = speculation_bytes(1, measured.state_bytes, measured.n_vocab) / 2**20
    mtp = (
        f"; with the MTP drafter's context ({calibration.mtp_bytes / 2**20:.0f} MiB): "
        + (f"draft_max {chosen.draft_max_mtp}" if chosen.draft_max_mtp else "none, auto drafts by lookup alone")
        if calibration.mtp_bytes
        else ""
    )
    return (
        f"(speculation within the budget, {per_draft:.1f} MiB per draft: "
        + (f"draft_max {chosen.draft_max}" if chosen.draft_max else "no draft fits, --speculate stays off")
        + f"{mtp})"
    )
