"""The chart rules (edge_sql/charts, docs/charts.md) on crafted results: each kind of chart,
each case with no chart, a cut result, and the spec's fields as Vega-Lite reads them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from edge_sql.agent.result import EpisodeResult
from edge_sql.agent.stats import EpisodeStats
from edge_sql.charts import chart_for, choose_chart, column_kind
from edge_sql.charts.rules import MAX_BARS, MAX_MEASURES, MAX_SERIES

MONTHS = [[f"2024-{m:02d}", 100.0 * m] for m in range(1, 13)]
COUNTRIES = [["USA", 523.06], ["Canada", 303.96], ["France", 195.1], ["Brazil", 190.1]]


@pytest.mark.parametrize(
    ("name", "values", "kind"),
    [
        ("total", [1, 2.5, None], ("number", None)),
        ("CustomerId", [1, 2], ("category", None)),
        ("customer_id", [1, 2], ("category", None)),
        ("ID", [1, 2], ("category", None)),
        ("paid", [1, 2], ("number", None)),  # ends in "id", is no id
        ("year", [2009, 2010], ("year", None)),
        ("OrderYear", [2009, 2010], ("year", None)),
        ("year", [12, 2010], ("number", None)),  # not every value a year
        ("strftime('%Y', InvoiceDate)", ["2009", "2010"], ("year", None)),
        ("month", ["2024-01", "2024-02"], ("time", "month")),
        ("day", ["2024-01-31", None], ("time", "day")),
        ("mixed", ["2024-01", "2024-01-31"], ("time", "day")),
        ("at", ["2024-01-31 10:15:00", "2024-01-31T11:00Z"], ("time", "instant")),
        ("name", ["Rock", "2024-01"], ("category", None)),
        ("both", ["a", 1], ("category", None)),
        ("nothing", [None, None], ("empty", None)),
        ("data", [b"\x00\x01", None], ("blob", None)),
    ],
)
def test_column_kinds(name, values, kind):
    assert column_kind(name, values) == kind


def meta(spec: dict) -> dict:
    return spec["usermeta"]["edge_sql"]


def test_a_time_with_a_number_is_a_line_of_every_row():
    spec = chart_for(["month", "revenue"], MONTHS)
    assert meta(spec) == {"kind": "line", "rows": 12, "truncated": False, "rule": "a time with a number: a line"}
    assert spec["$schema"] == "https://vega.github.io/schema/vega-lite/v6.json"
    assert spec["mark"] == {"type": "line", "point": True}
    assert spec["encoding"]["x"] == {"field": "month", "title": "month", "type": "temporal", "timeUnit": "utcyearmonth"}
    assert spec["encoding"]["y"] == {"field": "revenue", "type": "quantitative", "title": "revenue"}
    assert spec["data"]["values"] == [{"month": m, "revenue": r} for m, r in MONTHS]
    assert spec["title"] == {"text": "revenue by month"}
    assert spec["description"] == "revenue by month (a time with a number: a line)."


def test_a_time_with_several_numbers_is_a_line_each():
    rows = [["2024-01-31", 3, 1.5], ["2024-02-29", 4, None]]
    spec = chart_for(["day", "orders", "refunds"], rows)
    assert meta(spec)["kind"] == "line" and meta(spec)["rule"] == "a time with numbers: a line"
    assert spec["encoding"]["x"]["timeUnit"] == "utcyearmonthdate"
    assert spec["encoding"]["color"]["field"] == "series" and spec["encoding"]["y"]["field"] == "value"
    assert spec["data"]["values"] == [
        {"day": "2024-01-31", "series": "orders", "value": 3},
        {"day": "2024-01-31", "series": "refunds", "value": 1.5},
        {"day": "2024-02-29", "series": "orders", "value": 4},
        {"day": "2024-02-29", "series": "refunds", "value": None},
    ]


def test_instants_are_read_as_utc():
    spec = chart_for(["at", "n"], [["2024-01-31 10:15:00", 1], ["2024-01-31T11:00:00+02:00", 2]])
    assert spec["encoding"]["x"]["scale"] == {"type": "utc"} and "timeUnit" not in spec["encoding"]["x"]
    assert [r["at"] for r in spec["data"]["values"]] == ["2024-01-31T10:15:00Z", "2024-01-31T11:00:00+02:00"]


def test_a_year_a_category_and_a_number_is_a_line_per_category():
    rows = [[y, c, y - 2000 + i] for y in range(2009, 2014) for i, c in enumerate(["USA", "Canada", "France"])]
    spec = chart_for(["year", "Country", "orders"], rows)
    assert meta(spec)["rule"] == "a time, a category and a number: a line per category"
    assert spec["encoding"]["x"] == {"field": "year", "title": "year", "type": "ordinal", "axis": {"labelAngle": 0}}
    assert spec["encoding"]["color"] == {"field": "Country", "type": "nominal", "title": "Country"}
    many = [[2009, f"c{i}", i] for i in range(MAX_SERIES + 1)] + [[2010, "c0", 1]]
    assert (
        choose_chart(["year", "c", "n"], many).reason
        == f"a time, a number and 11 categories: more than {MAX_SERIES} lines"
    )


def test_a_category_with_a_number_is_bars_largest_first():
    spec = chart_for(["Country", "Total"], COUNTRIES)
    assert meta(spec)["kind"] == "bar"
    assert spec["encoding"]["y"] == {"field": "Country", "title": "Country", "type": "nominal", "sort": "-x"}
    assert spec["encoding"]["x"] == {"field": "Total", "type": "quantitative", "title": "Total"}
    assert len(spec["data"]["values"]) == len(COUNTRIES)


def test_an_id_is_a_category():
    spec = chart_for(["CustomerId", "Total"], [[1, 39.62], [2, 37.62]])
    assert meta(spec)["kind"] == "bar" and spec["encoding"]["y"]["type"] == "nominal"


def test_a_category_with_several_numbers_is_grouped_bars_in_the_results_order():
    rows = [["Rock", 1297, 1286.03], ["Latin", 579, 572.21], ["Metal", 374, 369.26]]
    spec = chart_for(["Genre", "tracks", "price"], rows)
    assert meta(spec)["kind"] == "grouped_bar"
    assert spec["encoding"]["y"]["sort"] is None and spec["encoding"]["yOffset"]["field"] == "series"
    assert len(spec["data"]["values"]) == 2 * len(rows)
    assert spec["title"]["text"] == "tracks, price by Genre"


def test_two_numbers_are_points():
    rows = [[i * 1000, i * 3000 + 7] for i in range(1, 30)]
    spec = chart_for(["Milliseconds", "Bytes"], rows)
    assert meta(spec)["kind"] == "point" and spec["mark"] == {"type": "point", "filled": True}
    assert spec["encoding"]["x"]["field"] == "Milliseconds" and spec["encoding"]["y"]["field"] == "Bytes"
    assert spec["title"]["text"] == "Bytes against Milliseconds"


@pytest.mark.parametrize(
    ("columns", "rows", "reason"),
    [
        (["n"], [], "no rows"),
        (["Country", "Total"], [["USA", 523.06]], "one row: its values say it better than a chart"),
        (["COUNT(*)"], [[3503]], "one row: its values say it better than a chart"),
        (["Name", "Composer"], [["a", "b"], ["c", None]], "no numbers: text only"),
        (["name", "data"], [["a", b"\x00"], ["b", b"\x01"]], "a column holds binary data"),
        (["Total"], [[1.98], [3.96]], "one number with nothing to set it against"),
        (["a", "b", "c"], [[1, 2, 3], [4, 5, 6]], "numbers with no label"),
        (["first", "last", "n"], [["a", "b", 1], ["c", "d", 2]], "no rule for 0 times, 2 categories and 1 number"),
        (
            ["Country", "n"],
            [["USA", 1], ["USA", 2]],
            "the category 'Country' repeats: the rows are not one per category",
        ),
        (
            ["k", *[f"n{i}" for i in range(MAX_MEASURES + 1)]],
            [["a", *range(MAX_MEASURES + 1)], ["b", *range(MAX_MEASURES + 1)]],
            f"7 number columns: more than {MAX_MEASURES} make a table's work",
        ),
        (["k", "n"], [[f"c{i}", i] for i in range(MAX_BARS + 1)], f"101 categories: more than {MAX_BARS} bars"),
        (["n", "empty"], [[1, None], [2, None]], "one number with nothing to set it against"),
    ],
)
def test_no_chart(columns, rows, reason):
    choice = choose_chart(columns, rows)
    assert (choice.kind, choice.reason) == (None, reason)
    assert chart_for(columns, rows) is None


def test_a_cut_result_says_so():
    spec = chart_for(["month", "revenue"], MONTHS, truncated=True)
    cut = "The first 12 rows only: the query had more."
    assert spec["title"] == {"text": "revenue by month", "subtitle": cut}
    assert spec["description"].endswith(cut) and meta(spec)["truncated"] is True


def test_names_vega_lite_would_misread_are_escaped_and_repeats_numbered():
    spec = chart_for(["g.Name", "n[0]", "n[0]"], [["a", 1, 2], ["b", 3, 4]])
    assert spec["encoding"]["y"]["field"] == "g\\.Name" and spec["encoding"]["y"]["title"] == "g.Name"
    assert spec["data"]["values"][0] == {"g.Name": "a", "series": "n[0]", "value": 1}
    assert chart_for(["x", "x"], [[1, 2], [3, 4]])["data"]["values"][0] == {"x": 1, "x (2)": 2}
    # a column named "series" leaves the long form's own names free
    grouped = chart_for(["series", "a", "b"], [["s", 1, 2], ["t", 3, 4]])
    assert grouped["data"]["values"][0] == {"series": "s", "series_": "a", "value": 1}


def test_the_spec_is_json_and_the_result_carries_it(tmp_path: Path):
    """An EpisodeResult's `chart` (and its JSON's) is the rules' spec over all its rows."""
    db = tmp_path / "shop.sqlite"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE orders (day TEXT, country TEXT, total REAL)")
        connection.executemany(
            "INSERT INTO orders VALUES (?, ?, ?)",
            [(f"2024-{m:02d}-{d:02d}", c, m * d * 1.5) for m in range(1, 13) for d in (1, 15) for c in ("FR", "DE")],
        )
        rows = connection.execute(
            "SELECT strftime('%Y-%m', day) AS month, SUM(total) AS revenue FROM orders GROUP BY month"
        ).fetchall()

    def result(sql: str | None, truncated: bool = False) -> EpisodeResult:
        return EpisodeResult(
            question="revenue per month?",
            evidence=None,
            sql=sql,
            columns=["month", "revenue"],
            rows=[list(r) for r in rows],
            truncated=truncated,
            forced=False,
            fallback=False,
            answer=sql,
            rounds=[],
            stats=EpisodeStats(),
            transcript="",
            stop="submitted" if sql else "error",
        )

    answered = result("SELECT ...", truncated=True)
    assert answered.chart == chart_for(["month", "revenue"], rows, truncated=True)
    data = json.loads(json.dumps(answered.to_json()))
    assert data["chart"] == answered.chart and meta(data["chart"])["rows"] == 12
    assert result(None).chart is None and result(None).to_json()["chart"] is None  # no answer, no chart
