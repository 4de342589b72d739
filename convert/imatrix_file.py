"""Importance matrices: llama.cpp's two file formats, read and written, and checked against a model.

An importance matrix holds, for every weight matrix `W` of the model's blocks, the sum of the
squared inputs `x_j^2` per input column `j` over a calibration text, and how many input rows
were summed (one count per expert for a 3-D expert tensor). llama.cpp's quantizer weighs each
column's rounding error by the mean, `sum / count`, so the columns that carry large
activations are rounded more carefully.

Two formats exist, both read here as llama.cpp's `llama-imatrix` and `llama-quantize` do:

- GGUF (what `write_imatrix` writes): `general.type = "imatrix"`, `imatrix.datasets` (strings),
  `imatrix.chunk_count` and `imatrix.chunk_size` (u32), and per weight two F32 tensors,
  `<name>.in_sum2` (n_cols x n_mat: the sums) and `<name>.counts` (1 x n_mat);
- legacy `.dat`: int32 entry count, then per entry an int32 name length, the name, an int32
  `ncall`, an int32 value count and the values (already `sum / count * ncall`), then an int32
  chunk count and an int32-length dataset name. Its mean is `value / ncall`.

edge-sql adds one key llama.cpp ignores, `imatrix.model.file_type` (the llama_ftype of the
model the activations came from), so a matrix collected on a quantized model is refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType, LlamaFileType

from edge_sql.convert.gguf_file import GGUF_MAGIC, UNQUANTIZED_FILE_TYPES, GGUFFile, read_gguf
from edge_sql.convert.gguf_stream import PlannedTensor, write_gguf
from edge_sql.errors import ImatrixError, ModelFileError

SUM2_SUFFIX = ".in_sum2"
COUNTS_SUFFIX = ".counts"
KEY_DATASETS = "imatrix.datasets"
KEY_CHUNK_COUNT = "imatrix.chunk_count"
KEY_CHUNK_SIZE = "imatrix.chunk_size"
KEY_MODEL_FILE_TYPE = "imatrix.model.file_type"  # ours; llama.cpp ignores it


@dataclass(frozen=True)
class ImatrixEntry:
    """One weight's statistics: `sums` (n_mat x n_cols, float64) and `counts` (n_mat)."""

    sums: np.ndarray
    counts: np.ndarray

    @property
    def size(self) -> int:
        return int(self.sums.size)


@dataclass
class Imatrix:
    """An importance matrix in memory: entries by weight name, and what it was computed on."""

    entries: dict[str, ImatrixEntry]
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0
    model_file_type: int | None = None  # the source model's llama_ftype, when recorded
    legacy: bool = False  # read from a legacy .dat file: sums are already scaled means

    def normalized(self) -> dict[str, np.ndarray]:
        """What llama.cpp's quantizer takes per weight: float32 `sum / count` per matrix (a matrix
        with no rows counted gets ones); for a legacy file `value / ncall`."""
        out: dict[str, np.ndarray] = {}
        for name, entry in self.entries.items():
            counts = entry.counts.astype(np.float64).reshape(-1, 1)
            if self.legacy:
                values = entry.sums / counts if counts[0, 0] > 0 else entry.sums
            else:
                values = np.where(counts > 0, entry.sums / np.where(counts > 0, counts, 1.0), 1.0)
            out[name] = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        return out


# -- writing -----------------------------------------------------------------------------------


