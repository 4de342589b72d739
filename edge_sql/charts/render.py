"""A chart's spec written as an SVG or PNG file, offline and without a browser: vl-convert runs
Vega and Vega-Lite in an embedded JavaScript engine (the `charts` extra; docs/charts.md says why
this one: a wheel with no dependencies, ~0.1 s a chart once loaded)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from edge_sql.convert.atomic import write_atomic
from edge_sql.errors import ChartFileError

FORMATS = (".svg", ".png")
PNG_SCALE = 2  # twice the spec's pixels: sharp on a high-density screen


def chart_format(path: Path) -> str:
    """`.svg` or `.png` from the file's name; ChartFileError for anything else."""
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ChartFileError(f"--chart {path}: the file must end in .svg or .png (the image's format)", path=path)
    return suffix


def require_renderer(path: Path | None = None) -> None:
    """ChartFileError, with how to install it, when vl-convert is missing (checked before any work)."""
    try:
        import vl_convert  # noqa: F401  # imported to see that it is installed
    except ImportError as exc:
        raise ChartFileError(
            "--chart needs vl-convert-python, which renders the chart without a browser: "
            "pip install 'edge-sql[charts]'",
            path=path,
        ) from exc


def render_chart(spec: Mapping[str, object], path: Path) -> None:
    """Write `spec` (Vega-Lite) to `path` as SVG or PNG, by its suffix; atomically."""
    suffix = chart_format(path)
    require_renderer(path)
    import vl_convert

    text = json.dumps(spec)  # a string: vl-convert reads it as is
    if suffix == ".svg":
        data = vl_convert.vegalite_to_svg(text).encode()
    else:
        data = bytes(vl_convert.vegalite_to_png(text, scale=PNG_SCALE))
    write_atomic(path, data)
