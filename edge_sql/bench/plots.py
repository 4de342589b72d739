"""PNG plots of a bench: accuracy and answer agreement against file size; decode speed against size."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict, Unpack

from edge_sql.bench.figures import BenchSummary, VariantRow

if TYPE_CHECKING:  # matplotlib is an optional extra, imported only to plot
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ACCURACY_PNG = "accuracy_vs_size.png"
SPEED_PNG = "decode_speed_vs_size.png"
FIDELITY_PNG = "fidelity_vs_size.png"
RISK_COVERAGE_PNG = "accuracy_by_confidence.png"


SKIPPED_NOTE = "plots skipped: matplotlib is not installed (pip install 'edge-sql[bench]' for them)"


def _pyplot() -> ModuleType | None:
    """matplotlib's pyplot on the file-only backend, or None when the optional extra is missing."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label_points(ax: Axes, xs: list[float], ys: list[float | None], names: list[str]) -> None:
    """Name each point; labels alternate above and below so neighbours of similar size stay legible."""
    for index, (x, y, name) in enumerate(zip(xs, ys, names)):
        if y is not None:
            offset = (4, 6) if index % 2 == 0 else (4, -12)
            ax.annotate(name, (x, y), textcoords="offset points", xytext=offset, fontsize=7)


class _Style(TypedDict, total=False):
    """How `_series` draws a series (matplotlib's `plot` keywords the plots use)."""

    marker: str
    linestyle: str
    color: str
    label: str


def _series(ax: Axes, xs: list[float], ys: list[float | None], **style: Unpack[_Style]) -> None:
    points = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], **style)


def _finish(
    plt: ModuleType, fig: Figure, ax: Axes, title: str, title_note: str, path: Path, *, legend: bool = True
) -> Path:
    """Title, grid and legend on `ax`, then save the figure as `path` and close it."""
    ax.set_title(title + (f"\n{title_note}" if title_note else ""), fontsize=9)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_plots(summary: BenchSummary, out_dir: Path, log: Callable[[str], None] = lambda _msg: None) -> list[Path]:
    """Write the three PNGs into `out_dir` and return their paths; without matplotlib (an optional
    extra) write none and say so in one line through `log`, since the JSON and Markdown reports
    hold every figure."""
    plt = _pyplot()
    if plt is None:
        log(SKIPPED_NOTE)
        return []
    rows = sorted(summary["variants"], key=lambda r: r["size_bytes"])
    sizes = [r["size_bytes"] / 1e9 for r in rows]
    names = [r["name"] for r in rows]
    modes = summary["settings"]["modes"]
    title_note = textwrap.fill(summary["settings"].get("note", ""), width=90)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, marker in zip(modes, ("o", "s")):
        values = [_percent(r, mode) for r in rows]
        _series(ax, sizes, values, marker=marker, label=f"execution accuracy, schema {mode}")
    agreement = [
        None if r["answer_agreement"]["overall"] is None else 100 * r["answer_agreement"]["overall"] for r in rows
    ]
    _series(
        ax,
        sizes,
        agreement,
        marker="^",
        linestyle="--",
        label=f"answer agreement with {summary['settings']['reference']}",
    )
    _label_points(ax, sizes, agreement, names)
    ax.set_xlabel("file size (GB)")
    ax.set_ylabel("%")
    ax.set_ylim(-5, 112)
    accuracy_path = _finish(
        plt, fig, ax, "Accuracy and answer agreement vs file size", title_note, out_dir / ACCURACY_PNG
    )

    fig, ax = plt.subplots(figsize=(7, 4.5))
    speeds = [r["decode_tok_s"] for r in rows]
    _series(ax, sizes, speeds, marker="o", label="decode tok/s with the grammar")
    _label_points(ax, sizes, speeds, names)
    ax.set_xlabel("file size (GB)")
    ax.set_ylabel("tokens / s")
    ax.set_ylim(0, 1.2 * max((v for v in speeds if v is not None), default=1.0))
    speed_path = _finish(plt, fig, ax, "Decode speed vs file size", title_note, out_dir / SPEED_PNG)
    fidelity_path = out_dir / FIDELITY_PNG
    _fidelity_plot(plt, rows, sizes, names, summary["settings"]["reference"], title_note, fidelity_path)
    paths = [accuracy_path, speed_path, fidelity_path]
    if any(r.get("confidence") for r in rows):
        paths.append(_risk_coverage_plot(plt, rows, title_note, out_dir / RISK_COVERAGE_PNG))
    return paths


def _percent(row: VariantRow, mode: str) -> float | None:
    """A mode's overall accuracy in percent, None where it did not run or had no question."""
    entry = row["accuracy"].get(mode)
    return entry["overall"]["percent"] if entry and entry["overall"]["total"] else None


def _risk_coverage_plot(plt: ModuleType, rows: list[VariantRow], title_note: str, path: Path) -> Path:
    """Accuracy of the answers kept against the share kept, answering only at or above each
    confidence level (checked, then unchecked, then all): a curve that falls to the right means
    the confidence means something."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        for mode, figures in (row.get("confidence") or {}).items():
            points = [(p, accuracy) for p in figures["coverage"] if (accuracy := p["accuracy"]) is not None]
            xs = [100 * p["coverage"] for p, _ in points]
            ys = [100 * accuracy for _, accuracy in points]
            ax.plot(xs, ys, marker="o", label=f"{row['name']}, {mode}")
            for x, y, (p, _) in zip(xs, ys, points):
                ax.annotate(p["level"], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("coverage: questions answered at or above the level (%)")
    ax.set_ylabel("accuracy of those answers (%)")
    ax.set_xlim(-5, 105)
    ax.set_ylim(-5, 112)
    return _finish(plt, fig, ax, "Accuracy by confidence (risk-coverage)", title_note, path)


def _fidelity_plot(
    plt: ModuleType,
    rows: list[VariantRow],
    sizes: list[float],
    names: list[str],
    reference: str,
    title_note: str,
    path: Path,
) -> None:
    """Mean KL against the reference (left axis) and top-1 agreement (right axis) vs file size."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    kl = [r["fidelity"]["kl_mean"] for r in rows]
    top1 = [None if r["fidelity"]["top1"] is None else 100 * r["fidelity"]["top1"] for r in rows]
    _series(ax, sizes, kl, marker="o", linestyle="none", color="tab:red", label=f"mean KL({reference} || variant)")
    _label_points(ax, sizes, kl, names)
    ax.set_xlabel("file size (GB)")
    ax.set_ylabel("mean KL divergence (nats)")
    ax.set_ylim(bottom=0, top=1.2 * max((v for v in kl if v is not None), default=0.0) or 1.0)
    right = ax.twinx()
    _series(
        right, sizes, top1, marker="s", linestyle="none", color="tab:blue", label=f"top-1 agreement with {reference}"
    )
    right.set_ylabel("top-1 agreement (%)")
    right.set_ylim(-5, 112)
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="center right")
    _finish(plt, fig, ax, f"Fidelity to {reference} vs file size", title_note, path, legend=False)