def write_imatrix(imatrix: Imatrix, out: Path) -> None:
    """Write `imatrix` as llama.cpp's GGUF imatrix file (atomically), names sorted."""
    if imatrix.legacy:
        raise ImatrixError("a legacy imatrix cannot be written as GGUF sums; collect it again", path=out)
    names = sorted(imatrix.entries)

    def metadata(writer: gguf.GGUFWriter) -> None:
        writer.kv_data[0].pop(gguf.Keys.General.ARCHITECTURE, None)  # llama.cpp writes none for an imatrix
        writer.add_type("imatrix")
        writer.add_array(KEY_DATASETS, list(imatrix.datasets))
        writer.add_uint32(KEY_CHUNK_COUNT, imatrix.chunk_count)
        writer.add_uint32(KEY_CHUNK_SIZE, imatrix.chunk_size)
        if imatrix.model_file_type is not None:
            writer.add_uint32(KEY_MODEL_FILE_TYPE, int(imatrix.model_file_type))

    tensors = []
    for name in names:
        entry = imatrix.entries[name]
        sums = np.ascontiguousarray(entry.sums, dtype=np.float32)
        counts = np.ascontiguousarray(entry.counts, dtype=np.float32).reshape(-1, 1)
        tensors.append(_planned(name + SUM2_SUFFIX, sums))
        tensors.append(_planned(name + COUNTS_SUFFIX, counts))
    write_gguf(Path(out), "imatrix", metadata, tensors, show_progress=False)


def _planned(name: str, data: np.ndarray) -> PlannedTensor:
    return PlannedTensor(name, data.shape, GGMLQuantizationType.F32, lambda: iter([data]))


# -- reading -----------------------------------------------------------------------------------


