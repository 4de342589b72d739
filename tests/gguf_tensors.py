"""Tensor data of a GGUF file, for tests that compare the converter's output value by value.

The product reads GGUF headers only (`edge_sql.convert.gguf_file`); llama.cpp reads the data.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

from edge_sql.convert.gguf_file import FLOAT_DTYPES, GGUFFile, bf16_bits_to_f32


def tensor_bytes(gguf: GGUFFile, name: str) -> bytes:
    """The stored bytes of tensor `name`, whatever its type."""
    entry = gguf.tensors[name]
    with open(gguf.path, "rb") as f:
        f.seek(entry.offset)
        return f.read(entry.nbytes)


def tensor_values(gguf: GGUFFile, name: str) -> np.ndarray:
    """An F32/F16/BF16 tensor's values as float32, in its GGUF shape."""
    entry = gguf.tensors[name]
    raw = np.fromfile(
        gguf.path, dtype=FLOAT_DTYPES[entry.type], count=int(np.prod(entry.shape)), offset=entry.offset
    ).reshape(entry.shape)
    if entry.type == GGMLQuantizationType.BF16:
        return bf16_bits_to_f32(raw)
    return raw.astype(np.float32)
