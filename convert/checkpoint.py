"""Lazy reading of a Hugging Face checkpoint folder: config.json and safetensors (one or sharded).

Nothing is loaded until asked for: opening a checkpoint reads only the JSON headers, checks
that every shard exists and is long enough, and records where each tensor lies. A tensor is
then read row range by row range with plain file reads (no mmap, so untouched data never
counts against the process's memory). torch is not needed.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sql.errors import ConversionError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

# safetensors dtype -> numpy dtype used to hold the raw values (BF16 is kept as its bit pattern)
SAFETENSORS_DTYPES: dict[str, np.dtype] = {
    "BF16": np.dtype(np.uint16),
    "F16": np.dtype(np.float16),
    "F32": np.dtype(np.float32),
}


@dataclass(frozen=True)
class TensorSource:
    """Where one tensor's bytes lie in a safetensors file."""

    name: str
    path: Path
    dtype: str  # safetensors dtype name: BF16, F16 or F32
    shape: tuple[int, ...]
    offset: int  # absolute byte offset of the first element in the file
    nbytes: int

    @property
    def numpy_dtype(self) -> np.dtype:
        return SAFETENSORS_DTYPES[self.dtype]

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) along the first axis of a 2-D+ tensor, as raw values (BF16 as uint16 bits)."""
        row_elems = int(np.prod(self.shape[1:]))
        itemsize = self.numpy_dtype.itemsize
        count = (stop - start) * row_elems
        out = np.empty(count, dtype=self.numpy_dtype)
        _read_into(self.path, self.offset + start * row_elems * itemsize, out)
        return out.reshape((stop - start,) + self.shape[1:])

    def read(self) -> np.ndarray:
        """The whole tensor, as raw values (BF16 as uint16 bits)."""
        out = np.empty(int(np.prod(self.shape)) if self.shape else 1, dtype=self.numpy_dtype)
        _read_into(self.path, self.offset, out)
        return out.reshape(self.shape)


def _read_into(path: Path, offset: int, out: np.ndarray) -> None:
    view = out.reshape(-1).view(np.uint8).data  # a writable memoryview of out's bytes
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        done = 0
        while done < len(view):
            n = f.readinto(view[done:])
            if not n:
                raise ConversionError(f"{path.name} ends early: it is truncated or was changed while converting")
            done += n


class Checkpoint:
    """A checkpoint folder: its config and the location of each of its tensors."""

    def __init__(self, folder: Path, config: dict, tensors: dict[str, TensorSource]):
        self.folder = folder
        self.config = config
        self.tensors = tensors

    @classmethod
    def open(cls, folder: Path) -> Checkpoint:
        folder = Path(folder)
        if not folder.is_dir():
            raise ConversionError(f"{folder} is not a folder with a Hugging Face checkpoint")
        config = read_json(folder / "config.json", what="the model config")
        return cls(folder, config, _index_tensors(folder))

    def names(self) -> list[str]:
        return list(self.tensors)

    def get(self, name: str) -> TensorSource:
        return self.tensors[name]


def read_json(path: Path, *, what: str) -> dict:
    """A JSON object from `path`, or a ConversionError saying what is missing or broken."""
    if not path.is_file():
        raise ConversionError(f"{path.parent} has no {path.name} ({what}): is it a Hugging Face checkpoint folder?")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConversionError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ConversionError(f"{path} does not hold a JSON object")
    return data


def _index_tensors(folder: Path) -> dict[str, TensorSource]:
    index_path = folder / INDEX_FILE
    if index_path.is_file():
        weight_map = read_json(index_path, what="the shard index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ConversionError(f"{index_path} has no weight_map")
        files = sorted(set(weight_map.values()))
    elif (folder / SINGLE_FILE).is_file():
        weight_map = None
        files = [SINGLE_FILE]
    else:
        raise ConversionError(f"{folder} has neither {SINGLE_FILE} nor {INDEX_FILE}")
    tensors: dict[str, TensorSource] = {}
    for file_name in files:
        path = folder / file_name
        if not path.is_file():
            raise ConversionError(f"shard {file_name} named in {INDEX_FILE} is missing from {folder}")
        for source in read_safetensors_header(path):
            if weight_map is not None and weight_map.get(source.name) != file_name:
                continue  # the index is authoritative about where a tensor lives
            tensors[source.name] = source
    if weight_map is not None:
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise ConversionError(
                f"{len(missing)} tensors listed in {INDEX_FILE} are not in their shard (first: {missing[0]})"
            )
    return tensors


def read_safetensors_header(path: Path) -> list[TensorSource]:
    """The tensors a safetensors file declares, checked against the file's real length."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConversionError(f"{path.name} is not a safetensors file (too short)")
        (header_len,) = struct.unpack("<Q", head)
        if header_len > min(size - 8, 100 * 1024 * 1024):
            raise ConversionError(f"{path.name} is not a safetensors file or is truncated (bad header length)")
        try:
            header = json.loads(f.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConversionError(f"{path.name} has a corrupt safetensors header: {e}") from e
    data_start = 8 + header_len
    sources = []
    end_max = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info.get("dtype")
        if dtype not in SAFETENSORS_DTYPES:
            raise ConversionError(
                f"tensor {name} in {path.name} has dtype {dtype}; only BF16, F16 and F32 checkpoints are supported"
            )
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        expected = (
            int(np.prod(shape)) * SAFETENSORS_DTYPES[dtype].itemsize if shape else SAFETENSORS_DTYPES[dtype].itemsize
        )
        if end - begin != expected:
            raise ConversionError(f"tensor {name} in {path.name} has {end - begin} bytes for shape {shape}")
        end_max = max(end_max, end)
        sources.append(TensorSource(name, path, dtype, shape, data_start + begin, end - begin))
    if data_start + end_max > size:
        raise ConversionError(
            f"{path.name} is truncated: {size:,} bytes on disk, its header needs {data_start + end_max:,}"
        )
    return sources
