"""Speculative decoding behind one seam: who drafts, how many tokens, verifying them, rolling back.

`Session.generate` verifies drafts exactly: at a sampling step with a token pending, the
speculator may propose drafts d1..dk. The pending token(s) and the drafts are decoded in one
batch with logits at every draft position. Then the loop runs exactly as without drafts,
except that a step takes its logits from that batch instead of decoding: the same checks
(cancel, room, grammar, forced tokens), the same grammar mask, the same sampler and random
numbers. A sampled token equal to the next draft is already evaluated (accepted); at the first
one that is not, the rest of the drafts leave llama.cpp's memory (`llama_memory_seq_rm`:
attention cells, and the recurrent state falls back to its `n_rs_seq` snapshot) and the
sampled token stays pending, as usual. The grammar only ever consumes appended tokens. So the
appended tokens are the ones non-speculative decoding appends for the same logits (greedy:
token-identical up to batch-vs-single rounding; sampling: the same distribution and, for a
seed, the same draws); drafts only change how many decodes they cost.

A `Drafter` proposes tokens for a context (prompt lookup in runtime/speculation/lookup.py; the model's
MTP head in runtime/speculation/mtp.py, behind the same protocol). The `Speculator` asks its drafters in
priority order and adapts how many tokens each may propose (more after a fully accepted draft,
fewer after a rejection). The `Verifier` decodes a batch of drafts in the session's context,
follows the tokens the session samples, rolls the rejected drafts back out of llama.cpp's
memory and counts drafted and accepted tokens per source (`DraftCounts`). `make_verifier`
builds all of it for a session's options.

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

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from edge_sql.runtime.llama.context import DecodeContext
from edge_sql.runtime.options import DEFAULT_DRAFT_MAX, SessionOptions, uses_mtp
from edge_sql.runtime.records import MTP_PREFIX, DraftCounts, Timings, buffer_role
from edge_sql.runtime.speculation.lookup import LookupDrafter
from edge_sql.runtime.speculation.mtp import MTPDrafter

# Extra cost of one more token in a verify batch, in single-token decodes (CPU, small
# batches): measured on this project's machines in benchmarks/results/speculative.md.
DEFAULT_COST_PER_TOKEN = 0.1
_EMA = 0.25  # weight of the newest batch in a source's running saving
_MIN_BATCHES = 4  # batches before `auto` judges a source
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
class _Source:
    drafter: Drafter
    k: int
    saving: float = 0.0  # running mean saving per batch, in decodes
    batches: int = 0  # batches since the source was last (re)enabled
    off_until: int = 0  # step before which `auto` keeps the source off


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
            self._sources[drafter.name] = _Source(
                drafter, k=min(4, self._cap(drafter)) if self.adaptive else self._cap(drafter)
            )

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
            drafts = source.drafter.draft(context, min(source.k, room))[: min(source.k, room)]
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


@dataclass
class Proposal:
    """Drafts of one source for the next verify batch, and the seconds drafting them took."""

    source: str
    drafts: list[int]
    seconds: float


@dataclass
class _Batch:
    """A verify batch in flight: drafts at positions base.., logits[i] after i accepted drafts."""

    source: str
    drafts: list[int]
    logits: list[np.ndarray]
    base: int
    seconds: float  # drafting it and the verify batch's decode
    accepted: int = 0


class Verifier:
    """The verify state of one context: the batch in flight, its rollback, the draft counts.

    It also keeps the running mean of a single-token decode (`time_single_decode`), the unit
    of the speculator's cost model, and closes the drafters `make_verifier` made for it (an MTP
    drafter's context reads the target's: freed before it).
    """

    def __init__(
        self, context: DecodeContext, speculator: Speculator, draft_max: int, owned: Sequence[MTPDrafter] = ()
    ) -> None:
        self._context = context
        self.speculator = speculator
        self.draft_max = draft_max
        self._owned = list(owned)
        self._batch: _Batch | None = None
        self._single_decode_s: float | None = None

    @property
    def active(self) -> bool:
        """A verify batch is in flight (drafts decoded, not yet all accepted or rolled back)."""
        return self._batch is not None

    @property
    def buffers(self) -> dict[str, int]:
        """What the drafters' own contexts allocated ("MTP CPU KV", ...), model files left out."""
        return {
            MTP_PREFIX + kind: size
            for drafter in self._owned
            for kind, size in drafter.buffers.items()
            if buffer_role(kind) != "mapped"
        }

    def time_single_decode(self, seconds: float) -> None:
        mean = self._single_decode_s
        self._single_decode_s = seconds if mean is None else 0.9 * mean + 0.1 * seconds

    def propose(self, tokens: Sequence[int], room: int) -> Proposal | None:
        """The speculator's drafts for `tokens` within `room` (one place is the real token's)."""
        started = time.perf_counter()
        proposal = self.speculator.propose(tokens, min(room - 1, self.draft_max))
        if proposal is None:
            return None
        return Proposal(*proposal, seconds=time.perf_counter() - started)

    def decode(self, pending: list[int], start: int, proposal: Proposal) -> np.ndarray:
        """Decode `pending` tokens at `start` and the drafts after them in one batch, with logits
        after the last pending token and after each draft; the logits after the pending tokens."""
        batch = pending + proposal.drafts
        outputs = np.zeros(len(batch), dtype=bool)
        outputs[len(pending) - 1 :] = True
        tick = time.perf_counter()
        self._context.decode(batch, start, outputs=outputs)
        seconds = time.perf_counter() - tick
        logits = [self._context.logits(i) for i in range(len(pending) - 1, len(batch))]  # batch indices
        self._batch = _Batch(
            proposal.source, proposal.drafts, logits, base=start + len(pending), seconds=proposal.seconds + seconds
        )
        return logits[0]

    def follow(self, token: int, timings: Timings) -> np.ndarray | None:
        """The session appended `token`: the logits after it when it is the next draft (already
        evaluated), else None (it is pending). Ends the batch at a miss or its last draft."""
        batch = self._batch
        assert batch is not None  # called only while a batch is active
        logits = None
        if token == batch.drafts[batch.accepted]:
            batch.accepted += 1
            logits = batch.logits[batch.accepted]
        if logits is None or batch.accepted == len(batch.drafts):
            self.end(timings)
        return logits

    def end(self, timings: Timings) -> None:
        """Remove the drafts not accepted from llama.cpp's memory; count the batch in `timings`."""
        batch, self._batch = self._batch, None
        assert batch is not None  # called only while a batch is active
        rejected = len(batch.drafts) - batch.accepted
        if rejected:
            start = batch.base + batch.accepted
            if not self._context.remove_from(start):
                raise RuntimeError(f"llama.cpp could not roll back {rejected} draft tokens from position {start}")
        timings.drafts.setdefault(batch.source, DraftCounts()).record(batch.accepted, len(batch.drafts))
        cost = batch.seconds / self._single_decode_s if self._single_decode_s else None
        self.speculator.record(batch.source, len(batch.drafts), batch.accepted, cost)

    def close(self) -> None:
        for drafter in self._owned:
            drafter.close()
        self._owned = []


def make_verifier(options: SessionOptions, target: DecodeContext) -> Verifier | None:
    """The drafters behind `options.speculate` (resolved: "off" when no draft fits), in a
    speculator and verifier for `target`; None when speculation is off.

    "lookup" drafts by prompt lookup; "mtp" drafts with the model's MTP head; "auto" asks lookup
    first and adds the MTP head when the file has one (its drafter reads `target`'s hidden
    states), and turns a source off while it does not pay.
    """
    if options.speculate == "off" or not options.draft_max:
        return None
    drafters: list[Drafter] = [LookupDrafter()] if options.speculate in ("lookup", "auto") else []
    owned = [MTPDrafter(target)] if options.mtp and uses_mtp(options.speculate) else []
    drafters += owned  # after lookup: drafts when no earlier text matches
    if not drafters:
        return None
    speculator = Speculator(drafters, max_k=options.draft_max, auto=options.speculate == "auto")
    return Verifier(target, speculator, options.draft_max, owned)
