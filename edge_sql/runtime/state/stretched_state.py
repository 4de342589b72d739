"""A long context without prefilling it: a short context's sequence state, its KV cells tiled.

Calibration needs the cost of a decode step and of a prefill chunk at 8,000 tokens of context,
where flash attention and n_ubatch part ways; prefilling that context costs minutes on a 2-core
CPU (8,192 tokens at ~50 tok/s on the 2B Q4_K_M), while the step measured after it costs a
second. How long a step takes depends on how many cells attention reads, not on what they hold,
so a state saved after a few real tokens is stretched here to `n_tokens` cells: each new cell a
copy of an existing one at the next position, the recurrent part's position moved to the end.
The result is llama.cpp's own format (`llama_state_seq_get_data` of llama.cpp's
`llama_kv_cache::state_write` and `llama_memory_recurrent::state_write`, one stream, one
sequence), restored through the usual `Session.restore`; a KV part that does not parse as that
format gives None and the caller fills the context for real (the recurrent part, a fixed-size
state, is copied as it is: llama.cpp refuses it on restore if it is not whole).
"""

from __future__ import annotations

import struct

import numpy as np

from edge_sql.runtime.state.prefix_state import StateSnapshot

IO_MAGIC = 0xAF143CD8  # llama-context.cpp: the first word of a sequence state
EXT_BYTES = 12  # llama_kv_cell_ext (x, y, tok): saved per cell by M-RoPE models such as Qwen3.5


class _Reader:
    """Sequential reads over a state; any overrun raises ValueError (the format is not this one)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("state ends early")
        self.at += n
        return self.data[self.at - n : self.at]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]


def stretch_snapshot(snapshot: StateSnapshot, n_tokens: int) -> StateSnapshot | None:
    """`snapshot` (a context of real tokens at positions 0..n-1) stretched to `n_tokens`
    positions; None where its state is not the one-sequence format this module knows."""
    n = len(snapshot.tokens)
    if n == 0 or n_tokens < n:
        return None
    try:
        state = stretch_state(snapshot.state, n, n_tokens)
    except ValueError:
        return None
    tokens = tuple(snapshot.tokens[i % n] for i in range(n_tokens))
    return StateSnapshot(tokens=tokens, state=state, logits=snapshot.logits)


def stretch_state(state: bytes, n: int, n_tokens: int) -> bytes:
    """The sequence state of `n` cells (positions 0..n-1) with its KV cells tiled to `n_tokens`.
    Raises ValueError where the bytes are not that state."""
    read = _Reader(state)
    magic, seq_id = struct.unpack("<Ii", read.take(8))
    if magic != IO_MAGIC or read.u32() != 1:  # one stream
        raise ValueError("not a one-stream sequence state")
    if read.u32() != n:
        raise ValueError("cell count is not the token count")
    out = [struct.pack("<IiII", magic, seq_id, 1, n_tokens), _stretch_meta(read, n, n_tokens)]
    out.append(_stretch_kv_data(read, n, n_tokens))
    if read.at < len(state):  # a hybrid model: the recurrent part follows (one cell, its position)
        if read.u32() != 1:
            raise ValueError("not one recurrent cell")
        pos, n_seq = struct.unpack("<iI", read.take(8))
        if pos != n - 1 or n_seq != 0:
            raise ValueError("recurrent cell is not at the last position")
        out.append(struct.pack("<IiI", 1, n_tokens - 1, 0))
        out.append(read.take(len(state) - read.at))  # its data: a fixed-size state, as it is
    return b"".join(out)


def _stretch_meta(read: _Reader, n: int, n_tokens: int) -> bytes:
    """Per cell: position, sequence count (1), the M-RoPE extension where the model has one,
    the sequence id. Which of the two layouts it is shows in whether positions run 0..n-1."""
    start = read.at
    for per_cell in (12, 12 + EXT_BYTES):
        read.at = start
        try:
            cells = np.frombuffer(read.take(n * per_cell), dtype="<i4").reshape(n, per_cell // 4)
        except ValueError:
            continue
        if np.array_equal(cells[:, 0], np.arange(n)) and (cells[:, 1] == 1).all():
            break
    else:
        raise ValueError("cell positions do not run 0..n-1")
    source = np.arange(n_tokens) % n
    tiled = cells[source].copy()
    positions = np.arange(n_tokens, dtype="<i4")
    for column in (2, 3) if per_cell > 12 else ():  # ext x, y: the position again for text
        same = tiled[:, column] == tiled[:, 0]
        tiled[same, column] = positions[same]
    tiled[:, 0] = positions
    return tiled.astype("<i4").tobytes()


def _stretch_kv_data(read: _Reader, n: int, n_tokens: int) -> bytes:
    """Keys (a row per cell), then values: a row per cell, or with a transposed V cache (flash
    attention off) a run of n elements per embedding dimension."""
    v_trans, n_layer = read.u32(), read.u32()
    if v_trans not in (0, 1) or not 0 < n_layer < 1024:
        raise ValueError("not a KV data header")
    out = [struct.pack("<II", v_trans, n_layer)]
    source = np.arange(n_tokens) % n
    for _ in range(2 if not v_trans else 1):  # K rows; then V rows unless transposed
        for _ in range(n_layer):
            kind, row = struct.unpack("<iQ", read.take(12))
            rows = np.frombuffer(read.take(n * row), dtype=np.uint8).reshape(n, row)
            out += [struct.pack("<iQ", kind, row), rows[source].tobytes()]
    if v_trans:
        for _ in range(n_layer):
            kind, size, n_embd = struct.unpack("<iII", read.take(12))
            runs = np.frombuffer(read.take(n_embd * n * size), dtype=np.uint8).reshape(n_embd, n, size)
            out += [struct.pack("<iII", kind, size, n_embd), runs[:, source].tobytes()]
    return b"".join(out)
