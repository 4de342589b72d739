"""Charts chosen by rules, not by a model: a result's columns read for their kinds (number, time,
category, ...), a written rule picks the chart or none, and the chart is a Vega-Lite spec of
the whole result (docs/charts.md). The page, `run --chart`, `--json`, HTTP and MCP all carry
the same spec; rendering it to SVG or PNG (`render.py`) needs the [charts] extra."""

from edge_sql.charts.columns import Column, column_kind, read_columns
from edge_sql.charts.rules import ChartChoice, choose_chart
from edge_sql.charts.spec import chart_for, chart_spec

__all__ = ["ChartChoice", "Column", "chart_for", "chart_spec", "choose_chart", "column_kind", "read_columns"]