def read_imatrix(path: str | Path) -> Imatrix:
    """Read a GGUF or legacy imatrix file; raise ImatrixError (one line) if it is neither, or cut short."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except FileNotFoundError:
        raise ImatrixError(f"imatrix file not found: {path}", path=path) from None
    except IsADirectoryError:
        raise ImatrixError(f"{path} is a directory, not an imatrix file", path=path) from None
    except OSError as exc:
        raise ImatrixError(f"cannot read imatrix file {path}: {exc.strerror or exc}", path=path) from None
    return _read_gguf_imatrix(path) if magic == GGUF_MAGIC else _read_legacy(path)


def _read_gguf_imatrix(path: Path) -> Imatrix:
    try:
        info = read_gguf(path)
    except ModelFileError as exc:
        raise ImatrixError(f"cannot read imatrix {path}: {exc}".replace(f"{path} is ", "it is "), path=path) from None
    if info.architecture is not None and info.metadata.get("general.type") != "imatrix":
        raise ImatrixError(f"{path} is a model file ({info.architecture}), not an imatrix", path=path)
    pairs: dict[str, dict[str, np.ndarray]] = {}
    with open(path, "rb") as handle:
        for name, entry in info.tensors.items():
            for suffix in (SUM2_SUFFIX, COUNTS_SUFFIX):
                if name.endswith(suffix):
                    if entry.type != GGMLQuantizationType.F32:
                        raise ImatrixError(f"{path}: tensor {name} is {entry.type.name}, not F32", path=path)
                    handle.seek(entry.offset)
                    data = np.fromfile(handle, dtype=np.float32, count=int(np.prod(entry.shape)))
                    pairs.setdefault(name[: -len(suffix)], {})[suffix] = data.reshape(entry.shape)
    entries = {}
    for name, found in sorted(pairs.items()):
        if set(found) != {SUM2_SUFFIX, COUNTS_SUFFIX}:
            raise ImatrixError(f"{path}: {name} has sums without counts or counts without sums", path=path)
        counts = found[COUNTS_SUFFIX].reshape(-1).astype(np.float64)
        sums = found[SUM2_SUFFIX].astype(np.float64)
        if sums.size % counts.size:
            raise ImatrixError(f"{path}: {name} has {sums.size} sums for {counts.size} counts", path=path)
        entries[name] = ImatrixEntry(sums.reshape(counts.size, -1), counts)
    if not entries:
        raise ImatrixError(f"{path} holds no imatrix entries", path=path)
    datasets = info.metadata.get(KEY_DATASETS)
    file_type = info.metadata.get(KEY_MODEL_FILE_TYPE)
    return Imatrix(
        entries,
        list(datasets) if isinstance(datasets, list) else [],
        int(info.metadata.get(KEY_CHUNK_COUNT, 0)),
        int(info.metadata.get(KEY_CHUNK_SIZE, 0)),
        int(file_type) if isinstance(file_type, int) else None,
    )


class _Cut(Exception):
    """The legacy file ends inside a field."""


def _read_legacy(path: Path) -> Imatrix:
    data = path.read_bytes()
    pos = 0

    def take(fmt: str) -> tuple:
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(data):
            raise _Cut()
        values = struct.unpack_from(fmt, data, pos)
        pos += size
        return values

    try:
        (n_entries,) = take("<i")
        if n_entries < 1 or n_entries > len(data) // 12:
            raise ImatrixError(f"{path} is neither a GGUF nor a legacy imatrix file", path=path)
        entries: dict[str, ImatrixEntry] = {}
        for _ in range(n_entries):
            (length,) = take("<i")
            if length < 1 or length > 4096:
                raise ImatrixError(f"{path} is neither a GGUF nor a legacy imatrix file", path=path)
            name = take(f"<{length}s")[0].decode("utf-8", errors="replace")
            ncall, nval = take("<ii")
            if nval < 1:
                raise ImatrixError(f"{path}: entry {name} has no values", path=path)
            values = np.frombuffer(take(f"<{4 * nval}s")[0], dtype="<f4").astype(np.float64)
            entries[name] = ImatrixEntry(values.reshape(1, -1), np.array([float(ncall)]))
    except _Cut:
        raise ImatrixError(f"{path} is truncated: the legacy imatrix ends inside an entry", path=path) from None
    chunk_count, datasets = 0, []
    try:  # optional trailer: the chunk count and the dataset's name
        (chunk_count,) = take("<i")
        (length,) = take("<i")
        datasets = [take(f"<{length}s")[0].decode("utf-8", errors="replace")] if length > 0 else []
    except _Cut:
        pass
    return Imatrix(entries, datasets, chunk_count, 0, None, legacy=True)


# -- checking against a model -----------------------------------------------------------------


def expected_sizes(model: GGUFFile) -> dict[str, int]:
    """Weight name -> the imatrix size llama.cpp expects for it: input columns x experts."""
    sizes = {}
    for name, entry in model.tensors.items():
        if len(entry.shape) >= 2:
            n_mat = entry.shape[-3] if len(entry.shape) >= 3 else 1
            sizes[name] = entry.shape[-1] * n_mat
    return sizes


def check_imatrix(imatrix: Imatrix, model: GGUFFile, *, source: Path | str = "the imatrix") -> None:
    """Raise ImatrixError unless every entry names a weight of `model` with the entry's size,
    and the matrix was not collected on a quantized model."""
    if imatrix.model_file_type is not None and imatrix.model_file_type not in {int(t) for t in UNQUANTIZED_FILE_TYPES}:
        kind = _ftype_name(imatrix.model_file_type)
        raise ImatrixError(
            f"{source} was collected on a quantized model ({kind}); collect it on the BF16/F16/F32 file",
            path=_path(source),
        )
    sizes = expected_sizes(model)
    unknown = [name for name in imatrix.entries if name not in sizes]
    if unknown:
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        raise ImatrixError(
            f"{source} does not match {model.path.name}: it has no weight {unknown[0]}{more}", path=_path(source)
        )
    for name, entry in imatrix.entries.items():
        if entry.size != sizes[name]:
            raise ImatrixError(
                f"{source} does not match {model.path.name}: {name} has {entry.size} values, "
                f"the model's weight needs {sizes[name]}",
                path=_path(source),
            )


def _ftype_name(value: int) -> str:
    try:
        return LlamaFileType(value).name.removeprefix("MOSTLY_")
    except ValueError:
        return f"file type {value}"


def _path(source: Path | str) -> Path | None:
    return Path(source) if isinstance(source, Path) else None
