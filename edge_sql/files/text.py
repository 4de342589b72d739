"""Opening a text data file: refuse binary files, and find the encoding (UTF-8, UTF-8 with a
byte-order mark, else Latin-1) by decoding the whole file once in large chunks, in C."""

from __future__ import annotations

import codecs
import os
from typing import BinaryIO

from edge_sql.errors import FileLoadError
from edge_sql.files.sources import Source

HEAD_BYTES = 64 * 1024
CHUNK_BYTES = 4 * 1024 * 1024
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def head(source: Source) -> bytes:
    """The file's first bytes; FileLoadError for an empty or binary file."""
    with open_binary(source) as raw:
        data = raw.read(HEAD_BYTES)
    if not data.strip():
        raise FileLoadError(f"{source.path} is empty", path=source.path)
    if data.startswith(_UTF16_BOMS):
        raise FileLoadError(
            f"{source.path} is UTF-16 text: save it as UTF-8 (or Latin-1) and load it again", path=source.path
        )
    if b"\x00" in data:
        raise FileLoadError(
            f"{source.path} is not a text file (it holds NUL bytes): is it really a {source.path.suffix} file?",
            path=source.path,
        )
    return data


def encoding(source: Source, first: bytes) -> str:
    """ "utf-8-sig" with a byte-order mark; "utf-8" when every byte decodes as UTF-8; else "latin-1"."""
    if first.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open_binary(source) as raw:
        try:
            while chunk := raw.read(CHUNK_BYTES):
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return "latin-1"
    return "utf-8"


def open_binary(source: Source) -> BinaryIO:
    """The file opened for reading, checked to still be a regular file once open."""
    try:
        raw = open(source.real, "rb", buffering=1024 * 1024)  # noqa: SIM115  (the caller closes it)
    except OSError as exc:
        raise FileLoadError(f"cannot read {source.path}: {exc.strerror}", path=source.path) from None
    import stat

    if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
        raw.close()
        raise FileLoadError(f"{source.path} is not a regular file", path=source.path)
    return raw


def position(raw: BinaryIO) -> int:
    """How far into the file reading has got (for progress), without disturbing the reader."""
    return os.lseek(raw.fileno(), 0, os.SEEK_CUR)
