"""validate_gguf rejects every bad model file with one clear line, before llama.cpp sees it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from edge_sql.errors import ModelFileError
from edge_sql.runtime import SUPPORTED_ARCHITECTURES, Session, validate_gguf


def _write_gguf(path: Path, arch: str, *, tensor_rows: int = 4) -> Path:
    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.ones((tensor_rows, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _cut(src: Path, dst: Path, n_bytes: int) -> Path:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(fin.read(n_bytes))
    return dst


def test_valid_gguf_reports_its_header(smollm2_gguf: Path) -> None:
    info = validate_gguf(smollm2_gguf)
    assert info.architecture == "llama"
    assert info.block_count == 30
    assert info.n_tensors == 272
    assert info.file_size == smollm2_gguf.stat().st_size
    assert 0 < info.tensor_data_bytes < info.file_size


def test_validation_reads_only_the_header(smollm2_gguf: Path) -> None:
    start = time.perf_counter()
    for _ in range(5):
        validate_gguf(smollm2_gguf)
    assert (time.perf_counter() - start) / 5 < 0.5


def test_supported_architectures_are_a_clear_constant() -> None:
    assert SUPPORTED_ARCHITECTURES == frozenset({"qwen35", "llama"})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="model file not found") as caught:
        validate_gguf(tmp_path / "absent.gguf")
    assert caught.value.path == tmp_path / "absent.gguf"  # errors carry what they are about


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="is a directory"):
        validate_gguf(tmp_path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "not a GGUF file"),
        (b"hello, I am a text file pretending to be a model\n" * 20, "does not start with 'GGUF'"),
        (np.random.default_rng(0).bytes(4096), "does not start with 'GGUF'"),
        (b"GGUF" + np.random.default_rng(1).bytes(4096), "GGUF"),
        (b"GGUF" + (3).to_bytes(4, "little") + (1 << 60).to_bytes(8, "little") + bytes(16), "corrupt"),
    ],
    ids=["empty", "text", "random-bytes", "magic-then-garbage", "absurd-tensor-count"],
)
def test_not_a_gguf(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelFileError, match=message) as caught:
        validate_gguf(path)
    assert "\n" not in str(caught.value)


def test_file_cut_in_half_is_truncated(tmp_path: Path, smollm2_gguf: Path) -> None:
    half = _cut(smollm2_gguf, tmp_path / "half.gguf", smollm2_gguf.stat().st_size // 2)
    with pytest.raises(ModelFileError, match="is truncated: its tensors need"):
        validate_gguf(half)


def test_file_cut_inside_the_header(tmp_path: Path, smollm2_gguf: Path) -> None:
    head = _cut(smollm2_gguf, tmp_path / "head.gguf", 100_000)
    with pytest.raises(ModelFileError, match="header ends early"):
        validate_gguf(head)


def test_missing_last_byte_is_caught(tmp_path: Path) -> None:
    good = _write_gguf(tmp_path / "good.gguf", "llama")
    validate_gguf(good)
    short = _cut(good, tmp_path / "short.gguf", good.stat().st_size - 1)
    with pytest.raises(ModelFileError, match="truncated"):
        validate_gguf(short)


def test_unsupported_architecture(tmp_path: Path) -> None:
    path = _write_gguf(tmp_path / "gpt2.gguf", "gpt2")
    with pytest.raises(ModelFileError, match="is a 'gpt2' model; edge-sql runs only: llama, qwen35"):
        validate_gguf(path)


def test_session_rejects_bad_files_before_llama_cpp(tmp_path: Path, smollm2_gguf: Path) -> None:
    """Loading goes through the validator: a bad file is a ModelFileError, never a crash."""
    half = _cut(smollm2_gguf, tmp_path / "half.gguf", smollm2_gguf.stat().st_size // 2)
    for path in (half, _write_gguf(tmp_path / "gpt2.gguf", "gpt2"), tmp_path):
        with pytest.raises(ModelFileError):
            Session(path)


def test_no_crash_in_a_child_process(tmp_path: Path, smollm2_gguf: Path) -> None:
    """Every bad file gives exit code 0 from a child that loads it (a segfault would not)."""
    files = [_cut(smollm2_gguf, tmp_path / f"cut{n}.gguf", n) for n in (8, 24, 5000, 10_000_000)]
    noisy = tmp_path / "noise.gguf"
    shutil.copyfile(smollm2_gguf, noisy)
    with open(noisy, "r+b") as handle:  # scribble over the tensor directory
        handle.seek(2_000_000)
        handle.write(np.random.default_rng(2).bytes(64))
    files.append(noisy)
    script = (
        "import sys\n"
        "from edge_sql.errors import ModelFileError\n"
        "from edge_sql.runtime import Session\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        Session(p, n_ctx=256).close()\n"
        "        print('loaded', p)\n"
        "    except ModelFileError as e:\n"
        "        print('rejected', e)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    result = subprocess.run(
        [sys.executable, "-c", script, *map(str, files)], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == len(files)
    assert all(line.startswith("rejected") for line in lines[:4]), lines


def test_a_file_validated_before_is_read_again_once_it_changes(tmp_path: Path, smollm2_gguf: Path) -> None:
    """Headers are reused by (path, size, mtime, inode): a file cut in place is not."""
    copy = tmp_path / "model.gguf"
    shutil.copyfile(smollm2_gguf, copy)
    first = validate_gguf(copy)
    assert validate_gguf(copy) is first  # reused: the vocabulary is not walked again
    data = copy.read_bytes()
    copy.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="truncated"):
        validate_gguf(copy)
