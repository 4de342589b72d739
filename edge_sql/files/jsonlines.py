"""JSON Lines: one JSON object a line, read twice in batches.

The first pass collects the keys (in the order they first appear: the columns) and their
types from JSON's own: integers, reals (integers and reals mixed), text; true/false are 1/0;
anything mixed with text is text. A nested object or list is kept as JSON text (sqlite-utils'
choice; SQLite's json functions read it), and the load says which columns hold it. A key
missing from a line is NULL there.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from itertools import islice
from typing import BinaryIO

from sqlite_utils.db import jsonify_if_needed

from edge_sql.errors import FileLoadError
from edge_sql.files import text
from edge_sql.files.loader import BATCH_ROWS, Sink
from edge_sql.files.names import column_names
from edge_sql.files.sources import Source

_KIND = {bool: "integer", int: "integer", float: "real", str: "text", dict: "json", list: "json"}


def read(source: Source, sink: Sink) -> None:
    first = text.head(source)
    encoding = text.encoding(source, first)
    keys: dict[str, str] = {}  # key -> kind so far
    count = 0
    with text.open_binary(source) as raw:
        for batch in _batches(source, raw, encoding):
            count += len(batch)
            for record in batch:
                for key, value in record.items():
                    if value is not None:
                        keys[key] = _merged(keys.get(key), _KIND.get(type(value), "text"))
                    else:
                        keys.setdefault(key, None)  # type: ignore[arg-type]
            sink.report(source, "scan", count, text.position(raw))
    if count == 0:
        raise FileLoadError(f"{source.path} holds no JSON objects", path=source.path)
    if not keys:
        raise FileLoadError(f"{source.path} holds only empty JSON objects", path=source.path)
    order = list(keys)
    names, renames = column_names(order)
    kinds = [keys[k] or "text" for k in order]
    nested = [name for name, kind in zip(names, kinds) if kind == "json"]
    if nested:
        sink.note(f"{source.path.name}: nested objects or lists kept as JSON text in " + ", ".join(nested))
    table = sink.create(source, source.table, names, ["text" if k == "json" else k for k in kinds], renames)
    with text.open_binary(source) as raw:
        for batch in _batches(source, raw, encoding):
            sink.insert(table, ([_value(record.get(k)) for k in order] for record in batch))
            sink.report(source, "load", table.rows, text.position(raw))
    sink.report(source, "load", table.rows, source.size, final=True)


def _merged(old: str | None, new: str) -> str:
    if old is None or old == new:
        return new
    if {old, new} == {"integer", "real"}:
        return "real"
    return "text"  # text with anything, or JSON with scalars: each value as text (JSON for the nested)


def _value(value: object) -> object:
    if isinstance(value, bool):
        return int(value)
    return jsonify_if_needed(value)


def _batches(source: Source, raw: BinaryIO, encoding: str) -> Iterator[list[dict]]:
    lines = io.TextIOWrapper(raw, encoding=encoding, newline=None)
    number = 0
    while True:
        batch = []
        seen = 0
        for line in islice(lines, BATCH_ROWS):
            number += 1
            seen += 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FileLoadError(
                    f"{source.path} line {number} is not valid JSON: {exc.msg}", path=source.path
                ) from None
            if not isinstance(record, dict):
                raise FileLoadError(
                    f"{source.path} line {number} is not a JSON object (each line must be one object: one row)",
                    path=source.path,
                )
            batch.append(record)
        if batch:
            yield batch
        if seen < BATCH_ROWS:
            return
