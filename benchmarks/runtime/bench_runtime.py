"""Runtime benchmark: decode speed with and without the grammar, prefill work over a
multi-round transcript, and peak memory at a 12,288-token context.

Each measurement runs in its own child process, so a peak RSS belongs to one configuration
and a crash in llama.cpp (e.g. its AMX kernels) is reported instead of ending the run.

    .venv/bin/python -m benchmarks.runtime.bench_runtime MODEL.gguf [MODEL.gguf ...] \\
        --out benchmarks/results/runtime.md

Figures:
* speed: prefill tok/s over a 512-token prompt; then decoding with the same sampler and
  seeds from a 64-token prompt, interleaving two kinds of run: unconstrained, and under a
  grammar that only masks (every token sampled under the llguidance mask: the grammar's own
  cost); then the agent itself (`edge_sql.Agent.ask` over the bundled Chinook
  database, its own prompt, tool-call grammars and tools: forced tokens skip sampling and
  are decoded in one batch). Tokens/s of each counts every generated token.
* transcript: one agent episode (`Agent.ask`, up to the protocol's six rounds) on
  Chinook; prefill work = tokens llama.cpp decoded (its own perf counters) / tokens in the
  final transcript. 1.00 means each token once.
* memory: peak RSS of a child that loads the model with a 12,288-token context and fills it
  (prefill of 12,288 - 64 tokens, then 64 decoded tokens), for repack on/off and n_ubatch
  512/256; compared with the model file size.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common.bench_machine import machine_detail, write_results
from edge_sql.agent import Budget, EpisodeResult
from edge_sql.api import Agent
from edge_sql.runtime import SamplingParams, Session

REPO = Path(__file__).resolve().parents[2]
PROMPT_WORDS = (
    "You are a careful data analyst. Explore the SQLite database with the tools, then submit "
    "one SQL query that answers the question. Tables: Customer, Invoice, InvoiceLine, Track. "
)
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
QUESTION = "Which country's customers spent the most money in total?"
EPISODE_CTX = 12288  # the protocol's episode budget


def _agent(model: str, cfg: dict) -> Agent:
    """The model loaded as `edge-sql run` loads it, on the measurement's session options: one
    session of the protocol's episode budget, its episodes bounded by `cfg["think_tokens"]`."""
    return Agent(
        model,
        n_ctx=EPISODE_CTX,
        tune=False,
        prefix_cache=False,
        pull_if_missing=False,
        budget=Budget(max_think_tokens=cfg["think_tokens"]),
        session_settings=cfg["session"],
    )


def _episode(agent: Agent, seed: int) -> EpisodeResult:
    """One real agent episode on Chinook through the Agent: the product's prompt, grammars and tools."""
    return agent.ask(QUESTION, CHINOOK, seed=seed, knowledge=False)


def _session(agent: Agent) -> Session:
    session = agent.session
    assert session is not None  # one session, open
    return session


def _prompt_tokens(session: Session, n: int) -> list[int]:
    text = "<|im_start|>system\n"
    tokens: list[int] = []
    while len(tokens) < n:
        text += PROMPT_WORDS
        tokens = session.tokenize(text)
    return tokens[:n]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- child measurements ------------------------------------------------------------------


MASK_ONLY_GRAMMAR = r"""
start: /[^<{}]*/
"""


