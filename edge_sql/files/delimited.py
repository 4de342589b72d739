"""CSV and TSV: the standard library's `csv` parser, in batches.

Each column's type is integer, real, else text (the rules of sqlite-utils' `--detect-types`,
over every row, checked a batch of a column at a time with one regular expression so the check
runs in C). One pass finds the types and inserts at once, into a table typed from the first
batch; SQLite's column affinity stores the numeric text as numbers. If a later row widens a
type (text far down a numeric column) the table is dropped and the file read again with the
types of the whole file, so a sample never decides a type. An empty field is NULL. Dates stay as written (ISO-8601
text is what SQLite's date functions read). Ragged rows are kept: a short row's missing
fields are NULL, a long row's extra fields go to extra columns `column_N`, and the load says
how many rows were either. Quotes that never close are an error with the line number.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from operator import itemgetter
from typing import BinaryIO

from edge_sql.errors import FileLoadError
from edge_sql.files import text
from edge_sql.files.loader import BATCH_ROWS, Sink, TableInfo
from edge_sql.files.names import Rename, column_names
from edge_sql.files.sources import Source

DELIMITERS = ",;\t|"
SNIFF_BYTES = 16 * 1024
INTEGER = re.compile(r"[+-]?[0-9]{1,18}")  # longer would not fit SQLite's 64-bit integers
REAL = re.compile(r"[+-]?(?:(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|[0-9]{1,18})")
INTEGER_LINES = re.compile(f"(?:{INTEGER.pattern})?(?:\n(?:{INTEGER.pattern})?)*")  # empty lines: NULLs
REAL_LINES = re.compile(f"(?:{REAL.pattern})?(?:\n(?:{REAL.pattern})?)*")
_CSV_ERRORS = {
    "unexpected end of data": "a quoted field is never closed (unbalanced quotes)",
    "expected after": "text follows a closing quote (unbalanced quotes)",
    "field larger than field limit": "a field over {limit:,} characters (a quote that is never closed?)",
    "new-line character seen in unquoted field": "a bare carriage return inside a field",
}


@dataclass
class Shape:
    """What the first pass found: the header, each column's type, and the ragged rows."""

    header: list[str]
    types: list[str]
    rows: int = 0
    short_rows: int = 0
    long_rows: int = 0


def read(source: Source, sink: Sink) -> None:
    start = text.head(source)
    encoding = text.encoding(source, start)
    if encoding == "latin-1":
        sink.note(f"{source.path.name}: not UTF-8; read as Latin-1")
    delimiter = "\t" if source.format == "tsv" else sniff(start.decode(encoding, "ignore"))
    shape, table = _load_guessing(source, encoding, delimiter, sink)
    names, renames = _names(shape)
    if table is None:  # a later row changed a type or the width: load again, typed by the whole file
        table = sink.create(source, source.table, names, shape.types)
        width = len(shape.types)
        with _rows(source, encoding, delimiter) as (raw, batches):
            first = True
            for batch in batches:
                if first:
                    batch, first = batch[1:], False  # the header
                if shape.short_rows or shape.long_rows:
                    batch = [row if len(row) == width else row + [""] * (width - len(row)) for row in batch]
                sink.insert(table, batch, nullify_empty=True)
                sink.report(source, "load", table.rows, text.position(raw))
    sink.renamed(source, table, renames)
    if shape.short_rows or shape.long_rows:
        sink.note(_ragged_note(source, shape, names))
    sink.report(source, "load", table.rows, source.size, final=True)


def _load_guessing(source: Source, encoding: str, delimiter: str, sink: Sink) -> tuple[Shape, TableInfo | None]:
    """One pass that finds the file's shape and types and, at the same time, inserts every row
    into a table typed from the first batch. When a later batch widens a type (or the rows),
    inserting stops, the table is dropped and None comes back with the whole file's shape; the
    caller loads it again (the usual file costs one parse, an irregular one two)."""
    with _rows(source, encoding, delimiter) as (raw, batches):
        first = next(batches, None)
        if first is None:
            raise FileLoadError(f"{source.path} is empty", path=source.path)
        shape = Shape(first[0], ["integer"] * len(first[0]))
        filled = [False] * len(first[0])
        table: TableInfo | None = None
        declared: list[str] | None = None
        for batch in _after_header(first, batches):
            if not batch:
                continue
            batch = _observe(shape, filled, batch)
            types = _types(shape, filled)
            if declared is None:
                declared = types
                table = sink.create(source, source.table, _names(shape)[0], declared)
            if table is not None and types != declared:
                sink.drop(table)
                table = None
            if table is not None:
                sink.insert(table, batch, nullify_empty=True)
            sink.report(source, "load" if table is not None else "scan", shape.rows, text.position(raw))
    if shape.rows == 0:
        raise FileLoadError(f"{source.path} has a header line but no rows", path=source.path)
    shape.types = _types(shape, filled)
    return shape, table


