"""CUDA offload, checked and measured in one run: what `benchmarks/gpu_check.sh` runs on a GPU machine.

    python -m benchmarks.gpu.check OUT_DIR [--shape 2b|fixture] [--deadline-s 480]

Writes OUT_DIR/gpu-check.json (every figure) and prints a short table last. Steps, each timed,
in the order they matter (the run stops starting new ones when `--deadline-s` is near, and says
which it skipped):

1. the machine: nvidia-smi's GPU, driver and memory, llama.cpp's system info, the GPU backend
   edge-sql detects (`runtime.llama.backend.gpu_backend_name`);
2. the fixture (tests/fixture_checkpoint.py, converted to BF16 by `edge-sql convert`): one
   greedy agent episode on Chinook (`Agent.each`) with every layer offloaded and one on the CPU,
   equal token for token or parting at a near-tie (benchmarks/gpu/episode.py says how);
3. the model: the random-weight checkpoint of the real 2B shape (benchmarks/model/make_2b_checkpoint.py)
   converted by `edge-sql convert` and quantized by `edge-sql quantize` (Q8_0, Q4_K_M);
   `--shape fixture` uses the fixture instead (the CPU test of this script);
4. speed per variant (BF16, Q8_0, Q4_K_M), all layers offloaded against none: load time, prefill
   tok/s of a 512-token prompt, greedy decode tok/s, llama.cpp's buffers by device and the GPU
   memory this process holds (nvidia-smi);
5. several episodes at once on the GPU (benchmarks/gpu/parallel.py): `--parallel 16` episodes
   at once over 16 Chinook questions (short budget) against one at a time, where each run's
   wall went (llama_decode, logits rows, grammar masks, sampling, the rest of the host's
   work), and one episode's one-token steps against plain decode at the same depth; the goals
   of issue 54 printed last (16 at once >= 6x one at a time, one episode >= 0.9x plain decode).

Each measurement runs in a child process, so a crash in llama.cpp or CUDA is recorded and the
others still run; the machine's description is benchmarks/gpu/machine.py's. On an H200 the run
took 193 s with 8 questions at once and one at a time: with 16 of each, budget about 5 minutes
and give `--deadline-s` what the device's time allows. On a machine without a GPU backend the
"gpu" rows run on the CPU and say so (`backend: CPU`): that is how the script's CPU path is tested.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu import parallel as gpu_parallel
from benchmarks.gpu.episode import PLACEMENTS, child_episode
from benchmarks.gpu.machine import child_machine, gpu_memory_mib, machine_description
from benchmarks.gpu.parallel import child_parallel, filler_tokens

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURE_BUILDER = "tests.fixture_checkpoint"  # the test suite's fixture model, random weights
SHAPE_2B_BUILDER = "benchmarks.model.make_2b_checkpoint"  # the real 2B shape, random weights
VARIANTS = ("BF16", "Q8_0", "Q4_K_M")
PREFILL_TOKENS = 512


# ---- small helpers ---------------------------------------------------------------------------


def edge_sql(*args: str, timeout: float) -> float:
    """Run an `edge-sql` command (this Python's), raise if it fails; its wall seconds."""
    tick = time.perf_counter()
    # from this folder: `-m` puts the working directory first on sys.path, and the repository's
    # root holds the source tree, not the installed package (convert/ is edge_sql.convert)
    subprocess.run([sys.executable, "-m", "edge_sql", *args], check=True, timeout=timeout, cwd=HERE)
    return round(time.perf_counter() - tick, 2)


# ---- child measurements (each in its own process) ---------------------------------------------


def child_speed(cfg: dict) -> dict:
    """Load, prefill `PREFILL_TOKENS`, then greedy decode of `decode` tokens from a short prompt."""
    from edge_sql.runtime import SamplingParams, Session

    tick = time.perf_counter()
    with Session(cfg["model"], n_ctx=4096, n_gpu_layers=cfg["n_gpu_layers"]) as session:
        load_s = time.perf_counter() - tick
        prompt = filler_tokens(session, PREFILL_TOKENS)
        session.eval(prompt[:16])  # warm-up: the first decode builds the graph (and CUDA's kernels)
        session.generate(params=SamplingParams(greedy=True), max_tokens=4)
        session.reset()
        tick = time.perf_counter()
        session.eval(prompt)
        prefill_s = time.perf_counter() - tick
        held, card = gpu_memory_mib(os.getpid()), gpu_memory_mib()
        session.reset()
        session.eval(prompt[:64])
        completion = session.generate(params=SamplingParams(greedy=True), max_tokens=cfg["decode"])
        info = session.info
        return {
            "backend": info.backend,
            "gpu_layers": info.gpu_layers,
            "n_layers": info.n_layers,
            "threads": info.n_threads,
            "flash_attn": info.flash_attn,
            "load_s": round(load_s, 2),
            "prefill_tokens": len(prompt),
            "prefill_tok_s": round(len(prompt) / prefill_s, 1),
            "decode_tokens": completion.timings.generated_tokens,
            "decode_tok_s": round(completion.timings.generated_tokens / completion.timings.generate_s, 1),
            "buffers_mib": {k: round(v / 2**20, 1) for k, v in sorted(info.buffers.items())},
            "gpu_memory_held_mib": held,
            "gpu_memory_used_card_mib": card,
        }


CHILDREN = {"machine": child_machine, "speed": child_speed, "episode": child_episode, "parallel": child_parallel}


# ---- the parent ------------------------------------------------------------------------------


class Run:
    """The report being written, the deadline, and the children's runner."""

    def __init__(self, out_dir: Path, deadline_s: float) -> None:
        self.out_dir = out_dir
        self.started = time.monotonic()
        self.deadline = self.started + deadline_s
        self.report: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "skipped": [], "errors": []}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        self.report["elapsed_s"] = round(time.monotonic() - self.started, 1)
        (self.out_dir / "gpu-check.json").write_text(json.dumps(self.report, indent=1) + "\n")

    def child(self, kind: str, cfg: dict, *, need_s: float) -> dict | None:
        """Run one measurement in a child process; None (recorded) when skipped or failed."""
        label = f"{kind} {json.dumps(cfg, sort_keys=True)}"
        if self.left() < need_s:
            self.report["skipped"].append(f"{label}: {self.left():.0f} s left, it needs about {need_s:.0f}")
            return None
        print(f"[{time.monotonic() - self.started:6.1f} s] {kind} {cfg.get('label', '')}", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", __spec__.name, "--child", kind, "--config", json.dumps(cfg)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10.0, self.left()))
        except subprocess.TimeoutExpired:
            self.report["errors"].append(f"{label}: stopped at the deadline")
            return None
        if proc.returncode != 0:
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
            self.report["errors"].append(f"{label}: child died ({how}): {proc.stderr.strip()[-600:]}")
            return None
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def step(self, name: str, fn, *, need_s: float) -> Any:
        """A step of the parent (build, convert, quantize), timed; None when skipped or failed."""
        if self.left() < need_s:
            self.report["skipped"].append(f"{name}: {self.left():.0f} s left, it needs about {need_s:.0f}")
            return None
        print(f"[{time.monotonic() - self.started:6.1f} s] {name}", file=sys.stderr, flush=True)
        tick = time.perf_counter()
        try:
            value = fn()
        except (subprocess.SubprocessError, OSError) as exc:
            self.report["errors"].append(f"{name}: {exc}")
            return None
        self.report.setdefault("prepare_s", {})[name] = round(time.perf_counter() - tick, 1)
        return value


def checkpoint_to_gguf(run: Run, name: str, builder: str, work: Path, *, need_s: float) -> Path | None:
    """A random checkpoint made by the module `builder` (run from the repository's root), converted to
    BF16 by `edge-sql convert`;
    the safetensors are removed after (the 2B shape's are 3.8 GB)."""
    folder, gguf = work / name, work / f"{name}-BF16.gguf"
    made = run.step(
        f"{name} checkpoint",
        lambda: subprocess.run(
            [sys.executable, "-m", builder, str(folder)], check=True, timeout=600, capture_output=True, cwd=REPO
        ),
        need_s=need_s,
    )
    converted = (
        made is not None
        and run.step(
            f"{name} convert",
            lambda: edge_sql("convert", str(folder), "-o", str(gguf), "--force", "--no-progress", timeout=600),
            need_s=need_s / 4,
        )
        is not None
    )
    shutil.rmtree(folder, ignore_errors=True)
    return gguf if converted else None


def build_models(run: Run, work: Path, shape: str) -> dict[str, Path]:
    """The fixture's BF16 GGUF, and the measured shape's variants: {"fixture": path, "BF16": ..., "Q8_0": ...}."""
    models: dict[str, Path] = {}
    fixture = checkpoint_to_gguf(run, "fixture", FIXTURE_BUILDER, work, need_s=30)
    if fixture is not None:
        models["fixture"] = fixture
    base = fixture if shape == "fixture" else checkpoint_to_gguf(run, "2b", SHAPE_2B_BUILDER, work, need_s=240)
    if base is None:
        return models
    models["BF16"] = base
    for qtype in VARIANTS[1:]:
        out = work / f"{shape}-{qtype}.gguf"
        if (
            run.step(
                f"{shape} quantize {qtype}",
                lambda qtype=qtype, out=out: edge_sql(
                    "quantize", str(base), "--type", qtype, "-o", str(out), "--force", timeout=600
                ),
                need_s=45,
            )
            is not None
        ):
            models[qtype] = out
    return models


def summary(report: dict) -> list[str]:
    """The short table printed last."""
    lines = [
        f"GPU: {report['machine'].get('gpu')}; CPU: {report['machine'].get('cpu')} x{report['machine'].get('cpus')}",
        f"backend detected: {report.get('llama', {}).get('gpu_backend')}",
    ]
    episode = report.get("fixture_episode")
    if episode:
        lines.append(
            f"fixture greedy episode GPU vs CPU: {'equal' if episode['equal'] else 'differs'}"
            f" ({episode['gpu']['n_tokens']} / {episode['cpu']['n_tokens']} tokens)"
            + (f", parting {episode.get('parting')}" if not episode["equal"] else "")
            + f"; teacher-forced max |dlogp| {episode['teacher_forced']['max_abs_logprob_diff']}"
        )
    lines.append(f"{'variant':8} {'where':4} {'prefill tok/s':>13} {'decode tok/s':>12} {'load s':>6} {'GPU MiB':>8}")
    for variant, rows in report.get("speed", {}).items():
        for where, row in rows.items():
            lines.append(
                f"{variant:8} {where:4} {row['prefill_tok_s']:13.1f} {row['decode_tok_s']:12.1f} "
                f"{row['load_s']:6.1f} {row['gpu_memory_held_mib'] if row['gpu_memory_held_mib'] is not None else '-':>8}"
            )
    lines += gpu_parallel.summary_lines(report)
    lines.append(f"skipped: {len(report['skipped'])}, errors: {len(report['errors'])}, {report.get('elapsed_s')} s")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, nargs="?", help="the folder for gpu-check.json")
    parser.add_argument("--shape", choices=("2b", "fixture"), default="2b", help="the model measured for speed")
    parser.add_argument("--work", type=Path, help="where checkpoints and GGUFs go (default OUT/work, removed after)")
    parser.add_argument("--deadline-s", type=float, default=480, help="start no step after this many seconds")
    parser.add_argument(
        "--decode-tokens",
        type=int,
        default=128,
        help="greedy tokens decoded on the GPU (CPU: a quarter), and plain decode's beside one episode",
    )
    parser.add_argument("--parallel", type=int, default=16, help="episodes at once on the GPU")
    parser.add_argument(
        "--questions", type=int, default=16, help="Chinook questions (the eight cycled) at once and one at a time"
    )
    parser.add_argument("--episode-rounds", type=int, default=3, help="tool rounds of the fixture's greedy episode")
    parser.add_argument("--require-gpu", action="store_true", help="exit 1 when llama.cpp has no GPU backend")
    parser.add_argument(
        "--llama-source",
        default="installed",
        help="how llama-cpp-python came to be (gpu_check.sh: prebuilt or built-here), for the report",
    )
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](json.loads(args.config))))
        return 0
    if args.out is None:
        parser.error("OUT is required")
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    work = (args.work or args.out / "work").resolve()
    keep_work = args.work is not None
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("EDGE_SQL_HOME", str(work / "home"))  # no store or tuning cache outside `work`
    run = Run(args.out, args.deadline_s)
    report = run.report
    report["command"] = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    report["llama_cpp_python_source"] = args.llama_source
    report["machine"] = machine_description()
    report["llama"] = run.child("machine", {}, need_s=5) or {}
    run.save()
    gpu = report["llama"].get("gpu_backend")
    try:
        models = build_models(run, work, args.shape)
        run.save()
        if "fixture" in models:
            budget = {
                "max_rounds": args.episode_rounds,
                "max_think_tokens": 48,
                "max_calls_per_turn": 3,
                "max_tokens": 4096,
            }
            report["fixture_episode"] = run.child(
                "episode", {"model": str(models["fixture"]), "budget": budget, "label": "fixture"}, need_s=30
            )
            run.save()
        report["speed"] = {}
        for variant in ("Q4_K_M", "Q8_0", "BF16"):  # the default variant first
            if variant not in models:
                continue
            for where, layers in PLACEMENTS.items():
                decode = args.decode_tokens if where == "gpu" and gpu else max(8, args.decode_tokens // 4)
                row = run.child(
                    "speed",
                    {
                        "model": str(models[variant]),
                        "n_gpu_layers": layers,
                        "decode": decode,
                        "label": f"{variant} {where}",
                    },
                    need_s=40 if where == "cpu" else 20,
                )
                if row is not None:
                    report["speed"].setdefault(variant, {})[where] = row
                run.save()
        if "Q4_K_M" in models:
            gpu_parallel.measure(
                run,
                models["Q4_K_M"],
                report,
                parallel=args.parallel,
                questions=args.questions,
                decode=args.decode_tokens,
            )
    finally:
        run.save()
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(summary(report)))
    if args.require_gpu and not gpu:
        print("no GPU backend in this llama.cpp build", file=sys.stderr)
        return 1
    episode = report.get("fixture_episode") or {}
    return 0 if episode.get("ok") and not report["errors"] else 3


if __name__ == "__main__":
    sys.exit(main())
