"""One saved sequence state for every context shape: the state of a sequence as a context of one
KV stream writes it, whatever number of streams the context that made it or loads it has.

Why: llama.cpp writes a sequence's state (`llama_state_seq_get_data`) as a header (a magic number and
the sequence id, which its reader skips), the number of KV streams
of its context, then each stream's cells (only the sequence's own stream holds any; the others
are written as a count of 0), then the recurrent state. A context of one sequence has one stream;
the batched engine's context of n sequences has n (a non-unified cache, runtime/batching/batched.py). Its
reader refuses a state with another stream count ("n_stream mismatch"), but puts the cells of a
single sequence into that sequence's own stream whatever stream they were written from
(src/llama-kv-cache.cpp, `state_read_sinfo`, vendored 0.3.36). So a vote's sessions and a single
session saved states that the other could not load, under the same key (issue 40, bug 5).

The portable form is the one-stream form. `portable` turns an n-stream state of one sequence
into it (the empty streams' counts dropped: which needs the length of the non-empty stream's
cells, read from their header: per cell position, sequence count and ids, then per layer its
key rows and value rows); `for_streams` turns it into an n-stream state the reader takes (the
n-1 empty streams first, then the cells). A state whose layout is not the one read here is
returned unchanged (None from `portable`): the caller keys it by stream count instead.
"""

from __future__ import annotations

import struct

_U32 = struct.Struct("<I")
_HEADER = 8  # magic, sequence id
_CELL_EXT_BYTES = 12  # llama_kv_cell_ext (x, y, tok) of M-RoPE models such as Qwen3.5, when written


def for_streams(state: bytes, n_stream: int) -> bytes:
    """A portable (one-stream) sequence state as a context of `n_stream` KV streams reads it."""
    if n_stream == 1 or len(state) < _HEADER + 4 or _U32.unpack_from(state, _HEADER)[0] != 1:
        return state
    return state[:_HEADER] + _U32.pack(n_stream) + _U32.pack(0) * (n_stream - 1) + state[_HEADER + 4 :]


def portable(state: bytes) -> bytes | None:
    """`state` (one sequence's, from a context of any number of KV streams) in the one-stream
    form, or None when its layout is not the one this module reads."""
    if len(state) < _HEADER + 4:
        return None
    (n_stream,) = _U32.unpack_from(state, _HEADER)
    if n_stream == 1:
        return _as_sequence_0(state)
    if n_stream == 0:
        return None
    head = state[:_HEADER] + _U32.pack(1)
    counts = 0
    offset = _HEADER + 4
    for _ in range(n_stream):  # leading empty streams
        (cells,) = _U32.unpack_from(state, offset)
        if cells:
            break
        offset += 4
        counts += 1
    if counts == n_stream:  # an empty sequence: nothing but zero counts
        return _as_sequence_0(head + _U32.pack(0) + state[offset:])
    trailing = n_stream - counts - 1
    end = _stream_end(state, offset, trailing)
    if end is None:
        return None
    return _as_sequence_0(head + state[offset:end] + state[end + 4 * trailing :])


def _as_sequence_0(state: bytes) -> bytes:
    """A one-stream state with the sequence ids it names (the header's, each cell's) set to 0, which
    the reader ignores (it loads into the sequence it is given): one sequence's prompt state is
    then the same bytes from whichever sequence saved it. Unchanged when it does not parse."""
    ids: list[int] = []
    end = _stream_end(state, _HEADER + 4, 0, ids)
    if end is None:
        return state
    out = bytearray(state)
    for at in [4, *ids]:
        out[at : at + 4] = bytes(4)
    return bytes(out)


def _stream_end(state: bytes, offset: int, trailing: int, ids: list[int] | None = None) -> int | None:
    """Where the cells of the stream starting at `offset` (its cell count) end, for the cell
    layout (with or without the M-RoPE extension) after which come `trailing` empty streams and
    then the end, or a recurrent state of one cell; else None. `ids` receives where each cell's
    sequence id is."""
    for ext in (_CELL_EXT_BYTES, 0):
        found: list[int] = []
        try:
            end = _parse_stream(state, offset, ext, found)
        except (struct.error, ValueError):
            continue
        if end is None or state[end : end + 4 * trailing] != bytes(4 * trailing):
            continue
        rest = end + 4 * trailing
        if rest == len(state) or (rest + 4 <= len(state) and _U32.unpack_from(state, rest)[0] == 1):
            if ids is not None:
                ids.extend(found)
            return end
    return None


def _parse_stream(state: bytes, offset: int, ext: int, ids: list[int]) -> int | None:
    (cells,) = _U32.unpack_from(state, offset)
    offset += 4
    for _ in range(cells):  # pos, n_seq_id (1 for one sequence's state), [ext], seq_id
        (n_seq,) = _U32.unpack_from(state, offset + 4)
        if n_seq != 1:
            return None
        ids.append(offset + 8 + ext)
        offset += 8 + ext + 4
    v_trans, n_layer = struct.unpack_from("<II", state, offset)
    offset += 8
    if v_trans not in (0, 1) or not 0 < n_layer <= 4096:
        return None
    for _ in range(n_layer):  # keys: type, row size, rows
        k_type, row = struct.unpack_from("<iQ", state, offset)
        if not 0 <= k_type < 256 or row == 0:
            return None
        offset += 12 + cells * row
    for _ in range(n_layer):  # values: type, row size, rows (or element size, width, columns)
        if v_trans:
            v_type, size, width = struct.unpack_from("<iII", state, offset)
            offset += 12 + cells * size * width
        else:
            v_type, row = struct.unpack_from("<iQ", state, offset)
            offset += 12 + cells * row
        if not 0 <= v_type < 256:
            return None
    return offset if offset <= len(state) else None
