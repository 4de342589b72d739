"""Charts written as files: each kind of spec rendered by vl-convert (the `charts` extra) to an
SVG whose marks carry the result's values and a PNG of the expected size; `edge-sql run --chart`
in a real process, from a verified answer on a real database."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from edge_sql.charts import chart_for
from edge_sql.charts.render import PNG_SCALE, render_chart
from edge_sql.errors import ChartFileError

COUNTRIES = [["Brazil", 190.1], ["USA", 523.06], ["France", 195.1], ["Canada", 303.96]]


def marks(svg: Path, role: str) -> list[ET.Element]:
    """The SVG's marks of one kind (`bar`, `point`, `line mark`), in drawing order."""
    return [e for e in ET.parse(svg).iter() if e.get("aria-roledescription") == role]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_bars_are_drawn_largest_first(tmp_path):
    spec = chart_for(["Country", "Total"], COUNTRIES)
    render_chart(spec, tmp_path / "bars.svg")
    bars = marks(tmp_path / "bars.svg", "bar")
    tops = [float(re.match(r"M[\d.]+,([\d.]+)", bar.get("d", "")).group(1)) for bar in bars]
    labels = [bar.get("aria-label") for _, bar in sorted(zip(tops, bars, strict=True), key=lambda t: t[0])]
    assert labels == [
        "Total: 523.06; Country: USA",
        "Total: 303.96; Country: Canada",
        "Total: 195.1; Country: France",
        "Total: 190.1; Country: Brazil",
    ]
    assert "Total by Country" in (tmp_path / "bars.svg").read_text()


def test_each_kind_renders_with_every_row(tmp_path):
    months = [[f"2024-{m:02d}", 10.0 * m] for m in range(1, 13)]
    line = chart_for(["month", "revenue"], months, truncated=True)
    render_chart(line, tmp_path / "line.svg")
    text = (tmp_path / "line.svg").read_text()
    assert "revenue by month" in text and "The first 12 rows only: the query had more." in text
    assert len(marks(tmp_path / "line.svg", "line mark")) == 1  # the line itself, one path
    assert len(marks(tmp_path / "line.svg", "point")) == 12  # a point on each month
    assert "Dec 2024" in text or "Nov 2024" in text  # a time axis, not twelve labels of text

    genres = [["Rock", 1297, 1286.03], ["Latin", 579, 572.21], ["Metal", 374, 369.26]]
    render_chart(chart_for(["Genre", "tracks", "price"], genres), tmp_path / "grouped.svg")
    assert len(marks(tmp_path / "grouped.svg", "bar")) == 6

    scatter = [[i * 1000, i * 3000 + 7] for i in range(1, 30)]
    render_chart(chart_for(["Milliseconds", "Bytes"], scatter), tmp_path / "points.svg")
    assert len(marks(tmp_path / "points.svg", "point")) == 29

    render_chart(chart_for(["Country", "Total"], COUNTRIES), tmp_path / "bars.png")
    width, height = png_size(tmp_path / "bars.png")
    assert width > 480 * PNG_SCALE and 4 * 20 * PNG_SCALE < height < 400 * PNG_SCALE  # four 20-pixel bands


def test_a_file_that_is_neither_svg_nor_png_is_refused(tmp_path):
    with pytest.raises(ChartFileError, match=r"must end in \.svg or \.png"):
        render_chart(chart_for(["Country", "Total"], COUNTRIES), tmp_path / "chart.pdf")
    assert list(tmp_path.iterdir()) == []


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from edge_sql.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "EDGE_SQL_HOME": str(home)},
        timeout=120,
    )


def test_run_writes_the_answers_chart(chinook_db, tmp_path):
    """A verified answer (no model loads) charted by `run --chart`, as SVG and PNG, with the
    same spec in --json; a one-row answer writes nothing and says why."""
    home, db = tmp_path / "home", str(chinook_db)
    sql = "SELECT BillingCountry, COUNT(*) AS orders FROM Invoice GROUP BY BillingCountry"
    assert _cli(home, "notes", "verify", "--db", db, "Orders per country?", sql).returncode == 0
    assert _cli(home, "notes", "verify", "--db", db, "How many albums?", "SELECT COUNT(*) FROM Album").returncode == 0
    missing = str(tmp_path / "no-model.gguf")  # loading a model would fail

    svg = tmp_path / "orders.svg"
    done = _cli(
        home, "run", "--db", db, "--model", missing, "--question", "Orders per country?", "--json", "--chart", str(svg)
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["chart"]["usermeta"]["edge_sql"] == {
        "kind": "bar",
        "rows": 24,
        "truncated": False,
        "rule": "a category with a number: bars, largest first",
    }
    assert done.stderr.strip().endswith(
        f"chart written to {svg}: a category with a number: bars, largest first (24 rows)"
    )
    bars = marks(svg, "bar")
    assert len(bars) == 24 and "orders: 91; BillingCountry: USA" in {b.get("aria-label") for b in bars}

    png = tmp_path / "orders.png"
    done = _cli(home, "run", "--db", db, "--model", missing, "--question", "Orders per country?", "--chart", str(png))
    assert done.returncode == 0, done.stderr
    assert png_size(png)[0] > 480

    one = tmp_path / "albums.svg"
    done = _cli(home, "run", "--db", db, "--model", missing, "--question", "How many albums?", "--chart", str(one))
    assert done.returncode == 0 and not one.exists()
    assert f"no chart written to {one}: one row: its values say it better than a chart" in done.stderr


def test_run_refuses_a_bad_chart_file_before_any_work(chinook_db, tmp_path):
    home, db = tmp_path / "home", str(chinook_db)
    done = _cli(home, "run", "--db", db, "--question", "Orders per country?", "--chart", str(tmp_path / "c.pdf"))
    assert done.returncode == 1 and "must end in .svg or .png" in done.stderr and "loading" not in done.stderr
    done = _cli(home, "run", "--db", db, "--chart", str(tmp_path / "c.svg"))
    assert done.returncode == 2 and "--chart needs --question" in done.stderr
