"""Write tests/data/mtp_golden.json: what llama.cpp's own converter makes of the fixture checkpoint.

Usage (from the repository root; llama.cpp's converter ships in the llama-cpp-python sdist,
`pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all:`, under vendor/llama.cpp):

    PYTHONPATH=tests python -m tests.make_mtp_golden --llama-cpp-converter VENDOR/llama.cpp/convert_hf_to_gguf.py

(`-m` from the root: the fixture's builder imports `benchmarks`; PYTHONPATH=tests: conftest and
the cache by their plain names, as pytest's `pythonpath` has them.)

It converts the fixture checkpoint (tests/fixture_checkpoint.py, built into the fixture cache) to
BF16 with llama.cpp's converter and its own gguf-py, run as benchmarks/model/bench_convert.py runs
it, and records every tensor (name, shape, GGML type, SHA-256 of its bytes) and the metadata
keys the MTP head touches. tests/test_convert_mtp.py compares edge-sql's converter with it, so
CI needs no llama.cpp sources. Run it again only when the fixture checkpoint changes (that test
says so: the file records the checkpoint's cache key).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent

GOLDEN = TESTS / "data" / "mtp_golden.json"
MTP_KEYS = ("block_count", "nextn_predict_layers", "attention.recurrent_layers")


def describe(path: Path) -> dict:
    """Tensors (shape, type, sha256) and the MTP-related `qwen35.*` metadata of a GGUF file."""
    from edge_sql.convert.gguf_file import read_gguf
    from gguf_tensors import tensor_bytes

    layout = read_gguf(path)
    tensors = {}
    for name, entry in sorted(layout.tensors.items()):
        tensors[name] = {
            "shape": list(entry.shape),
            "type": entry.type.name,
            "sha256": hashlib.sha256(tensor_bytes(layout, name)).hexdigest(),
        }
    arch = layout.architecture
    metadata = {f"{arch}.{key}": layout.metadata.get(f"{arch}.{key}") for key in MTP_KEYS}
    return {"tensors": tensors, "metadata": metadata}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--llama-cpp-converter",
        type=Path,
        required=True,
        help="llama.cpp's convert_hf_to_gguf.py (its gguf-py must sit next to it)",
    )
    parser.add_argument("--out", type=Path, default=GOLDEN)
    args = parser.parse_args()
    from conftest import _checkpoint  # the cached fixture checkpoint and its key

    checkpoint, key = _checkpoint(sharded=False)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "llama-cpp-bf16.gguf"
        env = {**os.environ, "PYTHONPATH": str(args.llama_cpp_converter.parent / "gguf-py")}
        command = [
            sys.executable,
            str(args.llama_cpp_converter),
            str(checkpoint),
            "--outtype",
            "bf16",
            "--outfile",
            str(out),
        ]
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        golden = {
            "about": "llama.cpp's convert_hf_to_gguf.py (vendored in llama-cpp-python 0.3.36) on the fixture "
            "checkpoint, --outtype bf16, MTP head kept (its default); made by tests/make_mtp_golden.py",
            "checkpoint_key": key,
            **describe(out),
        }
    args.out.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out}: {len(golden['tensors'])} tensors; {golden['metadata']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
