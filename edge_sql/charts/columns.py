"""What each column of a result holds, read from its values (never from the model): a number, a
time, a year, a category, a blob, or nothing. The chart rules (rules.py) decide from these kinds;
docs/charts.md writes both down."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ColumnKind = Literal["number", "time", "year", "category", "blob", "empty"]
TimeGrain = Literal["month", "day", "instant"]

# SQLite keeps dates as text; these are the ISO 8601 forms its date functions write
_MONTH = re.compile(r"\d{4}-\d{2}")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?")
_YEAR_TEXT = re.compile(r"\d{4}")  # strftime('%Y', ...)
_ID_NAME = re.compile(r"(^|_)(id|ID|Id)$|[a-z0-9](Id|ID)$")  # id, customer_id, CustomerId; not "paid"
_YEAR_NAME = re.compile(r"(^|_)([Yy]ear|YEAR)$|[a-z0-9]Year$")  # year, order_year, OrderYear
_GRAINS: tuple[TimeGrain, ...] = ("instant", "day", "month")  # finest first


@dataclass(frozen=True)
class Column:
    """One column of a result: its position, name and kind (`grain`: for a time, how fine)."""

    index: int
    name: str
    kind: ColumnKind
    grain: TimeGrain | None = None


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def column_kind(name: str, values: Sequence[object]) -> tuple[ColumnKind, TimeGrain | None]:
    """The kind of a column from all its values (NULLs ignored) and, for numbers, its name:
    an id (`id`, `CustomerId`, `customer_id`) is a category, a whole number from 1000 to 9999
    in a column named for a year (`year`, `order_year`) is a year."""
    present = [v for v in values if v is not None]
    if not present:
        return "empty", None
    if any(isinstance(v, (bytes, bytearray, memoryview)) for v in present):
        return "blob", None
    if all(is_number(v) for v in present):
        if _ID_NAME.search(name):
            return "category", None
        if _YEAR_NAME.search(name) and all(isinstance(v, int) and 1000 <= v <= 9999 for v in present):
            return "year", None
        return "number", None
    texts = [v for v in present if isinstance(v, str)]
    if len(texts) == len(present):
        if all(_YEAR_TEXT.fullmatch(v) for v in texts):
            return "year", None
        grain = _time_grain(texts)
        if grain is not None:
            return "time", grain
    return "category", None


def _time_grain(texts: Sequence[str]) -> TimeGrain | None:
    """The finest ISO form every text has (a month, a day, an instant), None if one is no date."""
    grains: set[TimeGrain] = set()
    for text in texts:
        if _MONTH.fullmatch(text):
            grains.add("month")
        elif _DAY.fullmatch(text):
            grains.add("day")
        elif _INSTANT.fullmatch(text):
            grains.add("instant")
        else:
            return None
    return next(grain for grain in _GRAINS if grain in grains)


def read_columns(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[Column]:
    """Every column of the result with its kind, from all the rows."""
    found = []
    for index, name in enumerate(columns):
        kind, grain = column_kind(name, [row[index] for row in rows])
        found.append(Column(index, name, kind, grain))
    return found
