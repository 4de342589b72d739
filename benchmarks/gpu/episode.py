"""The fixture's greedy agent episode with every layer offloaded against the same on the CPU:
step 2 of benchmarks/gpu/check.py (offloaded episodes must match the CPU's).

Equal token for token, or else the first token where they part must be a near-tie: both
transcripts are teacher-forced on both placements up to there, and the CPU's preference for its
own token over the GPU's (log-probability margin) must be within the largest CPU-GPU difference
of log-probabilities measured over that prefix (the two backends' rounding explains it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHINOOK = Path(__file__).resolve().parents[2] / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
EPISODE_QUESTION = "Which country's customers spent the most money in total?"
PLACEMENTS = {"gpu": None, "cpu": 0}  # n_gpu_layers: None offloads every layer when a GPU backend exists


def _episode_tokens(model: str, n_gpu_layers: int | None, budget: dict) -> dict:
    """One greedy episode on one placement, run by the Agent as every episode is; its session's
    tokens are read in `watch`, before the session is given back."""
    from edge_sql import Agent
    from edge_sql.agent import Budget
    from edge_sql.api import Ask

    seen: dict = {}

    def watch(_index, _ask, session, _result) -> None:
        seen.update(
            tokens=list(session.tokens), backend=session.info.backend, generated=session.timings.generated_tokens
        )

    with Agent(
        model,
        n_ctx=4096,
        n_gpu_layers=n_gpu_layers,
        budget=Budget(**budget),
        tune=False,
        prefix_cache=False,
        pull_if_missing=False,
    ) as agent:
        [(_, result)] = list(agent.each([Ask(EPISODE_QUESTION, CHINOOK)], greedy=True, watch=watch))
    if isinstance(result, Exception):
        raise result
    return {
        "tokens": seen["tokens"],
        "backend": seen["backend"],
        "sql": result.sql,
        "stop": result.stop,
        "rounds": len(result.rounds),
        "calls": sum(len(r.calls) for r in result.rounds),
        "generated": seen["generated"],
    }


def _logprobs(model: str, n_gpu_layers: int | None, tokens: list[int]):
    import numpy as np

    from edge_sql.runtime import Session
    from edge_sql.runtime.probes.teacher_forcing import token_logprobs

    with Session(model, n_ctx=256, n_gpu_layers=n_gpu_layers) as session:
        return np.concatenate(list(token_logprobs(session, tokens)))


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first index where two token lists differ (the shorter one's end counts), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie(cpu_lp, gpu_lp, at: int, cpu_token: int, gpu_token: int) -> dict:
    """Whether the CPU and GPU choosing different tokens at `at` is explained by rounding.

    `cpu_lp`, `gpu_lp`: log-probabilities of the same prefix teacher-forced on each placement
    (row i predicts token i + 1). The CPU's margin for its own token over the GPU's at the
    parting position must be within the largest |CPU - GPU| log-probability difference seen
    over the prefix's top candidates: a difference that size can swap them."""
    import numpy as np

    row = at - 1
    cpu_margin = float(cpu_lp[row, cpu_token] - cpu_lp[row, gpu_token])
    gpu_margin = float(gpu_lp[row, gpu_token] - gpu_lp[row, cpu_token])
    top = np.argsort(cpu_lp, axis=-1)[:, -8:]  # where a swap could matter: each row's top candidates
    diff = np.abs(np.take_along_axis(cpu_lp, top, -1) - np.take_along_axis(gpu_lp, top, -1))
    tolerance = float(diff.max())
    return {
        "cpu_margin": round(cpu_margin, 5),
        "gpu_margin": round(gpu_margin, 5),
        "max_abs_logprob_diff_top8": round(tolerance, 5),
        "near_tie": 0 <= cpu_margin <= tolerance,
    }


def child_episode(cfg: dict) -> dict:
    """The fixture's greedy episode on the GPU and on the CPU, compared token for token."""
    import numpy as np

    model, budget = cfg["model"], cfg["budget"]
    gpu = _episode_tokens(model, PLACEMENTS["gpu"], budget)
    cpu = _episode_tokens(model, PLACEMENTS["cpu"], budget)
    at = first_divergence(cpu["tokens"], gpu["tokens"])
    out: dict[str, Any] = {
        "gpu": {k: v for k, v in gpu.items() if k != "tokens"} | {"n_tokens": len(gpu["tokens"])},
        "cpu": {k: v for k, v in cpu.items() if k != "tokens"} | {"n_tokens": len(cpu["tokens"])},
        "equal": at is None,
        "first_difference": at,
    }
    prefix = cpu["tokens"] if at is None else cpu["tokens"][:at]
    cpu_lp = _logprobs(model, PLACEMENTS["cpu"], prefix)
    gpu_lp = _logprobs(model, PLACEMENTS["gpu"], prefix)
    diff = np.abs(cpu_lp - gpu_lp)
    out["teacher_forced"] = {
        "positions": len(prefix),
        "max_abs_logprob_diff": round(float(diff.max()), 5),
        "mean_abs_logprob_diff": round(float(diff.mean()), 6),
        "argmax_agrees": round(float((cpu_lp.argmax(-1) == gpu_lp.argmax(-1)).mean()), 4),
    }
    if at is not None and at < min(len(cpu["tokens"]), len(gpu["tokens"])):
        out["parting"] = near_tie(cpu_lp, gpu_lp, at, cpu["tokens"][at], gpu["tokens"][at])
    out["ok"] = at is None or bool(out.get("parting", {}).get("near_tie"))
    return out
