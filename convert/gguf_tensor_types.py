"""The storage type of every tensor in a GGUF, read from the header's tensor directory only.

`gguf.GGUFReader` parses every metadata array element into numpy views, which takes tens of
seconds on a file with Qwen3.5's 248k tokens and 500k merges; this skips the metadata and
reads only the tensor directory (well under a second). File validation itself is the
runtime's job (`edge_sql.runtime.gguf_check.validate_gguf`).
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from gguf import GGMLQuantizationType

_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def read_tensor_types(path: Path) -> dict[str, str]:
    """Tensor name -> storage type name (e.g. "Q8_0"), in file order."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
        pos = 24
        for _ in range(n_kv):
            pos = _skip_string(buf, pos)
            (vtype,) = struct.unpack_from("<I", buf, pos)
            pos = _skip_value(buf, pos + 4, vtype)
        types = {}
        for _ in range(n_tensors):
            (length,) = struct.unpack_from("<Q", buf, pos)
            name = bytes(buf[pos + 8:pos + 8 + length]).decode("utf-8")
            pos += 8 + length
            (n_dims,) = struct.unpack_from("<I", buf, pos)
            pos += 4 + 8 * n_dims
            (type_id,) = struct.unpack_from("<I", buf, pos)
            pos += 4 + 8  # type, then the data offset
            types[name] = GGMLQuantizationType(type_id).name
        return types


def _skip_string(buf: mmap.mmap, pos: int) -> int:
    (length,) = struct.unpack_from("<Q", buf, pos)
    return pos + 8 + length


def _skip_value(buf: mmap.mmap, pos: int, vtype: int) -> int:
    if vtype in _SCALAR_SIZES:
        return pos + _SCALAR_SIZES[vtype]
    if vtype == _STRING:
        return _skip_string(buf, pos)
    if vtype != _ARRAY:
        raise ValueError(f"unknown GGUF value type {vtype}")
    item_type, count = struct.unpack_from("<IQ", buf, pos)
    pos += 12
    if item_type in _SCALAR_SIZES:
        return pos + count * _SCALAR_SIZES[item_type]
    for _ in range(count):
        pos = _skip_value(buf, pos, item_type)
    return pos
