"""Lookup in real episodes (bench_speculative.py's part 2): greedy episodes without and with
lookup, their timings and the acceptance per segment kind (think, tool calls, final SQL)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edge_sql.agent import Budget, load_prompt
from edge_sql.api import Agent
from edge_sql.runtime import Session
from edge_sql.runtime.options import SessionSettings, SpeculateMode
from edge_sql.runtime.speculation.lookup import LookupDrafter

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "edge_sql" / "data"
QUESTIONS = [
    ("chinook", "How many rows does the Album table have?"),
    ("northwind", "What is the largest UnitPrice in Products?"),
    ("chinook", "Show the Name of every row of Artist."),
    ("northwind", "How many rows are in the Customers table?"),
    ("chinook", "What is the largest Milliseconds in Track?"),
    ("northwind", "Show the CompanyName of every row of Shippers."),
]
KINDS = ("think", "calls", "final_sql")


class RecordingLookup(LookupDrafter):
    """Prompt lookup that notes where each draft was made and how much of it was accepted."""

    def reset(self) -> None:
        super().reset()
        self.records: list[tuple[int, int, int]] = []  # (context length, proposed, accepted)
        self._at = 0

    def draft(self, context: Sequence[int], k: int) -> list[int]:
        self._at = len(context)
        return super().draft(context, k)

    def observe(self, accepted: int, proposed: int) -> None:
        self.records.append((self._at, proposed, accepted))


# ---- 2. episodes -----------------------------------------------------------------------------


@dataclass
class KindCounts:
    generated: int = 0
    batches: int = 0
    drafted: int = 0
    accepted: int = 0

    def line(self) -> str:
        share = self.accepted / self.drafted if self.drafted else 0.0
        saved = self.accepted / self.generated if self.generated else 0.0
        return f"{self.generated} | {self.batches} | {self.drafted} | {self.accepted} | {share:.1%} | {saved:.1%}"


@dataclass
class Tally:
    kinds: dict[str, KindCounts] = field(default_factory=lambda: {k: KindCounts() for k in KINDS})

    def add(self, kind: str, **counts: int) -> None:
        target = self.kinds[kind]
        for name, value in counts.items():
            setattr(target, name, getattr(target, name) + value)


def token_kinds(
    session: Session, tokens: Sequence[int], spans: Sequence[tuple[int, int]], forced: bool
) -> list[str | None]:
    """The segment kind of each model-written token (None: prompt or tool text)."""
    prompt = load_prompt()
    think_end = prompt.chat.think_end.encode()
    offsets, total = [], 0
    for token in tokens:
        offsets.append(total)
        total += len(session.token_bytes(token))
    text = b"".join(session.token_bytes(t) for t in tokens)
    opener = (prompt.chat.open_turn("assistant") + prompt.chat.assistant_prefix).encode()
    turns = []
    at = text.find(opener)
    while at >= 0:
        turns.append(at)
        at = text.find(opener, at + 1)
    kinds: list[str | None] = [None] * len(tokens)
    for start, end in spans:
        for i in range(start, end):
            turn = max(t for t in turns if t <= offsets[i])
            end_think = text.find(think_end, turn)
            if end_think < 0 or offsets[i] < end_think + len(think_end):
                kinds[i] = "think"
            else:
                kinds[i] = "final_sql" if forced and turn == turns[-1] else "calls"
    return kinds


def _session(agent: Agent) -> Session:
    session = agent.session
    assert session is not None  # one session, open
    return session


def episodes(model: Path, *, name: str, n_ctx: int, budget: Budget, threads: int, rounds: int) -> dict:
    """Greedy episodes (through an Agent per mode) alternately without and with lookup: timings
    and per-kind acceptance."""
    timing = {
        mode: {"generate_s": 0.0, "decode_s": 0.0, "tokens": 0, "wall_s": 0.0} for mode in ("off", "lookup", "auto")
    }
    tally = Tally()
    identical = True

    def load(mode: SpeculateMode) -> Agent:  # the mode exactly as asked, on untuned settings
        settings: SessionSettings = {"n_threads": threads, "speculate": mode}
        return Agent(
            model,
            n_ctx=n_ctx,
            tune=False,
            prefix_cache=False,
            pull_if_missing=False,
            budget=budget,
            session_settings=settings,
        )

    with load("off") as plain, load("lookup") as spec, load("auto") as auto:
        sessions = {mode: _session(agent) for mode, agent in (("off", plain), ("lookup", spec), ("auto", auto))}
        recorder = RecordingLookup()
        sessions["lookup"].use_drafters([recorder])
        for _ in range(rounds):
            for db, question in QUESTIONS:
                results = {}
                for mode, agent in (("off", plain), ("lookup", spec), ("auto", auto)):
                    session = sessions[mode]
                    result = agent.ask(question, DATA / db / f"{db}.sqlite", greedy=True, knowledge=False)
                    spans = [(start, end) for start, end in result.generated_spans]  # the model's own tokens
                    results[mode] = (result, list(session.tokens), spans)
                    timing[mode]["generate_s"] += session.timings.generate_s
                    timing[mode]["decode_s"] += session.timings.decode_s
                    timing[mode]["tokens"] += session.timings.generated_tokens
                    timing[mode]["wall_s"] += result.stats.to_json()["wall_s"]
                result, tokens, spans = results["lookup"]
                identical &= tokens == results["off"][1] == results["auto"][1]
                kinds = token_kinds(sessions["lookup"], tokens, spans, result.forced)
                for kind in kinds:
                    if kind is not None:
                        tally.add(kind, generated=1)
                for at, proposed, accepted in recorder.records:
                    kind = kinds[at] if at < len(kinds) else None
                    tally.add(kind or "calls", batches=1, drafted=proposed, accepted=accepted)
    speedup = timing["off"]["generate_s"] / timing["lookup"]["generate_s"]
    return {
        "name": name,
        "model": model.name,
        "timing": timing,
        "tally": tally,
        "identical": identical,
        "speedup_generate": speedup,
        "speedup_auto": timing["off"]["generate_s"] / timing["auto"]["generate_s"],
        "speedup_decode": timing["off"]["decode_s"] / timing["lookup"]["decode_s"],
        "speedup_wall": timing["off"]["wall_s"] / timing["lookup"]["wall_s"],
        "episodes": rounds * len(QUESTIONS),
    }
