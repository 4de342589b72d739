"""The Vega-Lite spec of a chart the rules chose: the whole result's rows as its data, the
columns' names as titles, and a subtitle when the result was cut. One spec for every surface:
the page draws it with vega-embed, `run --chart` renders it with vl-convert, the JSON carries it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edge_sql.charts.columns import Column
from edge_sql.charts.rules import ChartChoice, choose_chart

# A spec (and each part of it) is JSON written for json.dumps and the page, read by nobody here;
# its data records hold the result's cells as they are (SQLite's values: the rules chart no blob)
Spec = dict[str, object]
Record = dict[str, object]

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"  # a name only: nothing is fetched
WIDTH = 480
TIME_UNITS = {"month": "utcyearmonth", "day": "utcyearmonthdate"}  # UTC: a date is the same day everywhere


def field_name(name: str) -> str:
    """A column's name as a Vega-Lite field: dots, brackets and backslashes escaped, since
    Vega-Lite reads `a.b` as a nested field."""
    return "".join("\\" + ch if ch in ".[]\\" else ch for ch in name)


def _instant(value: object) -> object:
    """`2024-01-31 10:00` as ISO with a T and, without an offset, Z: every browser reads it as UTC."""
    if not isinstance(value, str):
        return value
    text = value.replace(" ", "T", 1)
    return text if text.endswith("Z") or "+" in text[10:] or "-" in text[10:] else text + "Z"


def _x_encoding(column: Column, key: str) -> Spec:
    encoding: Spec = {"field": field_name(key), "title": column.name}
    if column.kind == "year":
        encoding["type"] = "ordinal"
        encoding["axis"] = {"labelAngle": 0}  # 2009 reads across
    elif column.kind == "time":
        encoding["type"] = "temporal"
        if column.grain in TIME_UNITS:
            encoding["timeUnit"] = TIME_UNITS[column.grain]
        else:
            encoding["scale"] = {"type": "utc"}
    else:
        encoding["type"] = "nominal"
    return encoding


def _keys(columns: Sequence[str]) -> list[str]:
    """A unique record key per column (SQLite allows two columns of one name: `x`, `x (2)`)."""
    keys: list[str] = []
    for name in columns:
        key, n = name, 1
        while key in keys:
            n += 1
            key = f"{name} ({n})"
        keys.append(key)
    return keys


def _free(name: str, taken: Sequence[str]) -> str:
    while name in taken:
        name += "_"
    return name


def _wide(choice: ChartChoice, keys: list[str], rows: Sequence[Sequence[object]]) -> list[Record]:
    """One record per row, the chart's columns only, keyed by column."""
    used = [c for c in (choice.x, choice.split, *choice.measures) if c is not None]
    convert = {c.index: _instant for c in used if c.kind == "time" and c.grain == "instant"}
    return [{keys[c.index]: convert.get(c.index, lambda v: v)(row[c.index]) for c in used} for row in rows]


def _long(
    choice: ChartChoice, keys: list[str], rows: Sequence[Sequence[object]], series: str, value: str
) -> list[Record]:
    """One record per row and number, for charts that colour by which number it is."""
    assert choice.x is not None
    x = choice.x
    convert = _instant if x.kind == "time" and x.grain == "instant" else (lambda v: v)
    return [
        {keys[x.index]: convert(row[x.index]), series: m.name, value: row[m.index]}
        for row in rows
        for m in choice.measures
    ]


def _encoding_and_data(
    choice: ChartChoice, keys: list[str], rows: Sequence[Sequence[object]]
) -> tuple[Spec, list[Record]]:
    """The mark's encoding and the data records for each kind of chart."""
    assert choice.x is not None and choice.kind is not None
    x, measures = choice.x, choice.measures
    tooltip = [{"field": field_name(keys[c.index]), "title": c.name} for c in (x, choice.split, *measures) if c]
    if len(measures) == 1:
        m = measures[0]
        y = {"field": field_name(keys[m.index]), "type": "quantitative", "title": m.name}
        if choice.kind == "bar":  # horizontal: long labels stay readable; largest on top
            label = {**_x_encoding(x, keys[x.index]), "sort": "-x"}
            return {"y": label, "x": y, "tooltip": tooltip}, _wide(choice, keys, rows)
        if choice.kind == "point":
            x_encoding = {"field": field_name(keys[x.index]), "type": "quantitative", "title": x.name}
            return {"x": x_encoding, "y": y, "tooltip": tooltip}, _wide(choice, keys, rows)
        encoding = {"x": _x_encoding(x, keys[x.index]), "y": y, "tooltip": tooltip}
        if choice.split is not None:
            encoding["color"] = {
                "field": field_name(keys[choice.split.index]),
                "type": "nominal",
                "title": choice.split.name,
            }
        return encoding, _wide(choice, keys, rows)
    series = _free("series", [keys[x.index]])
    value = _free("value", [keys[x.index], series])
    color = {"field": series, "type": "nominal", "title": None, "sort": [m.name for m in measures]}
    y_value: Spec = {"field": value, "type": "quantitative", "title": None}
    tooltip = [
        {"field": field_name(keys[x.index]), "title": x.name},
        {"field": series, "title": "column"},
        {"field": value, "type": "quantitative", "title": "value"},
    ]
    records = _long(choice, keys, rows, series, value)
    if choice.kind == "grouped_bar":  # in the result's own order: its ORDER BY
        label = {**_x_encoding(x, keys[x.index]), "sort": None}
        offset = {"field": series, "sort": [m.name for m in measures]}
        return {"y": label, "yOffset": offset, "x": y_value, "color": color, "tooltip": tooltip}, records
    return {"x": _x_encoding(x, keys[x.index]), "y": y_value, "color": color, "tooltip": tooltip}, records


MARKS: dict[str, Spec] = {
    "line": {"type": "line", "point": True},
    "bar": {"type": "bar"},
    "grouped_bar": {"type": "bar"},
    "point": {"type": "point", "filled": True},
}


def chart_spec(
    choice: ChartChoice, columns: Sequence[str], rows: Sequence[Sequence[object]], *, truncated: bool
) -> dict[str, Any]:  # Any: usermeta (`run --chart` reads it)
    """The Vega-Lite spec of a chosen chart over all `rows`; `truncated`: the query had more rows
    than the result kept, which the subtitle and the description say."""
    assert choice.kind is not None and choice.x is not None
    keys = _keys(columns)
    encoding, records = _encoding_and_data(choice, keys, rows)
    names = [m.name for m in choice.measures]
    title = (
        f"{', '.join(names)} by {choice.x.name}" if choice.kind != "point" else f"{names[0]} against {choice.x.name}"
    )
    cut = f"The first {len(rows)} rows only: the query had more." if truncated else None
    spec: Spec = {
        "$schema": SCHEMA,
        "description": f"{title} ({choice.reason}).{' ' + cut if cut else ''}",
        "title": {"text": title, **({"subtitle": cut} if cut else {})},
        "width": WIDTH,
        "data": {"values": records},
        "mark": dict(MARKS[choice.kind]),
        "encoding": encoding,
        "usermeta": {
            "edge_sql": {"kind": choice.kind, "rows": len(rows), "truncated": truncated, "rule": choice.reason}
        },
    }
    return spec


def chart_for(
    columns: Sequence[str], rows: Sequence[Sequence[object]], *, truncated: bool = False
) -> dict[str, Any] | None:  # Any: usermeta
    """The Vega-Lite spec the rules give a result (all its rows), or None when no chart suits it."""
    choice = choose_chart(columns, rows)
    return None if choice.kind is None else chart_spec(choice, columns, rows, truncated=truncated)
