"""`edge-sql models`: list the GGUF files in the local model store."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edge_sql.store import ModelStore, StoredModel
from edge_sql.store.catalog import load_catalog
from edge_sql.store.index import gguf_mtp_layers
from edge_sql.store.resolve import installed_packaged_models


def human_size(size: float) -> str:
    """Bytes as a short human-readable string (decimal units, like the hub shows)."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def tuned_label(entry: StoredModel) -> str | None:
    """The llama.cpp settings calibrated for this file on this machine, or None (not tuned yet)."""
    from edge_sql.runtime.tuning import cached_calibration

    if not entry.exists:
        return None
    calibration = cached_calibration(entry.path)
    return f"{calibration.chosen.label} ({calibration.mode})" if calibration else None


def mtp_layers(entry: StoredModel) -> int | None:
    """MTP head layers of the entry's file (read from its header for entries recorded before the
    store kept it); None when unknown."""
    if entry.mtp_layers is not None or not entry.exists:
        return entry.mtp_layers
    return gguf_mtp_layers(entry.path)


def _mtp_label(entry: StoredModel) -> str:
    n = mtp_layers(entry)
    return "?" if n is None else ("yes" if n else "no")


def _is_default(entry: StoredModel) -> bool:
    catalog = load_catalog()
    return (entry.name, entry.variant) == (catalog.default_model, catalog.default_variant)


def render_table(entries: list[StoredModel]) -> str:
    """The store as an aligned text table; `*` marks the default model (what `run` uses without --model);
    MTP says whether the file has the multi-token-prediction head (MTP drafting needs it)."""
    header = ("NAME", "VARIANT", "SIZE", "MTP", "PATH")
    rows = [
        (
            ("* " if _is_default(e) else "  ") + e.name,
            e.variant,
            human_size(e.size),
            _mtp_label(e),
            str(e.path) + ("" if e.exists else "  (file missing)"),
        )
        for e in entries
    ]
    widths = [max(len(r[i]) for r in [("  " + header[0], *header[1:]), *rows]) for i in range(4)]
    lines = [
        f"{'  ' + header[0]:<{widths[0]}}  {header[1]:<{widths[1]}}  {header[2]:>{widths[2]}}  "
        f"{header[3]:<{widths[3]}}  {header[4]}"
    ]
    lines += [
        f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:<{widths[3]}}  {r[4]}" for r in rows
    ]
    return "\n".join(lines)


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print the store as JSON (one object per file).")
def command(as_json: bool) -> None:
    """List the models in the local store: name, variant, size, MTP head and path.

    The store is $EDGE_SQL_HOME, or the user data folder (~/.local/share/edge-sql on Linux).
    `*` marks the default model that `edge-sql run` uses without --model.
    """
    store = ModelStore()
    entries = store.list()
    packaged = installed_packaged_models()
    if as_json:
        payload = [
            {
                **e.to_json(),
                "mtp_layers": mtp_layers(e),
                "exists": e.exists,
                "default": _is_default(e),
                "settings": tuned_label(e),
            }
            for e in entries
        ]
        carried = [
            {"name": name, "model": what, "path": str(path), "size": path.stat().st_size}
            for name, what, path in packaged
        ]
        click.echo(json.dumps({"store": str(store.root), "models": payload, "packaged": carried}, indent=2))
        return
    if not entries:
        catalog = load_catalog()
        known = ", ".join(f"{e.name} ({e.repo})" for e in catalog.entries)
        click.echo(
            f"The model store at {store.root} is empty. Get the default model with `edge-sql pull`; "
            f"known models: {known}."
        )
        _echo_packaged(packaged)
        return
    click.echo(render_table(entries))
    click.echo("\nllama.cpp settings on this machine (`edge-sql tune NAME` calibrates):")
    for e in entries:
        click.echo(f"  {e.name}:{e.variant}  {tuned_label(e) or 'not tuned yet (the first run calibrates)'}")
    _echo_packaged(packaged)
    click.echo(f"\nstore: {store.root}")


def _echo_packaged(packaged: list[tuple[str, str, Path]]) -> None:
    """The models installed packages carry, outside the store (`--model NAME`; smollm2: `--profile small`)."""
    if not packaged:
        return
    click.echo("\nModels that installed packages carry (no pull needed; `--model NAME`, or `--profile small`):")
    for name, what, path in packaged:
        click.echo(f"  {name}  {what}  {human_size(path.stat().st_size)}  {path}")
