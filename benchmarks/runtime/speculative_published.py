"""The published SQaLe episodes (bench_speculative.py's parts 3 and 4): lookup acceptance
simulated on their text with the real Qwen3.5 vocabulary, and the episodes replayed on a model
(measured)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.runtime.speculative_episodes import Tally
from edge_sql.agent import load_prompt
from edge_sql.evaluation.sqale_published import call_args, load_episodes
from edge_sql.runtime import SamplingParams, Session
from edge_sql.runtime.speculation.lookup import LookupDrafter
from edge_sql.runtime.speculation.speculative import Speculator

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
