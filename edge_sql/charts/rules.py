"""Which chart suits a result, chosen by written rules from its columns' kinds (never by the
model), in the spirit of Tableau's "Show Me" and the Voyager/CompassQL recommenders: a time
with numbers is a line, a category with one number sorted bars, two numbers points, a category
with several numbers grouped bars; anything else, or one row, no chart. docs/charts.md is the
same table in words; each rule's reason is what the spec's description says."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from edge_sql.charts.columns import Column, read_columns

ChartKind = Literal["line", "bar", "grouped_bar", "point"]

MAX_MEASURES = 6  # numbers on one chart (lines or bars of a group); more is a table's job
MAX_SERIES = 10  # lines of a time chart split by a category (a colour each)
MAX_BARS = 100  # categories on a bar chart


@dataclass(frozen=True)
class ChartChoice:
    """A chart kind and its columns, or no chart (`kind` None); `reason` says which rule decided."""

    kind: ChartKind | None
    reason: str
    x: Column | None = None  # the time, year or category the marks stand on
    measures: tuple[Column, ...] = ()  # the numbers drawn
    split: Column | None = None  # a line per value of this category


def _none(reason: str) -> ChartChoice:
    return ChartChoice(None, reason)


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else words or word + 's'}"


def choose_chart(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> ChartChoice:
    """The chart the rules give for a result (all its rows), or none with the reason."""
    if not rows:
        return _none("no rows")
    if len(rows) == 1:
        return _none("one row: its values say it better than a chart")
    read = read_columns(columns, rows)
    if any(c.kind == "blob" for c in read):
        return _none("a column holds binary data")
    times = [c for c in read if c.kind in ("time", "year")]
    categories = [c for c in read if c.kind == "category"]
    numbers = [c for c in read if c.kind == "number"]
    if not numbers:
        return _none("no numbers: text only")
    if len(numbers) > MAX_MEASURES:
        return _none(f"{_plural(len(numbers), 'number column')}: more than {MAX_MEASURES} make a table's work")
    if len(times) == 1 and not categories:
        what = "a time with numbers" if len(numbers) > 1 else "a time with a number"
        return ChartChoice("line", f"{what}: a line", times[0], tuple(numbers))
    if len(times) == 1 and len(categories) == 1 and len(numbers) == 1:
        split = categories[0]
        count = len({row[split.index] for row in rows})
        if count > MAX_SERIES:
            return _none(f"a time, a number and {count} categories: more than {MAX_SERIES} lines")
        return ChartChoice(
            "line", "a time, a category and a number: a line per category", times[0], tuple(numbers), split
        )
    if not times and len(categories) == 1:
        label = categories[0]
        values = [row[label.index] for row in rows]
        if len(set(values)) < len(values):
            return _none(f"the category {label.name!r} repeats: the rows are not one per category")
        if len(values) > MAX_BARS:
            return _none(f"{len(values)} categories: more than {MAX_BARS} bars")
        if len(numbers) == 1:
            return ChartChoice("bar", "a category with a number: bars, largest first", label, tuple(numbers))
        return ChartChoice("grouped_bar", "a category with several numbers: grouped bars", label, tuple(numbers))
    if not times and not categories and len(numbers) == 2:
        return ChartChoice("point", "two numbers: points", numbers[0], (numbers[1],))
    if not times and not categories:
        return _none("one number with nothing to set it against" if len(numbers) == 1 else "numbers with no label")
    return _none(
        f"no rule for {_plural(len(times), 'time')}, {_plural(len(categories), 'category', 'categories')} "
        f"and {_plural(len(numbers), 'number')}"
    )
