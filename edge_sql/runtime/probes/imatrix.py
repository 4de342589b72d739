"""Collect an importance matrix: squared inputs of every block weight's matrix product.

llama.cpp's scheduler calls a context's `cb_eval` twice for each graph node it may report: once
to ask whether the caller wants the node (`ask=True`), and, if so, again once the node has been
computed (`ask=False`), its data readable; the nodes it is not asked for run in one piece and are
never copied. As llama.cpp's `llama-imatrix` does, the collector wants every `MUL_MAT` whose
weight (`src[0]`) is a `blk.*` tensor and whose input (`src[1]`) is F32 with at least 16 rows
(smaller products come from decoding single tokens), and every `MUL_MAT_ID` (experts); it decides
from the node's op and its weight's name alone. For each it adds the squares of the input rows
per column, and the number of rows, per weight matrix (per expert for `MUL_MAT_ID`); products
reading the same input node (q/k/v, gate/up) square it once.

Every token is marked for output: otherwise llama.cpp computes the last layer's feed-forward for
the output rows only. The output product itself (`output.weight`, with a 248k vocabulary a fifth
of the 2B's work, and a full-vocabulary row per token) is not wanted: llama.cpp's imatrix leaves
it out unless asked (`--process-output`), and the quantizer gives that matrix a high-precision
type anyway. So the collector also asks for the final norm (`result_norm`) and, once it is
computed, tells the scheduler to stop: the rest of the graph (the output product) is skipped and
the logits are left unwritten. Each sequence starts from an empty memory; a long one is cut into
`chunk_size` pieces, as llama.cpp cuts its text into chunks.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp._ggml import libggml

from edge_sql.convert.gguf_file import UNQUANTIZED_FILE_TYPES, validate_gguf
from edge_sql.convert.imatrix_file import Imatrix, ImatrixEntry
from edge_sql.errors import ImatrixError, ModelFileError
from edge_sql.runtime.llama.batch import TokenBatch
from edge_sql.runtime.llama.context import create_context
from edge_sql.runtime.session import Session

MIN_ROWS = 16  # llama.cpp's imatrix skips smaller products
DEFAULT_CHUNK = 2048
DEFAULT_BATCH = 512  # every token is an output: n_batch x n_vocab logits buffer (508 MB for 248k tokens)
FINAL_NORM = b"result_norm"  # llama.cpp's name for the last node before the output product
_GGML_TYPE_F32 = 0


class GGMLTensor(ctypes.Structure):
    """`struct ggml_tensor` (ggml.h), read only."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


libggml.ggml_op_name.argtypes = [ctypes.c_int]
libggml.ggml_op_name.restype = ctypes.c_char_p
libggml.ggml_backend_buffer_is_host.argtypes = [ctypes.c_void_p]
libggml.ggml_backend_buffer_is_host.restype = ctypes.c_bool
libggml.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
libggml.ggml_backend_tensor_get.restype = None
libggml.ggml_tensor_overhead.argtypes = []
libggml.ggml_tensor_overhead.restype = ctypes.c_size_t


def _op_codes(*names: str) -> dict[str, int]:
    """The `enum ggml_op` values of `names`, by ggml's own op names (the enum shifts between versions)."""
    codes: dict[str, int] = {}
    for code in range(1, 256):
        name = libggml.ggml_op_name(code).decode()
        if name in names:
            codes[name] = code
        if len(codes) == len(names):
            return codes
    raise ImatrixError(f"this llama.cpp build has no ggml ops {', '.join(names)}")


_OPS = _op_codes("MUL_MAT", "MUL_MAT_ID")
MUL_MAT, MUL_MAT_ID = _OPS["MUL_MAT"], _OPS["MUL_MAT_ID"]
_OBJECT_SIZE = 32  # struct ggml_object, ahead of each tensor in a context's memory
assert libggml.ggml_tensor_overhead() == _OBJECT_SIZE + ctypes.sizeof(GGMLTensor), "ggml_tensor layout changed"


def weight_name(raw: bytes) -> str:
    """A weight's name as the imatrix keys it: `CUDA0#blk.0.attn_k.weight#0` -> `blk.0.attn_k.weight`."""
    name = raw.decode("utf-8", errors="replace")
    if "#" in name:
        name = name.split("#")[1]
    return name


