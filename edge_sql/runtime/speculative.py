"""Speculative decoding: who drafts, how many tokens, and whether drafting still pays.

`Session.generate` verifies drafts exactly (see its docstring): the tokens it appends do not
depend on what is drafted, only how many decode calls they cost. This module decides what to
draft. A `Drafter` proposes tokens for a context (prompt lookup here; the model's MTP head in
runtime/mtp.py, behind the same protocol). The `Speculator` asks its drafters in priority
order, adapts how many tokens each may propose (more after a fully accepted draft, fewer
after a rejection), and counts drafted, accepted and rolled-back tokens per source.

Cost model (for `auto`): verifying p drafts evaluates p + 1 tokens in one batch. The session
measures what that batch cost in single-token decodes (its time over the running mean of a
single-token decode), since it depends on the model and machine: on the 2B shape a batch of
9 costs little more than one decode (the weights are read once per batch), on a 135M model
it costs several (benchmarks/results/speculative.md). Before a single decode has been timed,
`1 + cost_per_token * p` stands in. If a of the p drafts are accepted, the batch produced
a + 1 tokens that would otherwise have cost a + 1 decodes, so it saved `a + 1 - cost`
decodes (negative: a loss). `auto` keeps a running mean of that saving per source and turns
a source off for a while when it is negative, then tries it again (the text may have
changed, e.g. thinking -> SQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from edge_sql.errors import EdgeSqlError

SPECULATE_MODES = ("off", "lookup", "auto", "mtp")
DEFAULT_DRAFT_MAX = 8
# Extra cost of one more token in a verify batch, in single-token decodes (CPU, small
# batches): measured on this project's machines in benchmarks/results/speculative.md.
DEFAULT_COST_PER_TOKEN = 0.1
_EMA = 0.25           # weight of the newest batch in a source's running saving
_MIN_BATCHES = 4      # batches before `auto` judges a source
_COOLDOWN_STEPS = 64  # sampling steps a losing source stays off before it is tried again


class Drafter(Protocol):
    """A source of draft tokens. `draft` must be cheap compared with a decode."""

    name: str

    def draft(self, context: Sequence[int], k: int) -> list[int]:
        """Up to `k` tokens likely to follow `context` (the whole context so far); [] for none."""
        ...

    def observe(self, accepted: int, proposed: int) -> None:
        """How many of the last `proposed` draft tokens were accepted."""
        ...

    def reset(self) -> None:
        """The context was emptied or replaced: forget it."""
        ...


@dataclass
class DraftCounts:
    """Draft tokens of one source: evaluated in verify batches, accepted, rolled back."""

    drafted: int = 0   # draft tokens evaluated (each verify batch also holds one real token)
    accepted: int = 0  # of which the model's own choice agreed: now part of the context
    batches: int = 0   # verify batches

    @property
    def rolled_back(self) -> int:
        """Drafted but rejected: evaluated, then removed from llama.cpp's memory."""
        return self.drafted - self.accepted

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def add(self, other: DraftCounts) -> None:
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.batches += other.batches

    def to_json(self) -> dict[str, int | float]:
        return {"drafted": self.drafted, "accepted": self.accepted, "rolled_back": self.rolled_back,
                "batches": self.batches, "acceptance": round(self.acceptance, 4)}


@dataclass
class _Source:
    drafter: Drafter
    k: int
    saving: float = 0.0   # running mean saving per batch, in decodes
    batches: int = 0      # batches since the source was last (re)enabled
    off_until: int = 0    # step before which `auto` keeps the source off


@dataclass
class Speculator:
    """Drafters in priority order, their adaptive draft lengths, and `auto`'s bookkeeping."""

    drafters: Sequence[Drafter]
    max_k: int = DEFAULT_DRAFT_MAX
    auto: bool = False
    cost_per_token: float = DEFAULT_COST_PER_TOKEN
    adaptive: bool = True  # False: always ask for max_k tokens (benchmarks of fixed batch sizes)
    _sources: dict[str, _Source] = field(init=False, default_factory=dict)
    _step: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.max_k < 1:
            raise ValueError("max_k must be >= 1")
        self.reset()

    @property
    def names(self) -> list[str]:
        return [drafter.name for drafter in self.drafters]

    def reset(self) -> None:
        """A new context: drafters forget it, draft lengths and `auto`'s judgement start over."""
        self._step = 0
        self._sources = {}
        for drafter in self.drafters:
            drafter.reset()
            self._sources[drafter.name] = _Source(drafter, k=min(4, self._cap(drafter)) if self.adaptive
                                                  else self._cap(drafter))

    def _cap(self, drafter: Drafter) -> int:
        """The most tokens `drafter` may propose: the session's limit, or the drafter's own
        `max_k` when it has one (each MTP draft token costs a decode of the head)."""
        return min(self.max_k, getattr(drafter, "max_k", None) or self.max_k)

    def is_on(self, name: str) -> bool:
        """Whether `auto` currently lets source `name` draft."""
        return self._sources[name].off_until <= self._step

    def propose(self, context: Sequence[int], room: int) -> tuple[str, list[int]] | None:
        """(source, drafts) for the next verify batch, at most `room` tokens; None: no draft."""
        self._step += 1
        if room <= 0:
            return None
        for name, source in self._sources.items():
            if self.auto and not self.is_on(name):
                continue
            drafts = source.drafter.draft(context, min(source.k, room))[:min(source.k, room)]
            if drafts:
                return source.drafter.name, [int(t) for t in drafts]
        return None

    def record(self, name: str, proposed: int, accepted: int, cost: float | None = None) -> None:
        """The outcome of one verify batch of `name`'s `proposed` drafts; `cost`: what the
        batch cost in single-token decodes, when measured."""
        source = self._sources[name]
        source.drafter.observe(accepted, proposed)
        if self.adaptive and accepted >= proposed >= source.k:
            source.k = min(self._cap(source.drafter), 2 * source.k)
        elif self.adaptive and accepted < proposed:
            source.k = max(1, accepted + 1)
        saving = accepted + 1 - (cost if cost is not None else 1 + self.cost_per_token * proposed)
        source.saving = saving if source.batches == 0 else (1 - _EMA) * source.saving + _EMA * saving
        source.batches += 1
        if self.auto and source.batches >= _MIN_BATCHES and source.saving < 0:
            source.off_until = self._step + _COOLDOWN_STEPS
            source.batches, source.saving = 0, 0.0


def make_drafters(mode: str) -> list[Drafter]:
    """The drafters behind a `--speculate` mode ([] for "off").

    "mtp" drafts with the model's MTP head and "auto" adds it after lookup: its drafter reads
    the session's llama.cpp context, so `Session` appends it once that exists.
    """
    from edge_sql.runtime.lookup import LookupDrafter

    if mode not in SPECULATE_MODES:
        raise EdgeSqlError(f"unknown speculation mode {mode!r}: use one of {', '.join(SPECULATE_MODES)}")
    if mode in ("off", "mtp"):
        return []
    return [LookupDrafter()]  # "lookup" and "auto" (auto: + MTP when the file has a head)
