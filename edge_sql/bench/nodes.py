"""Per-node figures of a bench: which node ran which episodes, on what CPU, how fast.

A variant whose episodes ran on machines with different CPUs gets no variant-wide speed or
load-time figure (they would average unlike hardware); its figures are given per node only,
and the report says so. Nodes with the same CPU model and core count count as one hardware.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from edge_sql.bench.figures import BenchSummary, NodeFigures, SpeedFigures
from edge_sql.bench.records import BenchRecord, EpisodeRecord, MachineDescription


def hardware_key(machine: MachineDescription) -> tuple[str, int | None]:
    return machine.get("cpu_model") or machine.get("processor"), machine.get("cpu_count")


def node_machines(records: Sequence[BenchRecord]) -> dict[str, MachineDescription]:
    """Each node's machine description, from the "load" records (the latest one of each node)."""
    machines: dict[str, MachineDescription] = {}
    for record in records:
        if record["kind"] == "load" and record.get("node") and record.get("machine"):
            machines[record["node"]] = record["machine"]
    return dict(sorted(machines.items()))


def per_node_figures(
    variant: str,
    episodes: Sequence[EpisodeRecord],
    records: Sequence[BenchRecord],
    speed_figures: Callable[[Sequence[EpisodeRecord]], SpeedFigures],
) -> dict[str, NodeFigures]:
    """{node: episodes run there (keys), load time, peak RSS and speed} for one variant."""
    nodes = sorted(
        {e.get("node") or "" for e in episodes}
        | {
            r.get("node") or ""
            for r in records
            if (r["kind"] == "load" or (r["kind"] == "peak" and r["task"] == "episodes")) and r["variant"] == variant
        }
    )
    out: dict[str, NodeFigures] = {}
    for node in nodes:
        mine = [e for e in episodes if (e.get("node") or "") == node]
        loads = [
            r for r in records if r["kind"] == "load" and r["variant"] == variant and (r.get("node") or "") == node
        ]
        peaks = [
            r["peak_rss_bytes"]
            for r in records
            if r["kind"] == "peak"
            and r.get("task") == "episodes"
            and r["variant"] == variant
            and (r.get("node") or "") == node
        ]
        out[node] = {
            "episode_keys": sorted([e["mode"], e["question_id"]] for e in mine),
            "loads": len(loads),
            "load_s": loads[-1]["load_s"] if loads else None,
            "n_threads": loads[-1].get("n_threads") if loads else None,
            "peak_rss_bytes": max(peaks, default=None),
            **speed_figures(mine),
        }
    return out


def mixed_hardware(per_node: dict[str, NodeFigures], machines: dict[str, MachineDescription]) -> bool:
    """Whether the nodes that ran a variant's episodes differ in CPU (nodes with no description,
    e.g. from a results file written before records named their node, are not counted)."""
    used = [node for node, figures in per_node.items() if figures["episodes"] and node in machines]
    return len({hardware_key(machines[node]) for node in used}) > 1


def markdown_lines(summary: BenchSummary) -> list[str]:
    """The per-node table: node, CPU, and each variant's episodes and speed there."""
    machines = summary.get("nodes", {})
    lines = [
        "",
        "Per node (each variant's episodes, load time, peak RSS and speed where they ran):",
        "",
        "| variant | node | CPU | threads | episodes | load s | peak RSS MB | prompt tok/s | decode tok/s |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for row in summary["variants"]:
        for node, figures in row.get("per_node", {}).items():
            machine = machines.get(node)
            cpu = f"{machine['cpu_model']} x{machine['cpu_count']}" if machine else "unknown x?"
            values = [
                _fmt(figures["load_s"], ".2f"),
                _fmt(None if figures["peak_rss_bytes"] is None else figures["peak_rss_bytes"] / 1e6, ".0f"),
                _fmt(figures["prompt_tok_s"], ".1f"),
                _fmt(figures["decode_tok_s"], ".1f"),
            ]
            lines.append(
                f"| {row['name']} | {node or 'unknown'} | {cpu} | {figures['n_threads'] or 'n/a'} "
                f"| {len(figures['episode_keys'])} | " + " | ".join(values) + " |"
            )
    mixed = [row["name"] for row in summary["variants"] if row.get("mixed_hardware")]
    if mixed:
        lines += [
            "",
            "Ran on different CPUs, so their speed and load time are given per node only: " + ", ".join(mixed) + ".",
        ]
    return lines


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