def tensor_array(t: GGMLTensor, scratch: dict[str, np.ndarray], dtype: type = np.float32) -> np.ndarray:
    """The data of `t` as a 4-D array (ne3, ne2, ne1, ne0), copied from device memory if needed."""
    ne, nb = [int(v) for v in t.ne], [int(v) for v in t.nb]
    extent = sum((n - 1) * b for n, b in zip(ne, nb)) + np.dtype(dtype).itemsize
    base: Any  # Any: ctypes (the tensor's bytes: a ctypes array over host memory, or a numpy copy of device memory
    if libggml.ggml_backend_buffer_is_host(t.buffer):
        base = (ctypes.c_char * extent).from_address(t.data)
    else:
        key = np.dtype(dtype).name
        buffer = scratch.get(key)
        if buffer is None or buffer.nbytes < extent:
            buffer = scratch[key] = np.empty(extent, dtype=np.uint8)
        libggml.ggml_backend_tensor_get(ctypes.addressof(t), buffer.ctypes.data, 0, extent)
        base = buffer
    return np.ndarray(shape=tuple(reversed(ne)), dtype=dtype, buffer=base, strides=tuple(reversed(nb)))


def add_expert_rows(sums: np.ndarray, counts: np.ndarray, x: np.ndarray, ids: np.ndarray) -> None:
    """Accumulate `MUL_MAT_ID` inputs: `x` (tokens, n_x, cols) with `ids` (tokens, used) naming the
    expert of each (token, slot); slot k reads input row k % n_x (one shared row, or its own)."""
    tokens, used = ids.shape
    rows = x[:, np.arange(used) % x.shape[1], :].reshape(tokens * used, -1).astype(np.float64)
    experts = ids.reshape(-1)
    np.add.at(sums, experts, rows * rows)
    np.add.at(counts, experts, 1)


@dataclass
class _Stats:
    sums: np.ndarray  # n_mat x n_cols, float64
    counts: np.ndarray  # n_mat


