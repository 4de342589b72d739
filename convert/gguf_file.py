"""The one GGUF reader: header, metadata and tensor directory, read through a memory map.

`gguf.GGUFReader` turns every metadata array element into a numpy view, which takes tens of
seconds on a file with Qwen3.5's 248k tokens and 500k merges. `read_gguf` reads the header
once, keeps arrays of at most `max_array` items (longer ones are skipped, their lengths kept),
and maps tensor data only when asked for. It checks what llama.cpp would trip over (bad magic,
a header cut short, impossible counts, tensor data shorter than the header claims) and raises
a one-line `ModelFileError`. Value types are `gguf.GGUFValueType`, storage types
`gguf.GGMLQuantizationType`, file types `gguf.LlamaFileType`.

`validate_gguf` adds what a model file must also be to be run or quantized here: a model of
an architecture edge-sql runs. Used by the converter's tests and benchmarks, the quantizer,
the runtime (`Session` validates every file before llama.cpp loads it) and the store.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, LlamaFileType

from edge_sql.errors import ModelFileError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

_SCALAR_FORMATS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
# The GGUF architectures edge-sql runs: `qwen35` is the model this project is built for;
# `llama` lets the small SmolLM2 model exercise the runtime with real weights.
SUPPORTED_ARCHITECTURES: frozenset[str] = frozenset({"qwen35", "llama"})

# Sanity bounds so random bytes cannot make the parser loop for minutes.
_MAX_COUNT = 1 << 24
_MAX_DIMS = 8

# float storage type -> the numpy dtype of its values on disk (BF16 as uint16 bit patterns)
FLOAT_DTYPES: dict[GGMLQuantizationType, np.dtype] = {
    GGMLQuantizationType.F32: np.dtype(np.float32),
    GGMLQuantizationType.F16: np.dtype(np.float16),
    GGMLQuantizationType.BF16: np.dtype(np.uint16),
}
# file types llama.cpp quantizes from (it does not requantize by default)
UNQUANTIZED_FILE_TYPES = frozenset({LlamaFileType.ALL_F32, LlamaFileType.MOSTLY_F16, LlamaFileType.MOSTLY_BF16})


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32 values."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16, as uint16 bit patterns (NaN stays NaN)."""
    u = x.view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    bits = rounded.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        bits[nan] = 0x7FC0
    return bits


@dataclass(frozen=True)
class TensorEntry:
    name: str
    type: GGMLQuantizationType
    shape: tuple[int, ...]  # rows first (numpy order)
    offset: int  # absolute byte offset in the file

    @property
    def nbytes(self) -> int:
        return _nbytes(self.name, self.shape[::-1], self.type)


@dataclass(frozen=True)
class GGUFFile:
    """What a GGUF file's header says, and its tensors on demand."""

    path: Path
    version: int
    file_size: int
    metadata: dict[str, Any] = field(repr=False)  # scalars, strings, arrays of at most `max_array` items
    array_lengths: dict[str, int] = field(repr=False)  # every array key -> its length (also skipped ones)
    tensors: dict[str, TensorEntry] = field(repr=False)
    tensor_data_bytes: int = 0  # from the start of the data section to the end of the last tensor

    @property
    def n_tensors(self) -> int:
        return len(self.tensors)

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    @property
    def name(self) -> str | None:
        value = self.metadata.get("general.name")
        return value if isinstance(value, str) else None

    @property
    def file_type(self) -> LlamaFileType | None:
        """`general.file_type` (None when absent or not a known type)."""
        value = self.metadata.get("general.file_type")
        try:
            return LlamaFileType(value) if isinstance(value, int) else None
        except ValueError:
            return None

    @property
    def block_count(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.block_count")
        return int(value) if isinstance(value, int) else None

    @property
    def mtp_layers(self) -> int:
        """Multi-token-prediction layers the file carries (`{arch}.nextn_predict_layers`; 0 if none)."""
        value = self.metadata.get(f"{self.architecture}.nextn_predict_layers")
        return int(value) if isinstance(value, int) else 0

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) else None

    def tensor_types(self) -> dict[str, str]:
        return {name: entry.type.name for name, entry in self.tensors.items()}