def child_speed(model: str, cfg: dict) -> dict:
    with _agent(model, cfg) as agent:
        session = _session(agent)
        prompt = _prompt_tokens(session, 512)
        start = time.perf_counter()
        session.eval(prompt)
        prefill_s = time.perf_counter() - start
        n = cfg["decode_tokens"]
        grammars = {"free": None, "masked": MASK_ONLY_GRAMMAR}
        params = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)
        runs: dict[str, list[dict]] = {kind: [] for kind in (*grammars, "agent")}
        order = ["free", "masked", "masked", "free"] * cfg["repeats"]
        short_prompt = prompt[:64]  # decode runs start from a short prompt: no long prefill each
        for i, kind in enumerate(order):
            session.reset()
            session.eval(short_prompt)
            session.seed(i // 4)  # the same seed for each kind within a block
            completion = session.generate(grammar=grammars[kind], params=params, max_tokens=n)
            t = completion.timings
            runs[kind].append(
                dict(tokens=t.generated_tokens, forced=t.forced_tokens, wall=t.generate_s, sample=t.sample_s)
            )
        for seed in range(2 * cfg["repeats"]):  # the agent as `edge-sql run` drives the runtime
            _episode(agent, seed)
            t = session.timings
            runs["agent"].append(
                dict(tokens=t.generated_tokens, forced=t.forced_tokens, wall=t.generate_s, sample=t.sample_s)
            )
        info = session.info
    out = dict(prefill_tok_s=len(prompt) / prefill_s, threads=info.n_threads, repack=info.repack, backend=info.backend)
    for kind, items in runs.items():
        tokens = sum(r["tokens"] for r in items)
        forced = sum(r["forced"] for r in items)
        out[kind] = dict(
            tokens=tokens,
            forced=forced,
            tok_s=tokens / sum(r["wall"] for r in items),
            sample_ms=1e3 * sum(r["sample"] for r in items) / max(tokens - forced, 1),
        )
    return out


def child_transcript(model: str, cfg: dict) -> dict:
    with _agent(model, cfg) as agent:
        session = _session(agent)
        result = _episode(agent, 0)
        batched, single = session.llama_perf_counts()
        rounds = [
            dict(round=r.index, calls=len(r.calls), tools=", ".join(c.tool for c in r.calls)) for r in result.rounds
        ]
        return dict(
            transcript_tokens=session.n_past,
            prompt_tokens_evaluated=session.timings.prompt_tokens,
            generated_tokens=session.timings.generated_tokens,
            forced_tokens=session.timings.forced_tokens,
            decoded_by_llama=batched + single,
            decoded_by_session=session.decoded_tokens,
            rounds=rounds,
            stop=result.stop,
            forced=result.forced,
        )


def child_memory(model: str, cfg: dict) -> dict:
    start = time.perf_counter()
    with Session(model, n_ctx=12288, **cfg["session"]) as session:
        load_s = time.perf_counter() - start
        rss_loaded = _peak_rss_mb()
        filler = _prompt_tokens(session, 1024)
        fill = cfg["fill"]
        tokens = (filler * (fill // len(filler) + 1))[:fill]
        start = time.perf_counter()
        session.eval(tokens)
        prefill_s = time.perf_counter() - start
        completion = session.generate(params=SamplingParams(seed=0), max_tokens=64)
        return dict(
            load_s=load_s,
            rss_after_load_mb=rss_loaded,
            peak_rss_mb=_peak_rss_mb(),
            context_tokens=session.n_past,
            prefill_tok_s=fill / prefill_s,
            decode_tok_s=completion.timings.decode_tok_s,
            repack=session.info.repack,
            n_ubatch=session.info.n_ubatch,
        )


CHILDREN = {"speed": child_speed, "transcript": child_transcript, "memory": child_memory}


# ---- parent: run children, write the report ------------------------------------------------


def run_child(kind: str, model: Path, cfg: dict, timeout: int) -> dict:
    cmd = [sys.executable, "-m", __spec__.name, "--child", kind, "--model", str(model), "--config", json.dumps(cfg)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(error=f"timed out after {timeout} s")
    if proc.returncode != 0:
        signal = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        tail = proc.stderr.strip().splitlines()[-1:] or [""]
        return dict(error=f"child died ({signal}) {tail[0][:200]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def speed_section(model: Path, session: dict, args: argparse.Namespace) -> list[str]:
    speed = run_child(
        "speed",
        model,
        dict(session=session, decode_tokens=args.decode_tokens, repeats=args.repeats, think_tokens=args.think_tokens),
        args.timeout,
    )
    lines = ["### Decode with and without the grammar", ""]
    if "error" in speed:
        return lines + [f"speed run failed: {speed['error']}", ""]
    free, masked, tool = speed["free"], speed["masked"], speed["agent"]
    return lines + [
        f"Threads {speed['threads']}, repack {speed['repack']}, {speed['backend']}. Prefill of 512 tokens, then "
        f"decode runs from a 64-token prompt: {args.repeats * 2} runs of {args.decode_tokens} tokens per row, "
        "interleaved, same seeds, temperature 0.6, top-k 20, top-p 0.95. *masked*: a grammar that only masks "
        "(every token sampled under the llguidance mask, nothing forced): the grammar's own cost. *agent episodes*: "
        f"{args.repeats * 2} episodes of `edge_sql.Agent.ask` on Chinook (its prompt, tool-call grammars and "
        "tools; forced tokens skip sampling and are decoded in one batch), all generated tokens counted.",
        "",
        "| run | tokens | forced | tok/s | vs unconstrained | sampling + mask ms per sampled token |",
        "|---|--:|--:|--:|--:|--:|",
        *[
            f"| {name} | {r['tokens']} | {r['forced']} | {r['tok_s']:.2f} | {r['tok_s'] / free['tok_s']:.3f} | {r['sample_ms']:.2f} |"
            for name, r in (("unconstrained", free), ("masked", masked), ("agent episodes", tool))
        ],
        "",
        f"Prefill: {speed['prefill_tok_s']:.1f} tok/s. **Grammar / unconstrained decode speed: "
        f"{masked['tok_s'] / free['tok_s']:.3f} (mask only), {tool['tok_s'] / free['tok_s']:.3f} (agent episodes)** "
        "(target >= 0.95).",
        "",
    ]


def transcript_section(model: Path, session: dict, args: argparse.Namespace) -> list[str]:
    tr = run_child("transcript", model, dict(session=session, think_tokens=args.think_tokens), args.timeout)
    lines = ["### Prefill work over an agent episode", ""]
    if "error" in tr:
        return lines + [f"transcript run failed: {tr['error']}", ""]
    return lines + [
        f"One `Agent.ask` on Chinook ({QUESTION!r}), seed 0: it ended with `{tr['stop']}`"
        f"{' after the forced final turn' if tr['forced'] else ''}.",
        "",
        "| round | calls | tools |",
        "|--:|--:|---|",
        *[f"| {r['round']} | {r['calls']} | {r['tools']} |" for r in tr["rounds"]],
        "",
        f"Transcript {tr['transcript_tokens']} tokens = {tr['prompt_tokens_evaluated']} prompt tokens evaluated + "
        f"{tr['generated_tokens']} generated. llama.cpp decoded {tr['decoded_by_llama']} tokens (its own perf "
        f"counters): **prefill work / transcript length = {tr['decoded_by_llama'] / tr['transcript_tokens']:.3f}** "
        "(target 1.00).",
        "",
    ]


def memory_section(model: Path, session: dict, args: argparse.Namespace) -> list[str]:
    size_mb = model.stat().st_size / 2**20
    lines = [
        "### Peak RSS at a 12,288-token context",
        "",
        f"Each row is a child process: load with n_ctx 12,288, prefill {args.fill:,} tokens, decode 64. "
        f"File size {size_mb:,.0f} MiB; target file + 400 MiB = {size_mb + 400:,.0f} MiB.",
        "",
        "| repack | n_ubatch | peak RSS MiB | RSS - file MiB | prefill tok/s | decode tok/s | load s |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for repack, n_ubatch in args.memory_configs:
        print(f"[{model.name}] memory repack={repack} n_ubatch={n_ubatch}", file=sys.stderr, flush=True)
        cfg = dict(session=dict(session, repack=repack, n_ubatch=n_ubatch), fill=args.fill)
        mem = run_child("memory", model, cfg, args.timeout)
        if "error" in mem:
            lines.append(f"| {repack} | {n_ubatch} | {mem['error']} | | | | |")
        else:
            lines.append(
                f"| {repack} | {n_ubatch} | {mem['peak_rss_mb']:,.0f} | {mem['peak_rss_mb'] - size_mb:+,.0f} | "
                f"{mem['prefill_tok_s']:.1f} | {mem['decode_tok_s']:.2f} | {mem['load_s']:.1f} |"
            )
    return lines + [""]


SECTIONS = {"speed": speed_section, "transcript": transcript_section, "memory": memory_section}


def report(models: list[Path], args: argparse.Namespace) -> str:
    session = {"n_threads": args.threads} if args.threads else {}
    skip = {part.strip() for part in args.skip.split(",") if part.strip()}
    lines = [
        "# Runtime benchmark",
        "",
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "```",
        machine_detail(),
        "```",
        "",
    ]
    for model in models:
        lines += [f"## {model.name} ({model.stat().st_size / 2**20:,.0f} MiB)", ""]
        for name, section in SECTIONS.items():
            if name not in skip:
                print(f"[{model.name}] {name}", file=sys.stderr, flush=True)
                lines += section(model, session, args)
    return "\n".join(lines)


def _memory_configs(text: str) -> list[tuple[bool, int]]:
    configs = []
    for item in text.split(","):
        repack, _, n_ubatch = item.partition(":")
        configs.append((repack.strip() == "on", int(n_ubatch)))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path, help="GGUF files to measure")
    parser.add_argument("--out", type=Path, help="write the Markdown report here (also printed)")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the runtime's)")
    parser.add_argument("--decode-tokens", type=int, default=64, help="tokens per decode run")
    parser.add_argument("--repeats", type=int, default=2, help="ABBA blocks of decode runs (and 2 agent episodes each)")
    parser.add_argument(
        "--think-tokens",
        type=int,
        default=256,
        help="bound on each think block of the agent episodes (random weights think until the bound)",
    )
    parser.add_argument("--fill", type=int, default=12288 - 64, help="prompt tokens in the memory runs")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per child")
    parser.add_argument(
        "--memory-configs",
        type=_memory_configs,
        default=_memory_configs("off:512,off:256,on:512,on:256"),
        help="repack on/off and n_ubatch of the memory runs, e.g. off:512,on:256",
    )
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: speed, transcript, memory")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.model, json.loads(args.config))))
        return
    if not args.models:
        parser.error("give at least one GGUF file")
    text = report(args.models, args)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_results(args.out, text + "\n")


if __name__ == "__main__":
    main()
