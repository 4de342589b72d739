"""The statistics of an answer as one typed record, and the one place that writes them out.

`EpisodeStats` is what `EpisodeResult.stats` holds: what the episode measured (`EpisodeFigures`:
the session's `Timings` over the episode, the transcript and the work done), how the model was
loaded (`llama_settings`, `tuning`) and, for a vote, how it went (`VoteStats`). `to_json` is the
`stats` object of `edge-sql run --json`, of serve's answers and of the Python API's JSON;
`EpisodeFigures.record_fields` is the bench record's share. Each name users see is spelled here
once.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TypedDict, Unpack

from edge_sql.runtime.options import SpeculateMode
from edge_sql.runtime.records import Timings


@dataclass(frozen=True)
class GrammarAudit:
    """With `run_episode(audit=True)`: grammar steps checked, and of them those where the grammar
    overruled the model's own top token."""

    steps: int
    overruled: int


class FigureFields(TypedDict, total=False):
    """`EpisodeFigures.of`'s keywords: the figures but the timings."""

    transcript_tokens: int
    context_tokens: int
    token_budget: int
    rounds: int
    calls: int
    wall_s: float
    tools_s: float
    speculate: SpeculateMode
    audit: GrammarAudit | None


@dataclass
class EpisodeFigures:
    """What one episode measured. `timings` is the session's since the episode's reset (a copy);
    `wall_s` and `tools_s` are kept as shown (4 decimals)."""

    timings: Timings = field(default_factory=Timings)
    transcript_tokens: int = 0
    context_tokens: int = 0
    token_budget: int = 0
    rounds: int = 0
    calls: int = 0
    wall_s: float = 0.0
    tools_s: float = 0.0
    speculate: SpeculateMode = "off"
    audit: GrammarAudit | None = None

    @classmethod
    def of(cls, timings: Timings, **fields: Unpack[FigureFields]) -> EpisodeFigures:
        """The figures with a copy of `timings` (the session goes on adding to its own)."""
        return cls(timings=copy.deepcopy(timings), **fields)

    @property
    def decode_tok_s(self) -> float:
        return round(self.timings.decode_tok_s, 2)

    def to_json(self) -> dict[str, object]:  # JSON: the runtime's counts as its records give them
        t = self.timings
        return {
            "prompt_tokens_evaluated": t.prompt_tokens,
            "prefix_tokens_restored": t.restored_tokens,
            "generated_tokens": t.generated_tokens,
            "forced_tokens": t.forced_tokens,
            "transcript_tokens": self.transcript_tokens,
            "context_tokens": self.context_tokens,
            "token_budget": self.token_budget,
            "rounds": self.rounds,
            "calls": self.calls,
            "wall_s": self.wall_s,
            "prefill_s": round(t.prompt_s, 4),
            "prefill_tok_s": round(t.prompt_tok_s, 2),
            "generate_s": round(t.generate_s, 4),
            "decode_tok_s": self.decode_tok_s,
            "tools_s": self.tools_s,
            # speculative decoding: drafts evaluated, accepted (in the transcript, counted in
            # generated_tokens) and rolled back (evaluated, then removed: in no count above)
            "speculate": self.speculate,
            "draft_tokens": t.draft_tokens,
            "draft_tokens_accepted": t.accepted_draft_tokens,
            "draft_tokens_rolled_back": t.rolled_back_tokens,
            "drafts": {source: counts.to_json() for source, counts in t.drafts.items()},
            # tokens per thread count of each phase: fewer than the session's while the machine was busy
            "threads": t.threads_json(),
            **(
                {"grammar_steps_audited": self.audit.steps, "grammar_overruled": self.audit.overruled}
                if self.audit is not None
                else {}
            ),
        }

    def record_fields(self) -> dict[str, object]:
        """The bench record's counts and seconds (its own names, seconds not rounded)."""
        t = self.timings
        return {
            "wall_s": self.wall_s,
            "prompt_tokens": t.prompt_tokens,
            "prefix_tokens_restored": t.restored_tokens,
            "prompt_s": t.prompt_s,
            "generated_tokens": t.generated_tokens,
            "generate_s": t.generate_s,
            "transcript_tokens": self.transcript_tokens,
            "draft_tokens": t.draft_tokens,
            "draft_tokens_accepted": t.accepted_draft_tokens,
            "draft_tokens_rolled_back": t.rolled_back_tokens,
            "drafts": {source: counts.to_json() for source, counts in t.drafts.items()},
        }


