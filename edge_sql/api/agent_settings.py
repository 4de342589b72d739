"""What shapes an Agent and its episodes, and the one place `vote="auto"` is resolved.

Why a module of its own, importing nothing heavy: the command line, the bench and the Agent's
plan all read it, and the command line loads without llama.cpp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

VoteSetting = int | Literal["auto"] | None  # a vote of K episodes, "auto" (the plan's K) or none


@dataclass(frozen=True)
class VoteChoice:
    """A vote setting resolved: `k` episodes (None: one episode, no vote) and, when it was
    "auto", the line that says why (`line`; None for a K or no vote the caller named)."""

    k: int | None
    line: str | None = None

    @property
    def auto(self) -> bool:
        """Whether the K came from "auto"."""
        return self.line is not None


def resolve_vote(vote: VoteSetting, auto: Callable[[], tuple[int, str]]) -> VoteChoice:
    """`vote` as the episodes that answer: the one function that knows what "auto" means, for
    the plan, `run`, `serve` and the bench. `auto` gives this machine's K and why (the plan's
    calibration, `runtime/tuning/auto_vote.py`; the bench's smallest over its variants); it is
    called only for "auto", whose K of 1 is no vote."""
    if vote != "auto":
        return VoteChoice(vote)
    k, line = auto()
    return VoteChoice(k if k >= 2 else None, line)
