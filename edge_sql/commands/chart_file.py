"""`run --chart FILE.svg|FILE.png`: the answer's chart (edge_sql/charts) written as an image, or
one line on stderr saying which rule gave no chart."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from edge_sql.agent.result import EpisodeResult


def check_chart_file(path: Path | None, question: str | None) -> None:
    """Before any work: the file's format, the renderer installed, and one question to chart."""
    if path is None:
        return
    from edge_sql.charts.render import chart_format, require_renderer

    if question is None:
        raise click.UsageError("--chart needs --question: it writes one answer's chart")
    chart_format(path)
    require_renderer(path)


def write_chart(result: EpisodeResult, path: Path) -> None:
    """The result's chart to `path`; when none suits the result, nothing is written and stderr says why."""
    from edge_sql.charts import choose_chart
    from edge_sql.charts.render import render_chart

    spec = result.chart
    if spec is None:
        why = "no answer" if result.sql is None else choose_chart(result.columns, result.rows).reason
        click.echo(f"no chart written to {path}: {why}", err=True)
        return
    render_chart(spec, path)
    meta = spec["usermeta"]["edge_sql"]
    cut = ", the first rows only: the query had more" if meta["truncated"] else ""
    click.echo(f"chart written to {path}: {meta['rule']} ({meta['rows']} rows{cut})", err=True)
