"""Value transforms applied to Qwen3.5 tensors on their way into GGUF.

Each transform takes a float32 array (rows first, as in the checkpoint) and the model's
dimensions, and returns the array llama.cpp expects. `ROW_WISE` transforms can be applied to
any block of whole rows, so large tensors can be streamed in pieces; the others need the
whole tensor (they are only used on small linear-attention tensors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np


class LinearAttentionDims(Protocol):
    @property
    def linear_k_heads(self) -> int: ...
    @property
    def linear_v_heads(self) -> int: ...
    @property
    def linear_k_head_dim(self) -> int: ...
    @property
    def linear_v_head_dim(self) -> int: ...


Transform = Callable[[np.ndarray, LinearAttentionDims], np.ndarray]


def plus_one(x: np.ndarray, dims: LinearAttentionDims) -> np.ndarray:
    """Zero-centred RMSNorm weight (applied as 1 + w) -> plain scale."""
    return x + np.float32(1.0)


def neg_exp(x: np.ndarray, dims: LinearAttentionDims) -> np.ndarray:
    """A_log -> A = -exp(A_log), the decay rate llama.cpp reads directly."""
    return -np.exp(x)


def squeeze_conv(x: np.ndarray, dims: LinearAttentionDims) -> np.ndarray:
    """Depth-wise conv1d weight [channels, 1, kernel] -> [channels, kernel]."""
    if x.ndim == 3 and x.shape[1] == 1:
        return x[:, 0, :]
    return x


def _tile_v_heads(x: np.ndarray, axis: int, dims: LinearAttentionDims, head_dim: int) -> np.ndarray:
    """Reorder value heads from grouped-by-key-head to tiled order along `axis`.

    HF stores value head j of key group g at g * r + j (r = value heads per key head);
    ggml broadcasts key heads over value heads in tiled order, j * n_k + g.
    """
    n_k, n_v = dims.linear_k_heads, dims.linear_v_heads
    if n_k == n_v:
        return x
    r = n_v // n_k
    axis = axis % x.ndim
    shape = x.shape
    split = shape[:axis] + (n_k, r, head_dim) + shape[axis + 1 :]
    return np.swapaxes(x.reshape(split), axis, axis + 1).reshape(shape)


def tile_v_rows(x: np.ndarray, dims: LinearAttentionDims) -> np.ndarray:
    """Rows are value heads of `linear_v_head_dim` each (in_proj_z)."""
    return _tile_v_heads(x, 0, dims, dims.linear_v_head_dim)


def tile_v_head_rows(x: np.ndarray, dims: LinearAttentionDims) -> np.ndarray:
    """One row (or element) per value head (in_proj_a, in_proj_b, A_log, dt_bias)."""
    return _tile_v_heads(x, 0, dims, 1)


def tile_qkv_v_rows(x: np.ndarray, dims: LinearAttentionDims) -> np.ndarray:
    """Rows are [q | k | v]: only the value part is reordered (in_proj_qkv, conv1d)."""
    qk = 2 * dims.linear_k_heads * dims.linear_k_head_dim
    return np.concatenate([x[:qk], tile_v_rows(x[qk:], dims)], axis=0)


def tile_v_cols(x: np.ndarray, dims: LinearAttentionDims) -> np.ndarray:
    """Columns are value heads (out_proj's input side)."""
    return _tile_v_heads(x, -1, dims, dims.linear_v_head_dim)


TRANSFORMS: dict[str, Transform] = {
    "plus_one": plus_one,
    "neg_exp": neg_exp,
    "squeeze_conv": squeeze_conv,
    "tile_v_rows": tile_v_rows,
    "tile_v_head_rows": tile_v_head_rows,
    "tile_qkv_v_rows": tile_qkv_v_rows,
    "tile_v_cols": tile_v_cols,
}

ROW_WISE = frozenset({"plus_one", "neg_exp", "tile_v_cols"})
