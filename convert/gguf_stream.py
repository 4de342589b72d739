"""A streaming GGUF writer loop that knows nothing about any model.

The caller plans the file: metadata (a function that fills a `gguf.GGUFWriter`) and a list of
`PlannedTensor`s whose data arrive piece by piece from a generator. The loop writes the
header, metadata and tensor table first, then each tensor's pieces in order, into a temporary
file next to the target that is renamed into place only when everything was written. Any
failure removes the temporary file, so no partial GGUF is ever left behind.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from edge_sql.convert.atomic import atomic_output
from edge_sql.convert.gguf_file import FLOAT_DTYPES  # the dtype each piece must have (BF16 as uint16 bits)
from edge_sql.errors import ConversionError


@dataclass(frozen=True)
class PlannedTensor:
    """One tensor of the output: name, shape (rows first), storage type, and its data source."""

    name: str
    shape: tuple[int, ...]
    storage: gguf.GGMLQuantizationType
    pieces: Callable[[], Iterator[np.ndarray]]  # yields consecutive blocks of rows

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * FLOAT_DTYPES[self.storage].itemsize


def write_gguf(
    out: Path,
    arch: str,
    add_metadata: Callable[[gguf.GGUFWriter], None],
    tensors: list[PlannedTensor],
    *,
    show_progress: bool = True,
    description: str = "writing GGUF",
) -> None:
    """Write a GGUF file at `out` atomically (temporary file, then rename)."""
    with atomic_output(Path(out)) as tmp:
        writer = BulkArrayWriter(None, arch)
        try:
            _write(writer, tmp, add_metadata, tensors, show_progress, description)
        finally:
            writer.close()


def _write(
    writer: gguf.GGUFWriter,
    path: Path,
    add_metadata: Callable[[gguf.GGUFWriter], None],
    tensors: list[PlannedTensor],
    show_progress: bool,
    description: str,
) -> None:
    add_metadata(writer)
    for t in tensors:
        writer.add_tensor_info(t.name, t.shape, FLOAT_DTYPES[t.storage], t.nbytes, raw_dtype=t.storage)
    writer.open_output_file(path)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None and len(writer.fout) == 1
    fout = writer.fout[0]
    with _progress(sum(t.nbytes for t in tensors), show_progress, description) as bar:
        for t in tensors:
            writer.write_padding(fout, fout.tell())
            written = 0
            for piece in t.pieces():
                if piece.dtype != FLOAT_DTYPES[t.storage]:
                    raise TypeError(f"{t.name}: piece of dtype {piece.dtype} for {t.storage.name} storage")
                fout.write(np.ascontiguousarray(piece).data)
                written += piece.nbytes
                bar.update(piece.nbytes)
            if written != t.nbytes:
                raise ConversionError(f"{t.name}: wrote {written} bytes, expected {t.nbytes}")
            writer.write_padding(fout, written)


class _progress:
    """A tqdm byte counter on stderr, or nothing."""

    def __init__(self, total: int, enabled: bool, description: str):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=description)

    def __enter__(self) -> _progress:
        return self

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


_U64 = struct.Struct("<Q")


class BulkArrayWriter(gguf.GGUFWriter):
    """gguf's writer, packing metadata arrays of strings and of integers in bulk.

    A Qwen3.5 tokenizer is 248,320 token strings, as many token types and 247,587 merges, which
    gguf's writer packs one `struct.pack` per item: 1.2 s of a 3.1 s conversion of the test
    fixture, the same on the real 2B (2-core AMD EPYC). Packed in bulk, the bytes are the same
    (tests/test_convert_structure.py compares with gguf's own packing); anything else, and any
    array whose items are not all `str` or all `int`, is left to gguf.
    """

    def _pack_val(
        self, val: Any, vtype: gguf.GGUFValueType, add_vtype: bool, sub_type: gguf.GGUFValueType | None = None
    ) -> bytes:
        body = None
        if (
            vtype == gguf.GGUFValueType.ARRAY
            and isinstance(val, list)
            and val
            and self.endianess == gguf.GGUFEndian.LITTLE
        ):
            item_type = sub_type or gguf.GGUFValueType.get_type(val[0])
            body = _bulk_items(val, item_type)
        if body is None:
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        head = struct.pack("<I", vtype) if add_vtype else b""
        return head + struct.pack("<IQ", item_type, len(val)) + body


def _bulk_items(items: list, item_type: gguf.GGUFValueType) -> bytes | None:
    """The packed items of a string or INT32 array (each string: u64 length, UTF-8 bytes), or
    None where gguf's own packing should decide (other types, mixed items)."""
    if item_type == gguf.GGUFValueType.STRING and all(type(item) is str for item in items):
        encoded = [item.encode("utf-8") for item in items]
        return b"".join(chain.from_iterable(zip(map(_U64.pack, map(len, encoded)), encoded)))
    if item_type == gguf.GGUFValueType.INT32 and all(type(item) is int for item in items):
        return struct.pack(f"<{len(items)}i", *items)
    return None
