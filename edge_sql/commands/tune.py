"""`edge-sql tune`: calibrate llama.cpp's settings for a model on this machine (the full sweep)."""

from __future__ import annotations

import json

import click


@click.command("tune")
@click.argument("model", required=False, metavar="[PATH|NAME]")
@click.option("--quick", is_flag=True, help="Only the short calibration `run` does on first use.")
@click.option("--gpu-layers", type=click.IntRange(min=0), default=None,
              help="Layers that would be offloaded to the GPU (default: all when llama.cpp has a GPU backend).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON.")
def command(model: str | None, quick: bool, gpu_layers: int | None, as_json: bool) -> None:
    """Measure prefill and decode speed under each candidate setting and keep the fastest that fits.

    Candidates: flash attention on/off, n_ubatch 64-512, all CPUs or physical cores only, and
    repacked weights where this llama.cpp build runs them safely. The choice minimises the
    time of a typical six-round episode growing to 12,288 tokens, among settings whose memory
    at a full context stays within the model file + 400 MiB. The result is cached in the model
    store for this file on this machine; `edge-sql run` then loads the model with it and
    `edge-sql models` shows it. MODEL is a .gguf path or a store name (default: the default model).
    """
    from edge_sql.api import resolve_model_path
    from edge_sql.runtime.backend import gpu_backend_name, init_backend
    from edge_sql.runtime.tuning import calibrate, save_calibration

    path = resolve_model_path(model, pull_if_missing=False)
    init_backend()
    gpu = gpu_backend_name()
    if gpu and gpu_layers != 0:
        click.echo(f"calibration does not apply: layers are offloaded to the GPU ({gpu}), which keeps its own "
                   "defaults. Use --gpu-layers 0 to calibrate for the CPU.")
        return
    calibration = calibrate(path, full=not quick, progress=lambda message: click.echo(message, err=True))
    saved = save_calibration(calibration)
    if as_json:
        click.echo(json.dumps(calibration.to_json(), indent=2))
        return
    click.echo(calibration.table())
    chosen, best = calibration.chosen_measurement(), calibration.best()
    click.echo(f"\nchosen: {calibration.chosen.label} ({chosen.episode_s:.0f} s per episode predicted; "
               f"fastest measured: {best.episode_s:.0f} s)")
    if calibration.note:
        click.echo(f"note: {calibration.note}")
    click.echo(f"calibrated in {calibration.seconds:.0f} s on {calibration.machine}, {calibration.build}; saved to {saved}")