def read_gguf(path: str | Path, *, max_array: int = 1024) -> GGUFFile:
    """Read the header of the GGUF file `path`; raise ModelFileError (one line) if it is not a complete one."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}", path=path)
    if path.is_dir():
        raise ModelFileError(f"{path} is a directory, not a GGUF model file", path=path)
    try:
        with open(path, "rb") as handle:
            size = path.stat().st_size
            if size < 24:
                raise ModelFileError(f"{path} is not a GGUF file (only {size} bytes)", path=path)
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(path, buf, max_array)
    except _Truncated:
        raise ModelFileError(f"{path} is truncated or corrupt: its GGUF header ends early", path=path) from None
    except _Corrupt as exc:
        raise ModelFileError(f"{path} is a corrupt GGUF file: {exc}", path=path) from None
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {path}: {exc.strerror or exc}", path=path) from None


_HEADERS: dict[tuple, GGUFFile] = {}  # validated headers by (path, size, mtime, inode): see validate_gguf
_HEADERS_KEPT = 16


def validate_gguf(path: str | Path) -> GGUFFile:
    """Check that `path` is a complete GGUF of a supported architecture; raise ModelFileError if not.

    Reads only the header (metadata and tensor directory, no arrays) through a memory map, so it
    takes well under a second on a multi-GB file; but skipping a 248k-token vocabulary still
    walks every string, so a header validated before (same path, size, mtime and inode) is
    reused: every `Session` validates its file, and calibration opens one per candidate.
    """
    try:
        stat = Path(path).stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    except OSError:
        key = None
    if key is not None and key in _HEADERS:
        return _HEADERS[key]
    info = read_gguf(path, max_array=0)
    if info.architecture is None:
        raise ModelFileError(f"{info.path} has no general.architecture key; it is not a model GGUF", path=info.path)
    if info.architecture not in SUPPORTED_ARCHITECTURES:
        supported = ", ".join(sorted(SUPPORTED_ARCHITECTURES))
        raise ModelFileError(
            f"{info.path} is a '{info.architecture}' model; edge-sql runs only: {supported}", path=info.path
        )
    if key is not None:
        if len(_HEADERS) >= _HEADERS_KEPT:
            _HEADERS.pop(next(iter(_HEADERS)))
        _HEADERS[key] = info
    return info


class _Truncated(Exception):
    """The header ends before a field it needs."""


class _Corrupt(Exception):
    """A header field holds an impossible value."""


def _value_type(raw: int) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise _Corrupt(f"unknown metadata value type {raw}") from None


def _nbytes(name: str, dims: tuple[int, ...] | list[int], qtype: GGMLQuantizationType) -> int:
    """Bytes of a tensor with GGUF dims (innermost first) stored as `qtype`."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    if dims and dims[0] % block_size:
        raise _Corrupt(f"tensor {name!r} row of {dims[0]} is not a multiple of {block_size}")
    n_elements = 1
    for d in dims:
        n_elements *= d
    return n_elements // block_size * type_size


class _HeaderReader:
    """Sequential little-endian reader over a memory-mapped file, bounds-checked."""

    def __init__(self, buffer: mmap.mmap | bytes, max_array: int) -> None:
        self.buf, self.pos, self.size, self.max_array = buffer, 0, len(buffer), max_array
        self.array_lengths: dict[str, int] = {}

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

    def string(self) -> str:
        n = self.unpack("<Q")
        self.need(n)
        value = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return value.decode("utf-8", errors="replace")

    def skip(self, vtype: GGUFValueType, n: int) -> None:
        """Skip `n` values of type `vtype` without building them."""
        if vtype in _SCALAR_FORMATS:
            nbytes = n * struct.calcsize(_SCALAR_FORMATS[vtype])
            self.need(nbytes)
            self.pos += nbytes
        elif vtype == GGUFValueType.STRING:
            unpack_from, buf, size, pos = struct.unpack_from, self.buf, self.size, self.pos
            for _ in range(n):
                if pos + 8 > size:
                    raise _Truncated()
                (length,) = unpack_from("<Q", buf, pos)
                pos += 8 + length
            if pos > size:
                raise _Truncated()
            self.pos = pos
        else:  # arrays of arrays
            for _ in range(n):
                item_type = _value_type(self.unpack("<I"))
                self.skip(item_type, self.count())

    def value(self, vtype: GGUFValueType, key: str) -> Any:
        """One metadata value; an array longer than `max_array` is skipped and returned as _SKIPPED."""
        if vtype in _SCALAR_FORMATS:
            return self.unpack(_SCALAR_FORMATS[vtype])
        if vtype == GGUFValueType.STRING:
            return self.string()
        item_type = _value_type(self.unpack("<I"))
        n = self.count()
        self.array_lengths[key] = n
        if n <= self.max_array:
            return [self.value(item_type, key) for _ in range(n)]
        self.skip(item_type, n)
        return _SKIPPED


_SKIPPED = object()


def _parse(path: Path, buf: mmap.mmap | bytes, max_array: int) -> GGUFFile:
    reader = _HeaderReader(buf, max_array)
    reader.need(4)
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise ModelFileError(f"{path} is not a GGUF file (it does not start with 'GGUF')", path=path)
    reader.pos = 4
    version = reader.unpack("<I")
    if version not in SUPPORTED_VERSIONS:
        raise ModelFileError(f"{path} is GGUF version {version}; only versions 2 and 3 are supported", path=path)
    n_tensors = reader.count()
    n_kv = reader.count()
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = reader.string()
        value = reader.value(_value_type(reader.unpack("<I")), key)
        if value is not _SKIPPED:
            metadata[key] = value
    entries = []
    data_end = 0
    for _ in range(n_tensors):
        name = reader.string()
        n_dims = reader.unpack("<I")
        if n_dims > _MAX_DIMS:
            raise _Corrupt(f"tensor {name!r} has {n_dims} dimensions")
        dims = [reader.unpack("<Q") for _ in range(n_dims)]
        type_id = reader.unpack("<I")
        try:
            qtype = GGMLQuantizationType(type_id)
        except ValueError:
            raise _Corrupt(f"tensor {name!r} has unknown type {type_id}") from None
        offset = reader.unpack("<Q")
        data_end = max(data_end, offset + _nbytes(name, dims, qtype))
        entries.append((name, qtype, tuple(reversed(dims)), offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise _Corrupt(f"bad general.alignment {alignment!r}")
    data_start = -(-reader.pos // alignment) * alignment
    if data_start + data_end > reader.size:
        missing = data_start + data_end - reader.size
        raise ModelFileError(
            f"{path} is truncated: its tensors need {data_start + data_end:,} bytes "
            f"but the file has {reader.size:,} ({missing:,} missing)",
            path=path,
        )
    tensors = {name: TensorEntry(name, qtype, shape, data_start + off) for name, qtype, shape, off in entries}
    return GGUFFile(
        path=path,
        version=version,
        file_size=reader.size,
        metadata=metadata,
        array_lengths=reader.array_lengths,
        tensors=tensors,
        tensor_data_bytes=data_end,
    )