def _after_header(first: list[list[str]], batches: Iterator[list[list[str]]]) -> Iterator[list[list[str]]]:
    """The batches without the header line, holding no batch longer than its turn (memory)."""
    rows = first[1:]
    first.clear()
    yield rows
    rows = []
    yield from batches


def _observe(shape: Shape, filled: list[bool], batch: list[list[str]]) -> list[list[str]]:
    """Count the batch into `shape`, narrowing each column's type; returns the batch with its
    rows as wide as the widest so far."""
    shape.rows += len(batch)
    if set(map(len, batch)) != {len(shape.types)}:
        batch = _pad(batch, shape, filled)
    for i, kind in enumerate(shape.types):
        if kind != "text":
            values = list(map(itemgetter(i), batch))  # in C: no Python-level loop over the rows
            filled[i] = filled[i] or any(values)
            shape.types[i] = _narrowed(kind, values)
    return batch


def _types(shape: Shape, filled: list[bool]) -> list[str]:
    """The column types so far: a column with no value yet is text."""
    return [kind if full else "text" for kind, full in zip(shape.types, filled)]


def _names(shape: Shape) -> tuple[list[str], list[Rename]]:
    width = len(shape.types)
    return column_names(shape.header + [f"column_{i}" for i in range(len(shape.header) + 1, width + 1)])


def sniff(sample: str) -> str:
    """The delimiter of a CSV file (comma, semicolon, tab or bar), from its first lines."""
    sample = sample[:SNIFF_BYTES]
    if "\n" in sample:
        sample = sample[: sample.rindex("\n")]  # whole lines only
    try:
        return csv.Sniffer().sniff(sample, delimiters=DELIMITERS).delimiter
    except csv.Error:
        return ","


def _pad(batch: list[list[str]], shape: Shape, filled: list[bool]) -> list[list[str]]:
    """The batch with every row as wide as the widest so far; counts the ragged rows."""
    header = len(shape.header)
    shape.short_rows += sum(1 for row in batch if len(row) < header)
    shape.long_rows += sum(1 for row in batch if len(row) > header)
    width = max(len(shape.types), *map(len, batch))
    if width > len(shape.types):
        filled += [False] * (width - len(shape.types))
        shape.types += ["integer"] * (width - len(shape.types))
    return [row if len(row) == width else row + [""] * (width - len(row)) for row in batch]


def _narrowed(kind: str, values: list[str]) -> str:
    """The widest type `values` need, from `kind` on: each pattern runs once over the whole
    batch joined by newlines (one C call), or value by value where a value holds a newline."""
    joined = "\n".join(values)
    whole = joined.count("\n") == len(values) - 1
    if kind == "integer" and (INTEGER_LINES.fullmatch(joined) if whole else _each(INTEGER, values)):
        return "integer"
    if kind in ("integer", "real") and (REAL_LINES.fullmatch(joined) if whole else _each(REAL, values)):
        return "real"
    return "text"


def _each(pattern: re.Pattern[str], values: list[str]) -> bool:
    return all(map(pattern.fullmatch, filter(None, values)))


def _ragged_note(source: Source, shape: Shape, names: list[str]) -> str:
    parts = []
    if shape.short_rows:
        parts.append(f"{_rows_text(shape.short_rows)} fewer fields than the header (the missing ones are NULL)")
    if shape.long_rows:
        extra = ", ".join(names[len(shape.header) :])
        parts.append(f"{_rows_text(shape.long_rows)} more (the extra fields are in {extra})")
    return f"{source.path.name}: " + "; ".join(parts)


def _rows_text(count: int) -> str:
    return "1 row has" if count == 1 else f"{count:,} rows have"


class _rows:  # a context manager, named like open
    """The file's rows as lists of strings, blank lines left out, in batches of `BATCH_ROWS`;
    a csv error becomes one line naming the line where the parser stopped."""

    def __init__(self, source: Source, encoding: str, delimiter: str) -> None:
        self.source, self.encoding, self.delimiter = source, encoding, delimiter

    def __enter__(self) -> tuple[BinaryIO, Iterator[list[list[str]]]]:
        self.raw = text.open_binary(self.source)
        stream = io.TextIOWrapper(self.raw, encoding=self.encoding, newline="")
        self.reader = csv.reader(stream, delimiter=self.delimiter, quotechar='"', doublequote=True, strict=True)
        return self.raw, self._batches()

    def _batches(self) -> Iterator[list[list[str]]]:
        rows = filter(None, self.reader)
        while True:
            try:
                batch = list(islice(rows, BATCH_ROWS))
            except csv.Error as exc:
                raise FileLoadError(
                    f"{self.source.path} line {self.reader.line_num}: {_csv_message(exc)}", path=self.source.path
                ) from None
            if not batch:
                return
            yield batch

    def __exit__(self, *exc: object) -> None:
        self.raw.close()


def _csv_message(exc: csv.Error) -> str:
    message = str(exc)
    for key, text_ in _CSV_ERRORS.items():
        if key in message:
            return text_.format(limit=csv.field_size_limit())
    return message
