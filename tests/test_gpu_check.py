"""The GPU check's CPU path: what it carries, how it compares placements, and one whole run.

benchmarks/gpu/check.py runs on a GPU machine with no network (benchmarks/gpu_check.sh installs
what benchmarks/gpu_pack.py carried). Everything but the GPU itself is checked here: the trimmed
source keeps what a CUDA build reads and drops the rest, every module the check imports travels
with the working tree, the near-tie rule and the parallel step's arithmetic (time covered by
overlapping calls, the goals) on known numbers, and the script end to end on the fixture, where
the "gpu" placement runs on the CPU and must say so.
"""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from benchmarks import gpu_pack
from benchmarks.gpu import episode as gpu_episode
from benchmarks.gpu import parallel as gpu_parallel

REPO = Path(__file__).resolve().parents[1]


def _sdist(path: Path, names: list[str]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            data = f"contents of {name}".encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_the_trimmed_source_keeps_what_a_cuda_build_reads(tmp_path: Path) -> None:
    top = "llama_cpp_python-0.3.36/"
    kept = [
        "CMakeLists.txt",
        "pyproject.toml",
        "llama_cpp/__init__.py",
        "vendor/llama.cpp/CMakeLists.txt",
        "vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu",
        "vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp",
        "vendor/llama.cpp/src/llama.cpp",
        "vendor/llama.cpp/common/arg.cpp",
        "vendor/llama.cpp/tools/mtmd/clip.cpp",
        "vendor/llama.cpp/vendor/nlohmann/json.hpp",
    ]
    dropped = [
        ".git/modules/vendor/llama.cpp/objects/pack/pack-1.pack",
        "vendor/llama.cpp/models/ggml-vocab-qwen35.gguf",
        "vendor/llama.cpp/docs/build.md",
        "vendor/llama.cpp/tools/server/server.cpp",
        "vendor/llama.cpp/tools/mtmd/test-3.mp4",
        "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp",
        "docs/index.md",
        "tests/test_llama.py",
    ]
    _sdist(tmp_path / "in.tar.gz", [top + n for n in kept + dropped])
    assert gpu_pack.trim_sdist(tmp_path / "in.tar.gz", tmp_path / "out" / "src.tar.gz") == (len(kept), len(dropped))
    with tarfile.open(tmp_path / "out" / "src.tar.gz") as tar:
        assert sorted(tar.getnames()) == sorted(top + n for n in kept)
        assert tar.extractfile(top + "CMakeLists.txt").read() == f"contents of {top}CMakeLists.txt".encode()


def test_the_manifest_counts_the_working_tree_against_the_limit(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a.whl").write_bytes(b"x" * 1000)
    (tmp_path / "src.tar.gz").write_bytes(b"y" * 500)
    report = gpu_pack.manifest(tmp_path, 64)
    assert report["files"] == [{"path": "src.tar.gz", "bytes": 500}, {"path": "wheels/a.whl", "bytes": 1000}]
    assert report["carried_bytes"] == 1500
    assert report["total_bytes"] == 1500 + report["tree_bytes"] and report["tree_bytes"] > 1_000_000
    assert report["limit_bytes"] == 64 * 2**20
    assert report["cuda_cmake_args"] == "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90"


def test_the_script_builds_with_the_flags_the_pack_names() -> None:
    script = (REPO / "benchmarks" / "gpu_check.sh").read_text()
    assert f'CUDA_CMAKE_ARGS="{gpu_pack.CUDA_CMAKE_ARGS}"' in script
    assert "llama_cpp_python-0.3.36.tar.gz" in script and gpu_pack.SDIST_NAME == "llama_cpp_python-0.3.36.tar.gz"


def _module_file(name: str) -> Path:
    path = REPO.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def test_every_module_the_gpu_check_imports_travels_with_the_tree() -> None:
    """What `python -m benchmarks.gpu.check` imports from this tree, and the checkpoint builders
    it runs (`python -m ...`) with what they import, packages included, are in what travels."""
    from benchmarks.gpu import check

    local = ("benchmarks", "tests")
    seen: set[str] = set()
    todo = ["benchmarks.gpu.check", check.FIXTURE_BUILDER, check.SHAPE_2B_BUILDER]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if _module_file(".".join(parts[:i])).exists()]
        for node in ast.walk(ast.parse(_module_file(name).read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            todo += [n for n in names if n.split(".")[0] in local and _module_file(n).exists()]
    modules = {n for n in seen if _module_file(n).name != "__init__.py"}
    assert modules == {
        "benchmarks.gpu.check",
        "benchmarks.gpu.machine",
        "benchmarks.gpu.episode",
        "benchmarks.gpu.parallel",
        "benchmarks.common.chinook_questions",
        "tests.fixture_checkpoint",
        "benchmarks.model.checkpoint_tokenizer",
        "benchmarks.model.make_2b_checkpoint",
    }
    travels = set(gpu_pack.tree_files())
    assert sorted(n for n in seen if _module_file(n) not in travels) == []


def test_time_covered_by_overlapping_calls_counts_once() -> None:
    assert gpu_parallel.merged([(3.0, 4.0), (0.0, 1.0), (0.5, 2.0), (5.0, 5.0)]) == [(0.0, 2.0), (3.0, 4.0)]
    calls = [(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]  # two threads' calls overlapping, then one alone
    assert gpu_parallel.covered(calls) == pytest.approx(3.0)
    steps = [(1.5, 3.5), (3.8, 10.0)]  # what a step covers is not the host's
    assert gpu_parallel.covered(calls, without=steps) == pytest.approx(1.5 + 0.3)
    assert gpu_parallel.covered([], without=steps) == 0.0


def test_the_goals_follow_from_the_rows() -> None:
    many = {"parallel": 16, "tok_s": 1800.0}
    one = {
        "parallel": 1,
        "tok_s": 300.0,
        "one_token_steps": {"tok_s": 430.0, "depth": 1210},
        "plain_decode": {"tok_s": 500.0},
    }
    judged = gpu_parallel.judged([many, one])
    assert judged["parallel_speedup"] == 6.0
    assert judged["one_episode_vs_plain"] == {
        "ratio": 0.86,
        "depth": 1210,
        "episode_tok_s": 430.0,
        "plain_tok_s": 500.0,
    }
    assert judged["goals"] == [
        "16 at once 6.00x one at a time (goal >= 6x): met",
        "one episode 0.86x plain decode at depth 1210 (goal >= 0.9x): NOT met",
    ]
    assert gpu_parallel.judged([one]) == {
        "goals": [judged["goals"][1]],
        "one_episode_vs_plain": judged["one_episode_vs_plain"],
    }
    assert gpu_parallel.judged([many]) == {"goals": []}  # one at a time did not run: nothing judged


def test_first_divergence() -> None:
    assert gpu_episode.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert gpu_episode.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert gpu_episode.first_divergence([1, 2], [1, 2, 3]) == 2


def test_a_parting_is_a_near_tie_only_within_the_measured_rounding() -> None:
    cpu = np.log(np.full((3, 10), 0.01, dtype=np.float32))
    gpu = cpu.copy()
    cpu[1, 4], cpu[1, 7] = -1.00, -1.02  # the CPU prefers token 4 by 0.02
    gpu[1, 4], gpu[1, 7] = -1.03, -1.01  # the GPU prefers token 7: 0.03 apart where the CPU had 4
    tie = gpu_episode.near_tie(cpu, gpu, 2, cpu_token=4, gpu_token=7)
    assert tie["cpu_margin"] == pytest.approx(0.02) and tie["gpu_margin"] == pytest.approx(0.02)
    assert tie["max_abs_logprob_diff_top8"] == pytest.approx(0.03, abs=1e-6) and tie["near_tie"]
    cpu[1, 7] = -2.0  # now the CPU's preference (1.0) exceeds any measured difference
    assert not gpu_episode.near_tie(cpu, gpu, 2, cpu_token=4, gpu_token=7)["near_tie"]


def shares_of(row: dict, name: str) -> float:
    return row["anatomy"]["shares"][name]


def test_the_whole_check_runs_on_the_cpu_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gpu.check",
            str(out),
            "--shape",
            "fixture",
            "--decode-tokens",
            "16",
            "--parallel",
            "4",
            "--questions",
            "4",
            "--episode-rounds",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["errors"] == [] and report["skipped"] == []
    assert report["llama"]["gpu_backend"] is None and report["llama"]["supports_gpu_offload"] is False
    assert set(report["prepare_s"]) == {
        "fixture checkpoint",
        "fixture convert",
        "fixture quantize Q8_0",
        "fixture quantize Q4_K_M",
    }
    episode = report["fixture_episode"]
    assert episode["equal"] and episode["ok"] and episode["first_difference"] is None
    assert episode["gpu"]["n_tokens"] == episode["cpu"]["n_tokens"] > 500
    assert episode["teacher_forced"]["positions"] == episode["cpu"]["n_tokens"]
    assert episode["teacher_forced"]["max_abs_logprob_diff"] == 0.0  # the same CPU code both times
    assert set(report["speed"]) == {"BF16", "Q8_0", "Q4_K_M"}
    for rows in report["speed"].values():
        assert set(rows) == {"gpu", "cpu"}
        for row in rows.values():
            assert row["backend"] == "CPU" and row["gpu_layers"] == 0  # no GPU backend: nothing offloaded
            assert row["prefill_tokens"] == 512 and row["prefill_tok_s"] > 0 and row["decode_tokens"] == 8
            assert row["gpu_memory_held_mib"] is None  # no nvidia-smi here
            assert any(name.startswith("CPU") for name in row["buffers_mib"])
    many, one = report["parallel"]
    assert (many["parallel"], one["parallel"]) == (4, 1)
    for row in (many, one):
        assert row["episodes"] == 4 and row["generated_tokens"] > 0 and row["backend"] == "CPU"
        assert row["tok_s"] == pytest.approx(row["generated_tokens"] / row["wall_s"], rel=0.01)  # wall rounded
        anatomy = row["anatomy"]
        shares = anatomy["shares"]
        assert set(shares) == {"llama_decode", "logits_and_batch", "state_moves", "grammar", "sampling", "other_host"}
        measured = [shares[k] for k in ("llama_decode", "logits_and_batch", "state_moves", "grammar", "sampling")]
        assert all(0 <= v <= 1 for v in measured) and sum(measured) <= 1.0005
        assert shares["other_host"] == pytest.approx(1 - sum(measured), abs=6e-4)
        assert shares["llama_decode"] > 0 and shares["grammar"] > 0 and shares["sampling"] > 0
        assert anatomy["calls"]["sampling"] > 0 and anatomy["call_ms"]["sampling"] > 0
        assert anatomy["steps"] > 0 and anatomy["decode_ms"] <= anatomy["step_ms"] + 0.01
    # several at once: steps of several sequences whose wall is more than their decode; one at a
    # time a step is a decode of one sequence
    assert 1 < many["anatomy"]["mean_width"] <= 4 and shares_of(many, "logits_and_batch") > 0
    assert many["anatomy"]["logits_ms_per_sequence"] > 0
    assert one["anatomy"]["mean_width"] == 1 and shares_of(one, "logits_and_batch") == 0
    assert one["anatomy"]["steps"] > many["anatomy"]["steps"]
    assert report["parallel_speedup"] == round(many["tok_s"] / one["tok_s"], 2) > 0
    speedup_goal = "met" if report["parallel_speedup"] >= 6 else "NOT met"
    assert (
        report["goals"][0] == f"4 at once {report['parallel_speedup']:.2f}x one at a time (goal >= 6x): {speedup_goal}"
    )
    episode, plain = one["one_token_steps"], one["plain_decode"]
    assert 0 < episode["steps"] < one["generated_tokens"] and episode["tok_s"] > 0 and episode["decode_tok_s"] > 0
    assert 0 < episode["depth"] < 2048
    assert plain["filled_to"] == min(episode["depth"], 2048 - 16 - 1) and plain["generated"] == 16
    assert plain["steps"] == 15 and plain["tok_s"] > 0 and plain["depth"] == plain["filled_to"] + 7
    assert episode["tok_s"] <= episode["decode_tok_s"] and plain["tok_s"] <= plain["decode_tok_s"]
    vs = report["one_episode_vs_plain"]
    assert vs["ratio"] == round(episode["tok_s"] / plain["tok_s"], 2) > 0 and vs["depth"] == episode["depth"]
    plain_goal = "met" if vs["ratio"] >= 0.9 else "NOT met"
    assert (
        report["goals"][1]
        == f"one episode {vs['ratio']:.2f}x plain decode at depth {vs['depth']} (goal >= 0.9x): {plain_goal}"
    )
    for line in report["goals"]:
        assert f"goal: {line}" in proc.stdout
    assert not (out / "work").exists()  # checkpoints and GGUFs go with the run
    assert "fixture greedy episode GPU vs CPU: equal" in proc.stdout