class ImatrixCollector:
    """The `cb_eval` callback and the sums it accumulates. Keep the instance alive while the
    context that calls it exists (`callback` is the C function pointer llama.cpp holds)."""

    def __init__(self) -> None:
        self.stats: dict[str, _Stats] = {}
        self.error: BaseException | None = None
        self.stopped = 0  # graphs stopped at the final norm (their output product skipped)
        self._scratch: dict[str, np.ndarray] = {}
        self._squares: dict[int, np.ndarray] = {}  # input node -> its squared rows summed, this graph
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_node)

    def _on_node(self, tensor: int, ask: bool, _user_data: int) -> bool:
        try:
            t = GGMLTensor.from_address(tensor)
            if t.op not in (MUL_MAT, MUL_MAT_ID) or not t.src[0] or not t.src[1]:
                if t.name != FINAL_NORM:
                    return False
                if ask:
                    return True
                self.stopped += 1
                self._squares.clear()
                return False  # the scheduler stops here: the output product is never computed
            if ask:
                return self.wants(t)
            self.collect(t)
        except BaseException as exc:  # an exception cannot cross into C: kept, raised after the decode
            self.error = self.error or exc
        return True

    def wants(self, t: GGMLTensor) -> bool:
        if t.op == MUL_MAT_ID:
            return True
        src0, src1 = GGMLTensor.from_address(t.src[0]), GGMLTensor.from_address(t.src[1])
        return src1.ne[1] >= MIN_ROWS and src1.type == _GGML_TYPE_F32 and weight_name(src0.name).startswith("blk.")

    def collect(self, t: GGMLTensor) -> None:
        src0, src1 = GGMLTensor.from_address(t.src[0]), GGMLTensor.from_address(t.src[1])
        name = weight_name(src0.name)
        if t.op == MUL_MAT_ID:
            x = tensor_array(src1, self._scratch)  # (ne3, ne2, ne1, ne0)
            n_experts = int(src0.ne[2])
            ids = tensor_array(GGMLTensor.from_address(t.src[2]), self._scratch, np.int32)[0, 0]  # (tokens, used)
            stats = self._stats(name, n_experts, x.shape[-1])
            add_expert_rows(stats.sums, stats.counts, x[0], ids)
            return
        squares = self._squares.get(t.src[1])
        if squares is None:
            x = tensor_array(src1, self._scratch)
            # float32 sums of one batch's rows (SIMD, 1e-6 relative), added to float64 totals
            squares = self._squares[t.src[1]] = np.stack(
                [np.einsum("ij,ij->j", x[i3, i2], x[i3, i2]) for i3 in range(x.shape[0]) for i2 in range(x.shape[1])]
            )
        ne2, ne3 = int(src0.ne[2]), int(src0.ne[3])
        in2, in3, rows = int(src1.ne[2]), int(src1.ne[3]), int(src1.ne[1])
        stats = self._stats(name, ne2 * ne3, squares.shape[-1])
        for i3 in range(in3):
            for i2 in range(in2):
                stats.sums[(i3 % ne3) * ne2 + (i2 % ne2)] += squares[i3 * in2 + i2]
        stats.counts += in3 * in2 * rows // (ne2 * ne3)

    def end_graph(self) -> None:
        """Forget the squared inputs of the graph just computed (its nodes' memory is reused)."""
        self._squares.clear()

    def _stats(self, name: str, n_mat: int, cols: int) -> _Stats:
        stats = self.stats.get(name)
        if stats is None:
            stats = self.stats[name] = _Stats(np.zeros((n_mat, cols)), np.zeros(n_mat))
        elif stats.sums.shape != (n_mat, cols):
            raise ImatrixError(f"{name} changed shape between products ({stats.sums.shape} vs {(n_mat, cols)})")
        return stats

    def raise_pending(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def imatrix(self, **info: object) -> Imatrix:
        entries = {name: ImatrixEntry(s.sums.copy(), s.counts.copy()) for name, s in sorted(self.stats.items())}
        return Imatrix(entries, **info)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CollectReport:
    """What a collection ran over: sequences, tokens decoded, chunks, time, and how many decodes
    stopped at the final norm (their output product skipped; 0 for a graph without one)."""

    sequences: int
    tokens: int
    chunks: int
    seconds: float
    graphs_stopped: int = 0


def chunks_of(sequences: Iterable[Sequence[int]], chunk_size: int) -> list[list[int]]:
    """Each sequence cut into pieces of at most `chunk_size` tokens."""
    pieces = []
    for tokens in sequences:
        pieces += [list(tokens[i : i + chunk_size]) for i in range(0, len(tokens), chunk_size)]
    return [piece for piece in pieces if piece]


def collect_imatrix(
    session: Session,
    sequences: Iterable[Sequence[int]],
    *,
    datasets: Sequence[str] = (),
    chunk_size: int = DEFAULT_CHUNK,
    batch_size: int = DEFAULT_BATCH,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Imatrix, CollectReport]:
    """The importance matrix of `session`'s model over `sequences` (token ids), each decoded from
    an empty memory in chunks of `chunk_size`. `progress(done, total)` counts tokens.

    Raises ImatrixError for a quantized model, no tokens, or a context llama.cpp cannot create."""
    started = time.perf_counter()
    file_type = unquantized_file_type(session.info.model_path)
    sequences = [list(tokens) for tokens in sequences]
    pieces = chunks_of(sequences, chunk_size)
    total = sum(len(p) for p in pieces)
    if total == 0:
        raise ImatrixError("the calibration text has no tokens")
    collector = ImatrixCollector()
    n_ctx = max(len(p) for p in pieces)
    batch = min(batch_size, n_ctx)
    options = replace(session.context.options, n_ctx=n_ctx, n_batch=batch, n_ubatch=batch)
    try:
        context = create_context(
            session.context.loaded,
            options,
            n_outputs=batch,
            cb_eval=collector.callback,
            what=f"a {n_ctx}-token context to collect the imatrix",
        )
    except ModelFileError as exc:
        raise ImatrixError(str(exc)) from None
    done = 0
    with context, TokenBatch(batch) as token_batch:
        for piece in pieces:
            context.clear()
            for start in range(0, len(piece), batch):
                token_batch.fill(piece[start : start + batch], start, outputs="all")
                token_batch.decode(context.ptr)
                collector.end_graph()
                collector.raise_pending()
                done += min(batch, len(piece) - start)
                if progress is not None:
                    progress(done, total)
    imatrix = collector.imatrix(
        datasets=list(datasets), chunk_count=total // chunk_size, chunk_size=chunk_size, model_file_type=file_type
    )
    return imatrix, CollectReport(len(sequences), total, len(pieces), time.perf_counter() - started, collector.stopped)


def unquantized_file_type(model: Path) -> int | None:
    """`general.file_type` of the GGUF `model` (None when it has none); ImatrixError when it is
    quantized: activations of rounded weights would steer the next rounding."""
    value = validate_gguf(model).metadata.get("general.file_type")
    if isinstance(value, int) and value not in {int(t) for t in UNQUANTIZED_FILE_TYPES}:
        raise ImatrixError(f"{Path(model).name} is quantized; collect the imatrix on its BF16/F16/F32 file", path=model)
    return value if isinstance(value, int) else None
