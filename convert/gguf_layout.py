"""A fast look inside a GGUF: small metadata values and the tensor directory, no big arrays.

`gguf.GGUFReader` turns every metadata array element into a numpy view, which takes tens of
seconds on a file with Qwen3.5's 248k tokens and 500k merges. This reads the header once,
skipping arrays longer than `max_array` items, and maps tensor data only when asked for.
(Validation of files for the runtime is `edge_sql.runtime.gguf_check.validate_gguf`.)
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_FLOAT_DTYPES = {
    GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.BF16: np.uint16,  # bit patterns
}


@dataclass(frozen=True)
class TensorEntry:
    name: str
    type: GGMLQuantizationType
    shape: tuple[int, ...]  # rows first (numpy order), as the converter planned it
    offset: int  # absolute byte offset in the file

    @property
    def nbytes(self) -> int:
        block, size = GGML_QUANT_SIZES[self.type]
        return int(np.prod(self.shape)) // block * size


@dataclass(frozen=True)
class GGUFLayout:
    path: Path
    metadata: dict[str, Any]  # scalars, strings, and arrays of at most `max_array` items
    array_lengths: dict[str, int]  # every array key -> its length (also the skipped ones)
    tensors: dict[str, TensorEntry]

    def tensor_types(self) -> dict[str, str]:
        return {name: entry.type.name for name, entry in self.tensors.items()}

    def read_float(self, name: str) -> np.ndarray:
        """An F32/F16/BF16 tensor's values as float32."""
        entry = self.tensors[name]
        raw = np.fromfile(self.path, dtype=_FLOAT_DTYPES[entry.type], count=int(np.prod(entry.shape)),
                          offset=entry.offset).reshape(entry.shape)
        if entry.type == GGMLQuantizationType.BF16:
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float32)

    def read_raw(self, name: str) -> bytes:
        entry = self.tensors[name]
        with open(self.path, "rb") as f:
            f.seek(entry.offset)
            return f.read(entry.nbytes)


def read_layout(path: Path, *, max_array: int = 1024) -> GGUFLayout:
    path = Path(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
        reader = _Reader(buf, 24, max_array)
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = reader.string()
            value = reader.value(reader.unpack("<I"), key)
            if value is not _SKIPPED:
                metadata[key] = value
        entries = []
        for _ in range(n_tensors):
            name = reader.string()
            n_dims = reader.unpack("<I")
            dims = [reader.unpack("<Q") for _ in range(n_dims)]
            type_id = reader.unpack("<I")
            offset = reader.unpack("<Q")
            entries.append((name, GGMLQuantizationType(type_id), tuple(reversed(dims)), offset))
        alignment = int(metadata.get("general.alignment", 32))
        data_start = -(-reader.pos // alignment) * alignment
    tensors = {name: TensorEntry(name, t, shape, data_start + off) for name, t, shape, off in entries}
    return GGUFLayout(path, metadata, reader.array_lengths, tensors)


_SKIPPED = object()


class _Reader:
    def __init__(self, buf: mmap.mmap, pos: int, max_array: int):
        self.buf, self.pos, self.max_array = buf, pos, max_array
        self.array_lengths: dict[str, int] = {}

    def unpack(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.unpack("<Q")
        text = bytes(self.buf[self.pos:self.pos + length]).decode("utf-8", errors="replace")
        self.pos += length
        return text

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype != _ARRAY:
            raise ValueError(f"unknown GGUF value type {vtype} for {key}")
        item_type = self.unpack("<I")
        count = self.unpack("<Q")
        self.array_lengths[key] = count
        if count <= self.max_array:
            return [self.value(item_type, key) for _ in range(count)]
        if item_type in _SCALARS:
            self.pos += count * struct.calcsize(_SCALARS[item_type])
        else:
            for _ in range(count):
                self.value(item_type, key)
        return _SKIPPED
