"""Fidelity without labels: how close a variant's next-token distributions are to BF16's.

Both models are teacher-forced on the same token sequence (a transcript the BF16 model
produced). Where the model wrote the next token itself (its thinking, tool calls and answers,
not the system prompt, questions and tool results it was given), the full distributions are
compared: KL(P_ref || P_variant) = sum p_ref * (log p_ref - log p_variant), and whether the
two argmax tokens agree. Sums are kept (not means) so results over many transcripts combine
exactly.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from edge_sql.runtime import Session
from edge_sql.runtime.probes.teacher_forcing import DEFAULT_CHUNK, token_logprobs


@dataclass(frozen=True)
class FidelityStats:
    """Totals over the positions of one or more sequences."""

    positions: int
    kl_sum: float
    kl_max: float
    top1_agree: int


def kl_rows(ref_logprobs: np.ndarray, var_logprobs: np.ndarray) -> np.ndarray:
    """KL(P_ref || P_var) for each row of two (n, n_vocab) log-probability arrays, in float64.
    Identical rows give exactly 0."""
    out = np.empty(ref_logprobs.shape[0], dtype=np.float64)
    for i, (ref, var) in enumerate(zip(ref_logprobs, var_logprobs)):
        ref64 = ref.astype(np.float64)
        out[i] = float(np.dot(np.exp(ref64), ref64 - var.astype(np.float64)))
    return out


def generated_targets(spans: Sequence[Sequence[int]], n_tokens: int) -> list[int]:
    """The positions whose next-token distribution produced a generated token: for each span
    [start, end) of tokens the model wrote, positions start-1 .. end-2 (within `n_tokens`)."""
    return sorted({p - 1 for start, end in spans for p in range(max(start, 1), min(end, n_tokens))})


def compare_on_tokens(
    reference: Session,
    variant: Session,
    tokens: Sequence[int],
    *,
    chunk: int = DEFAULT_CHUNK,
    positions: Collection[int] | None = None,
) -> FidelityStats:
    """Teacher-force `tokens` on both sessions and compare the distributions at `positions`
    (the distribution after token i predicts token i + 1), or at every position when None."""
    if reference.n_vocab != variant.n_vocab:
        raise ValueError(f"the models' vocabularies differ ({reference.n_vocab} vs {variant.n_vocab} tokens)")
    if positions is not None:
        positions = sorted(set(positions))
        if not positions:
            return FidelityStats(positions=0, kl_sum=0.0, kl_max=0.0, top1_agree=0)
        tokens = list(tokens)[: positions[-1] + 1]  # nothing after the last position compared
    positions_done, kl_sum, kl_max, agree = 0, 0.0, 0.0, 0
    pairs = zip(
        token_logprobs(reference, tokens, chunk=chunk, positions=positions),
        token_logprobs(variant, tokens, chunk=chunk, positions=positions),
    )
    for ref, var in pairs:
        if not len(ref):
            continue
        kl = kl_rows(ref, var)
        positions_done += len(kl)
        kl_sum += float(kl.sum())
        kl_max = max(kl_max, float(kl.max()))
        agree += int(np.count_nonzero(ref.argmax(axis=1) == var.argmax(axis=1)))
    return FidelityStats(positions=positions_done, kl_sum=kl_sum, kl_max=kl_max, top1_agree=agree)
