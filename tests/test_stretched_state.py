"""Stretched states: a short context's llama.cpp state tiled to a long one, read back by llama.cpp.

The check that the format is understood: llama.cpp restores the stretched bytes and, asked for
its state again, writes back exactly those bytes (so it holds every stretched cell, at the
positions given), with flash attention on (V rows) and off (V transposed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sql.runtime import Session
from edge_sql.runtime.state.prefix_state import StateSnapshot
from edge_sql.runtime.state.stretched_state import stretch_snapshot

N_CTX = 512


@pytest.mark.parametrize("flash_attn", [True, False])
def test_llama_cpp_holds_a_stretched_state_as_written(tiny_gguf_fast: Path, flash_attn: bool) -> None:
    with Session(tiny_gguf_fast, n_ctx=N_CTX, n_threads=1, flash_attn=flash_attn) as session:
        session.eval(list(range(1000, 1024)))
        short = session.snapshot()
        assert stretch_snapshot(short, 24).state == short.state  # stretching to its own length: unchanged

        long = stretch_snapshot(short, 300)
        assert long is not None and len(long.tokens) == 300
        assert long.tokens[:24] == short.tokens and long.tokens[24:48] == short.tokens
        per_cell = len(stretch_snapshot(short, 25).state) - len(short.state)  # meta + a K and a V row per layer
        assert per_cell > 0 and len(long.state) == len(short.state) + 276 * per_cell

        assert session.restore(long)
        assert session.n_past == 300
        assert session.snapshot().state == long.state  # llama.cpp writes back what it was given

        session.eval([2000])  # a step at position 300 is accepted
        assert session.n_past == 301
        assert np.isfinite(session.logits()).all()


def test_a_state_of_another_shape_is_not_stretched(tiny_gguf_fast: Path) -> None:
    with Session(tiny_gguf_fast, n_ctx=N_CTX, n_threads=1) as session:
        session.eval(list(range(1000, 1016)))
        short = session.snapshot()
    assert stretch_snapshot(short, 8) is None  # shorter than it is
    wrong_count = StateSnapshot(tokens=short.tokens[:-1], state=short.state, logits=short.logits)
    assert stretch_snapshot(wrong_count, 100) is None  # cells do not match the tokens
    truncated = StateSnapshot(tokens=short.tokens, state=short.state[:200], logits=short.logits)
    assert stretch_snapshot(truncated, 100) is None  # ends inside the KV cells
    bad_magic = StateSnapshot(tokens=short.tokens, state=b"\0" * 4 + short.state[4:], logits=short.logits)
    assert stretch_snapshot(bad_magic, 100) is None
