"""A streaming GGUF writer loop that knows nothing about any model.

The caller plans the file: metadata (a function that fills a `gguf.GGUFWriter`) and a list of
`PlannedTensor`s whose data arrive piece by piece from a generator. The loop writes the
header, metadata and tensor table first, then each tensor's pieces in order, into a temporary
file next to the target that is renamed into place only when everything was written. Any
failure removes the temporary file, so no partial GGUF is ever left behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

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
        writer = gguf.GGUFWriter(None, arch)
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

    def __enter__(self) -> "_progress":
        return self

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
