"""Fidelity without labels: how close a variant's next-token distributions are to BF16's.

Both models are teacher-forced on the same token sequence (a transcript the BF16 model
produced); at every position the full distributions are compared: KL(P_ref || P_variant) =
sum p_ref * (log p_ref - log p_variant), and whether the two argmax tokens agree. Sums are
kept (not means) so results over many transcripts combine exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edge_sql.runtime import Session
from edge_sql.runtime.teacher_forcing import DEFAULT_CHUNK, token_logprobs


@dataclass(frozen=True)
class FidelityStats:
    """Totals over the positions of one or more sequences."""

    positions: int
    kl_sum: float
    kl_max: float
    top1_agree: int

    @property
    def kl_mean(self) -> float:
        return self.kl_sum / self.positions if self.positions else 0.0

    @property
    def top1(self) -> float:
        return self.top1_agree / self.positions if self.positions else 0.0


def kl_rows(ref_logprobs: np.ndarray, var_logprobs: np.ndarray) -> np.ndarray:
    """KL(P_ref || P_var) for each row of two (n, n_vocab) log-probability arrays, in float64.
    Identical rows give exactly 0."""
    out = np.empty(ref_logprobs.shape[0], dtype=np.float64)
    for i, (ref, var) in enumerate(zip(ref_logprobs, var_logprobs)):
        ref64 = ref.astype(np.float64)
        out[i] = float(np.dot(np.exp(ref64), ref64 - var.astype(np.float64)))
    return out


def compare_on_tokens(reference: Session, variant: Session, tokens: Sequence[int], *, chunk: int = DEFAULT_CHUNK) -> FidelityStats:
    """Teacher-force `tokens` on both sessions and compare the distributions at every position."""
    if reference.n_vocab != variant.n_vocab:
        raise ValueError(f"the models' vocabularies differ ({reference.n_vocab} vs {variant.n_vocab} tokens)")
    positions, kl_sum, kl_max, agree = 0, 0.0, 0.0, 0
    for ref, var in zip(token_logprobs(reference, tokens, chunk=chunk), token_logprobs(variant, tokens, chunk=chunk)):
        kl = kl_rows(ref, var)
        positions += len(kl)
        kl_sum += float(kl.sum())
        kl_max = max(kl_max, float(kl.max()))
        agree += int(np.count_nonzero(ref.argmax(axis=1) == var.argmax(axis=1)))
    return FidelityStats(positions=positions, kl_sum=kl_sum, kl_max=kl_max, top1_agree=agree)
