"""Teacher forcing: the model's next-token log-probabilities at every position of a sequence.

`Session` asks llama.cpp for the logits of the last token only (so it has no n_batch x n_vocab
logits buffer), and its context is built to output one row per batch. Comparing two models position
by position needs every position's distribution, so this module opens a second, short-lived
llama.cpp context on the session's loaded model (the weights are shared, not reloaded) with the
session's options, sized for the sequence, with room for `chunk` output rows. It decodes the tokens in chunks, marks
every token of a chunk for output, and turns the chunk's logits into log-probabilities with a
numerically stable log-softmax. Only one chunk x n_vocab block is alive at a time (64 x
248,320 floats = 64 MB at the default chunk). The session's own context is not touched.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace

import numpy as np

from edge_sql.runtime.llama.context import create_context
from edge_sql.runtime.session import Session

DEFAULT_CHUNK = 64
_CTX_ROUND = 256  # context sizes are rounded up to this many tokens


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of float32 logits, as float32: x - max - log(sum(exp(x - max))),
    with the sum taken in float64."""
    peak = logits.max(axis=-1, keepdims=True)
    shifted = logits - peak
    log_total = np.log(np.exp(shifted).sum(axis=-1, keepdims=True, dtype=np.float64))
    return (shifted - log_total.astype(np.float32)).astype(np.float32, copy=False)


def token_logprobs(
    session: Session, tokens: Sequence[int], *, chunk: int = DEFAULT_CHUNK, positions: Collection[int] | None = None
) -> Iterator[np.ndarray]:
    """Yield, chunk by chunk, float32 arrays of shape (n, n_vocab) with n <= `chunk`: row i holds
    log P(next token | the sequence up to and including token i), for every token in order, or
    only for `positions` when given (llama.cpp then computes no logits for the other tokens; a
    chunk without any of them yields an empty array).

    Raises ValueError for an empty sequence, a chunk below 1 or token ids outside the
    vocabulary, and ModelFileError when llama.cpp cannot create the context (out of memory).
    """
    tokens = [int(t) for t in tokens]
    if not tokens:
        raise ValueError("no tokens to evaluate")
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    n_vocab = session.n_vocab
    bad = [t for t in tokens if not 0 <= t < n_vocab]
    if bad:
        raise ValueError(f"token ids out of range: {bad[:5]}")
    chunk = min(chunk, len(tokens))
    wanted = None
    if positions is not None:
        wanted = np.zeros(len(tokens), dtype=bool)
        wanted[np.asarray(sorted(positions), dtype=np.int64)] = True  # IndexError past the end

    n_ctx = -(-len(tokens) // _CTX_ROUND) * _CTX_ROUND
    # the session's threads on its loaded weights; flash attention as llama.cpp decides
    options = replace(session.context.options, n_ctx=n_ctx, n_batch=chunk, n_ubatch=chunk, flash_attn=None)
    with create_context(
        session.context.loaded, options, n_outputs=chunk, what=f"a {n_ctx}-token context for teacher forcing"
    ) as ctx:
        for start in range(0, len(tokens), chunk):
            piece = tokens[start : start + chunk]
            flags = None if wanted is None else wanted[start : start + len(piece)]
            ctx.decode(piece, start, outputs="all" if flags is None else flags)
            n_out = len(piece) if flags is None else int(flags.sum())
            if n_out == 0:
                yield np.empty((0, n_vocab), dtype=np.float32)
                continue
            yield log_softmax(ctx.output_rows(n_out))
