"""Parquet through pyarrow (the `files` extra), one record batch at a time: the schema gives
the types (integers and booleans INTEGER, floats and decimals REAL, strings TEXT, binary BLOB,
dates, times and timestamps ISO-8601 TEXT, dictionary columns their values). A nested column
(struct, list, map) is kept as JSON text, which SQLite's json functions read, and the load
says which; that is the documented choice, not an error. Rows are read one row group at a time
without read-ahead (measured: iterating the whole file let pyarrow's peak memory grow with the
file, 160 -> 205 MB from 1 to 4 million rows; per row group it stays at 144-146 MB, about what
one decoded row group of this shape takes).
"""

from __future__ import annotations

import json
from typing import Any

from edge_sql.errors import FileLoadError
from edge_sql.files.extras import require
from edge_sql.files.loader import BATCH_ROWS, Sink
from edge_sql.files.names import column_names
from edge_sql.files.sources import Source

PARQUET_MAGIC = b"PAR1"


def read(source: Source, sink: Sink) -> None:
    pa = require("pyarrow", "Parquet files")
    pq = require("pyarrow.parquet", "Parquet files")
    _check_magic(source)
    try:
        parquet = pq.ParquetFile(str(source.real))
    except Exception as exc:
        raise FileLoadError(
            f"cannot read the Parquet file {source.path}: {_first_line(exc)}", path=source.path
        ) from None
    schema = parquet.schema_arrow
    plans = [_plan(pa, field.type) for field in schema]
    names, renames = column_names([field.name for field in schema])
    if not names:
        raise FileLoadError(f"{source.path} has no columns", path=source.path)
    if parquet.metadata.num_rows == 0:
        raise FileLoadError(f"{source.path} has no rows", path=source.path)
    nested = [name for name, (kind, how) in zip(names, plans) if how == "json"]
    if nested:
        sink.note(f"{source.path.name}: nested columns kept as JSON text: " + ", ".join(nested))
    table = sink.create(source, source.table, names, [kind for kind, _ in plans], renames)
    total = parquet.metadata.num_rows
    try:
        for group in range(parquet.num_row_groups):  # one row group at a time, no read-ahead: memory stays flat
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[group], use_threads=False):
                columns = [_values(pa, column, how) for column, (_, how) in zip(batch.columns, plans)]
                sink.insert(table, zip(*columns))
                sink.report(source, "load", table.rows, int(source.size * table.rows / total))
    except (OSError, ValueError) as exc:  # pyarrow.ArrowException subclasses these
        raise FileLoadError(
            f"cannot read the Parquet file {source.path}: {_first_line(exc)}", path=source.path
        ) from None
    sink.report(source, "load", table.rows, source.size, final=True)


def _check_magic(source: Source) -> None:
    with open(source.real, "rb") as raw:
        start = raw.read(4)
    if start != PARQUET_MAGIC:
        raise FileLoadError(f"{source.path} is not a Parquet file (it lacks the PAR1 header)", path=source.path)


def _plan(pa: Any, kind: Any) -> tuple[str, str]:  # Any: pyarrow
    """(SQLite type, how to convert): "as is", "string" (cast to text), "float", "json", "decode"."""
    types = pa.types
    if types.is_dictionary(kind):
        value_kind, how = _plan(pa, kind.value_type)
        return value_kind, "decode" if how == "as is" else how
    if types.is_boolean(kind) or types.is_integer(kind):
        return "integer", "as is"
    if types.is_floating(kind):
        return "real", "as is"
    if types.is_decimal(kind):
        return "real", "float"
    if types.is_string(kind) or types.is_large_string(kind):
        return "text", "as is"
    if types.is_binary(kind) or types.is_large_binary(kind) or types.is_fixed_size_binary(kind):
        return "blob", "as is"
    if types.is_temporal(kind) and not types.is_duration(kind):
        return "text", "string"
    if types.is_nested(kind):
        return "text", "json"
    return "text", "string"


def _values(pa: Any, column: Any, how: str) -> list[Any]:  # Any: pyarrow
    if how == "decode":
        column = column.dictionary_decode()
    elif how == "string":
        column = column.cast(pa.string())
    elif how == "float":
        column = column.cast(pa.float64())
    values = column.to_pylist()
    if how == "json":
        return [None if v is None else json.dumps(v, ensure_ascii=False, default=str) for v in values]
    return values


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
