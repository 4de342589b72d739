"""Validate a GGUF file before llama.cpp sees it: cheap header parse, no tensor data read.

llama.cpp aborts or crashes on some malformed files; everything it would trip over
(bad magic, a header cut short, tensor data shorter than the header claims, an architecture
we cannot run) is caught here and raised as a one-line `ModelFileError`.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from edge_sql.errors import ModelFileError

# The GGUF architectures edge-sql runs: `qwen35` is the model this project is built for;
# `llama` lets the small SmolLM2 model exercise the runtime with real weights.
SUPPORTED_ARCHITECTURES: frozenset[str] = frozenset({"qwen35", "llama"})

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types -> struct format of a scalar (STRING=8 and ARRAY=9 are special).
_SCALAR_FORMATS: dict[int, str] = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
    10: "<Q", 11: "<q", 12: "<d",
}
_STRING, _ARRAY = 8, 9
# Sanity bounds so random bytes cannot make the parser loop for minutes.
_MAX_COUNT = 1 << 24
_MAX_DIMS = 8


@dataclass(frozen=True)
class GGUFInfo:
    """What the header says about a GGUF file."""

    path: Path
    version: int
    architecture: str
    n_tensors: int
    file_size: int
    tensor_data_bytes: int
    metadata: dict[str, Any] = field(repr=False)  # scalar and string values only

    @property
    def name(self) -> str | None:
        value = self.metadata.get("general.name")
        return value if isinstance(value, str) else None

    @property
    def block_count(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.block_count")
        return int(value) if isinstance(value, int) else None

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) else None


class _Truncated(Exception):
    """The header ends before a field it needs."""


class _Corrupt(Exception):
    """A header field holds an impossible value."""


class _HeaderReader:
    """Sequential little-endian reader over a memory-mapped file."""

    def __init__(self, buffer: mmap.mmap | bytes) -> None:
        self.buf = buffer
        self.pos = 0
        self.size = len(buffer)

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise _Truncated()

    def unpack(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def count(self) -> int:
        value = self.unpack("<Q")
        if value > _MAX_COUNT:
            raise _Corrupt(f"implausible count {value}")
        return value

    def string(self) -> bytes:
        n = self.unpack("<Q")
        self.need(n)
        value = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(value)

    def skip_strings(self, n: int) -> None:
        unpack_from, buf, size, pos = struct.unpack_from, self.buf, self.size, self.pos
        for _ in range(n):
            if pos + 8 > size:
                raise _Truncated()
            (length,) = unpack_from("<Q", buf, pos)
            pos += 8 + length
        if pos > size:
            raise _Truncated()
        self.pos = pos

    def value(self, vtype: int) -> Any:
        """Read one metadata value; arrays are skipped and returned as None."""
        if vtype in _SCALAR_FORMATS:
            return self.unpack(_SCALAR_FORMATS[vtype])
        if vtype == _STRING:
            return self.string().decode("utf-8", errors="replace")
        if vtype == _ARRAY:
            item_type = self.unpack("<I")
            n = self.count()
            if item_type in _SCALAR_FORMATS:
                nbytes = n * struct.calcsize(_SCALAR_FORMATS[item_type])
                self.need(nbytes)
                self.pos += nbytes
            elif item_type == _STRING:
                self.skip_strings(n)
            elif item_type == _ARRAY:
                for _ in range(n):
                    self.value(_ARRAY)
            else:
                raise _Corrupt(f"unknown array item type {item_type}")
            return None
        raise _Corrupt(f"unknown metadata value type {vtype}")


def _tensor_nbytes(name: str, dims: list[int], type_id: int) -> int:
    try:
        qtype = GGMLQuantizationType(type_id)
    except ValueError:
        raise _Corrupt(f"tensor {name!r} has unknown type {type_id}") from None
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    n_elements = 1
    for d in dims:
        n_elements *= d
    if dims and dims[0] % block_size:
        raise _Corrupt(f"tensor {name!r} row of {dims[0]} is not a multiple of {block_size}")
    return n_elements // block_size * type_size


def _parse(path: Path, buf: mmap.mmap | bytes) -> GGUFInfo:
    reader = _HeaderReader(buf)
    reader.need(4)
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise ModelFileError(f"{path} is not a GGUF file (it does not start with 'GGUF')")
    reader.pos = 4
    version = reader.unpack("<I")
    if version not in SUPPORTED_VERSIONS:
        raise ModelFileError(f"{path} is GGUF version {version}; only versions 2 and 3 are supported")
    n_tensors = reader.count()
    n_kv = reader.count()
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = reader.string().decode("utf-8", errors="replace")
        vtype = reader.unpack("<I")
        value = reader.value(vtype)
        if value is not None:
            metadata[key] = value
    data_end = 0
    for _ in range(n_tensors):
        name = reader.string().decode("utf-8", errors="replace")
        n_dims = reader.unpack("<I")
        if n_dims > _MAX_DIMS:
            raise _Corrupt(f"tensor {name!r} has {n_dims} dimensions")
        dims = [reader.unpack("<Q") for _ in range(n_dims)]
        type_id = reader.unpack("<I")
        offset = reader.unpack("<Q")
        data_end = max(data_end, offset + _tensor_nbytes(name, dims, type_id))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise _Corrupt(f"bad general.alignment {alignment!r}")
    data_start = -(-reader.pos // alignment) * alignment
    if data_start + data_end > reader.size:
        missing = data_start + data_end - reader.size
        raise ModelFileError(
            f"{path} is truncated: its tensors need {data_start + data_end:,} bytes "
            f"but the file has {reader.size:,} ({missing:,} missing)"
        )
    architecture = metadata.get("general.architecture")
    if not isinstance(architecture, str):
        raise ModelFileError(f"{path} has no general.architecture key; it is not a model GGUF")
    return GGUFInfo(
        path=path,
        version=version,
        architecture=architecture,
        n_tensors=n_tensors,
        file_size=reader.size,
        tensor_data_bytes=data_end,
        metadata=metadata,
    )


def validate_gguf(path: str | Path) -> GGUFInfo:
    """Check that `path` is a complete GGUF of a supported architecture; raise ModelFileError if not.

    Reads only the header (metadata and tensor directory) through a memory map, so it takes
    well under a second on a multi-GB file.
    """
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelFileError(f"{path} is a directory, not a GGUF model file")
    try:
        with open(path, "rb") as handle:
            size = path.stat().st_size
            if size < 24:
                raise ModelFileError(f"{path} is not a GGUF file (only {size} bytes)")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                info = _parse(path, buf)
    except _Truncated:
        raise ModelFileError(f"{path} is truncated or corrupt: its GGUF header ends early") from None
    except _Corrupt as exc:
        raise ModelFileError(f"{path} is a corrupt GGUF file: {exc}") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    if info.architecture not in SUPPORTED_ARCHITECTURES:
        supported = ", ".join(sorted(SUPPORTED_ARCHITECTURES))
        raise ModelFileError(
            f"{path} is a '{info.architecture}' model; edge-sql runs only: {supported}"
        )
    return info