@dataclass
class VoteEpisode:
    """One episode of a vote: its SQL, its group (numbered in order of first appearance; None: it
    did not vote, `reason` says why) and its failed `run_query` calls; with the Agent's votes also
    its seed, how it stopped and its wall time (in the JSON with `runs`: the bench's records)."""

    sql: str | None
    group: int | None
    failed_queries: int
    reason: str | None = None
    seed: int | None = None
    stop: str | None = None
    wall_s: float | None = None

    def to_json(self, *, runs: bool = False) -> dict[str, object]:
        data: dict[str, object] = {"sql": self.sql, "group": self.group, "failed_queries": self.failed_queries}
        if self.reason is not None:
            data["reason"] = self.reason
        if runs and self.seed is not None:
            data.update(seed=self.seed, stop=self.stop, wall_s=self.wall_s)
        return data


@dataclass
class VoteStats:
    """How a vote went (`agent.majority_vote.choose`): `k` episodes, the `chosen` one's index, `agreed`
    (episodes in its group), `voters`, `agreement` (agreed / voters; 0.0 with no voter) and
    `finished` (episodes that ran to their end); an Agent's vote also the `seeds`, the whole vote's
    `wall_s` and the prompt tokens all its episodes evaluated (`choose` given how they ran).
    `to_json(runs=True)` (the bench's records) adds each episode's seed, stop and wall time."""

    k: int
    chosen: int
    agreed: int
    voters: int
    agreement: float
    finished: int
    episodes: list[VoteEpisode] = field(default_factory=list)
    seeds: list[int] | None = None
    wall_s: float | None = None
    prompt_tokens_evaluated: int | None = None

    def to_json(self, *, runs: bool = False) -> dict[str, object]:
        data: dict[str, object] = {
            "k": self.k,
            "chosen": self.chosen,
            "agreed": self.agreed,
            "voters": self.voters,
            "agreement": self.agreement,
            "finished": self.finished,
            "episodes": [e.to_json(runs=runs) for e in self.episodes],
        }
        if self.seeds is not None:
            data["seeds"] = list(self.seeds)
        if self.wall_s is not None:
            data["wall_s"] = self.wall_s
        if self.prompt_tokens_evaluated is not None:
            data["prompt_tokens_evaluated"] = self.prompt_tokens_evaluated
        return data


@dataclass
class EpisodeStats:
    """The statistics of an answer. `figures` is None for a question that never ran (an error
    result: its JSON `stats` is `{}`); `llama_settings` and `tuning` with the Agent's episodes
    (`run_episode(tuning=...)`), `vote` from a vote (`majority_vote.choose`): complete when built."""

    figures: EpisodeFigures | None = None
    llama_settings: str | None = None
    tuning: str | None = None
    vote: VoteStats | None = None

    @property
    def measured(self) -> EpisodeFigures:
        """The figures, or zeros for a question that never ran (what the summaries show then)."""
        return self.figures if self.figures is not None else EpisodeFigures()

    @property
    def wall_s(self) -> float:
        """Seconds the answer took (a vote's: the whole vote; 0.0 for a question that never ran)."""
        if self.vote is not None and self.vote.wall_s is not None:
            return self.vote.wall_s
        return self.measured.wall_s

    @property
    def generated_tokens(self) -> int:
        """Tokens the model wrote (the JSON's `generated_tokens`)."""
        return self.measured.timings.generated_tokens

    @property
    def decode_tok_s(self) -> float:
        """Tokens written per second of decoding (the JSON's `decode_tok_s`)."""
        return self.measured.decode_tok_s

    def to_json(self) -> dict[str, object]:
        """The `stats` object users see: the figures' fields, then the settings, then `vote`."""
        data = self.figures.to_json() if self.figures is not None else {}
        if self.llama_settings is not None:
            data["llama_settings"] = self.llama_settings
        if self.tuning is not None:
            data["tuning"] = self.tuning
        if self.vote is not None:
            data["vote"] = self.vote.to_json()
        return data
