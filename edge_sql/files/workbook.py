"""Excel workbooks (.xlsx, .xlsm) through python-calamine (the `files` extra): each sheet with
rows a table, named after the sheet (in a folder: `<file>_<sheet>`, or the file's name for a
one-sheet workbook).

Checked before calamine reads a byte of it: a password-protected workbook (an OLE container
holding an `EncryptedPackage`, not a zip), a file that is no zip at all, and a zip whose
declared uncompressed size is too large or too many times its own size (a zip bomb renamed
`.xlsx`). Cell types come from the workbook: numbers that are all whole are integers, other
numbers reals, dates and times ISO-8601 text, a column mixing text with anything is text.
"""

from __future__ import annotations

import datetime as dt
import zipfile
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from edge_sql.errors import FileLoadError
from edge_sql.files.extras import require
from edge_sql.files.loader import BATCH_ROWS, Sink
from edge_sql.files.names import column_names, table_name
from edge_sql.files.sources import Source

ZIP_MAGIC = b"PK\x03\x04"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")
MAX_UNCOMPRESSED_BYTES = 4 * 1024**3  # what the zip may declare in all
MAX_RATIO = 200  # declared size over the file's size, above MIN_RATIO_BYTES
MIN_RATIO_BYTES = 256 * 1024**2


def read(source: Source, sink: Sink) -> None:
    check_container(source)
    calamine = require("python_calamine", "Excel workbooks (.xlsx)")
    try:
        workbook = calamine.CalamineWorkbook.from_path(str(source.real))
    except Exception as exc:
        raise FileLoadError(f"cannot read the workbook {source.path}: {_first_line(exc)}", path=source.path) from None
    loaded = 0
    sheets = list(workbook.sheet_names)
    for sheet_name in sheets:
        try:
            sheet = workbook.get_sheet_by_name(sheet_name)
        except Exception as exc:
            raise FileLoadError(
                f"cannot read sheet {sheet_name!r} of {source.path}: {_first_line(exc)}", path=source.path
            ) from None
        name = table_name(
            source.table
            if source.in_folder and len(sheets) == 1
            else f"{source.table}_{sheet_name}"
            if source.in_folder
            else sheet_name
        )
        if _load_sheet(source, sink, sheet, name):
            loaded += 1
        else:
            sink.note(f"{source.path.name}: sheet {sheet_name!r} has no rows under its header; left out")
    if loaded == 0:
        raise FileLoadError(f"{source.path} has no sheet with rows", path=source.path)


def check_container(source: Source) -> None:
    """Refuse an encrypted, non-zip or zip-bomb workbook without decompressing anything."""
    with open(source.real, "rb") as raw:
        magic = raw.read(8)
        if magic.startswith(OLE_MAGIC):
            if _holds(raw, ENCRYPTED_STREAM):
                raise FileLoadError(
                    f"{source.path} is password-protected (encrypted): save a copy without a password and load that",
                    path=source.path,
                )
            raise FileLoadError(
                f"{source.path} is an old binary Excel file (.xls), not .xlsx: save it as .xlsx", path=source.path
            )
    if not magic.startswith(ZIP_MAGIC):
        raise FileLoadError(
            f"{source.path} is not an Excel workbook (an .xlsx file is a zip archive; this one is not)",
            path=source.path,
        )
    try:
        with zipfile.ZipFile(source.real) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise FileLoadError(f"{source.path} is a corrupt workbook ({exc})", path=source.path) from None
    if declared > MAX_UNCOMPRESSED_BYTES or (declared > MIN_RATIO_BYTES and declared > MAX_RATIO * source.size):
        raise FileLoadError(
            f"{source.path} would unpack to {declared / 1e6:,.0f} MB from {source.size / 1e6:,.1f} "
            "MB (a zip bomb?): refused",
            path=source.path,
        )


def _holds(raw: Any, needle: bytes) -> bool:  # Any: calamine
    tail = b""
    while chunk := raw.read(1024 * 1024):
        if needle in tail + chunk:
            return True
        tail = chunk[-len(needle) :]
    return False


def _load_sheet(source: Source, sink: Sink, sheet: Any, name: str) -> bool:  # Any: calamine
    rows = _nonempty(sheet.iter_rows())
    header = next(rows, None)
    if header is None:
        return False
    kinds: list[set[str]] = [set() for _ in header]
    count = 0
    for row in rows:
        count += 1
        for i, value in enumerate(row[: len(header)]):
            if value != "" and value is not None:
                kinds[i].add(_kind(value))
    if count == 0:
        return False
    keep = [i for i, cell in enumerate(header) if cell not in ("", None) or kinds[i]]
    names, renames = column_names([header[i] for i in keep])
    types = [_type(kinds[i]) for i in keep]
    table = sink.create(source, name, names, types, renames)
    converters = [_CONVERT[t] for t in types]
    rows = _nonempty(sheet.iter_rows())
    next(rows)
    while batch := list(islice(rows, BATCH_ROWS)):
        sink.insert(
            table,
            (
                [None if row[i] == "" or row[i] is None else convert(row[i]) for i, convert in zip(keep, converters)]
                for row in batch
            ),
        )
        sink.report(source, "load", table.rows, 0)
    return True


def _nonempty(rows: Iterator[list[Any]]) -> Iterator[list[Any]]:  # Any: calamine
    return (row for row in rows if any(value != "" and value is not None for value in row))


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "integer"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() and abs(value) < 2**63 else "real"
    return "text"


def _type(kinds: set[str]) -> str:
    if not kinds or "text" in kinds:
        return "text"
    return "real" if "real" in kinds else "integer"


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return str(value)


_CONVERT: dict[str, Callable[[Any], object]] = {"integer": int, "real": float, "text": _text}  # Any: calamine


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
