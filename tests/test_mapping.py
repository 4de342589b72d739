"""Releasing the model file's mapping (what repacked weights rely on) frees memory and changes
nothing else: pages llama.cpp reads again fault back in with the same bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sql.runtime import Session, SessionInfo
from edge_sql.runtime.llama.mapping import file_mappings, release_file_pages

ARGS = dict(n_ctx=256, n_gpu_layers=0)


def resident_file_bytes(path: Path) -> int:
    """How much of this process's mappings of `path` is resident now (from /proc/self/smaps)."""
    wanted = set(file_mappings(path))
    total, current = 0, None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):
            current = tuple(int(part, 16) for part in head.split("-")) in wanted
        elif current and head == "Rss:":
            total += int(line.split()[1]) * 1024
    return total


def _logits_after(session: Session, first: list[int], second: list[int], *, release: bool) -> np.ndarray:
    session.eval(first)
    if release:
        assert release_file_pages(session.info.model_path) > 0
    session.eval(second)
    return session.logits()


def test_release_drops_the_resident_pages_of_the_mapped_file(tiny_gguf: Path) -> None:
    with Session(tiny_gguf, **ARGS) as session:
        session.eval(session.tokenize("SELECT name FROM artists"))
        ranges = file_mappings(tiny_gguf)
        mapped = sum(end - start for start, end in ranges)
        assert ranges and mapped >= tiny_gguf.stat().st_size // 2  # the tensors (llama.cpp unmaps unused fragments)
        touched = resident_file_bytes(tiny_gguf)
        assert touched > 1024 * 1024

        assert release_file_pages(tiny_gguf) == mapped
        assert resident_file_bytes(tiny_gguf) < touched / 4


def test_logits_after_a_release_equal_those_without_one(tiny_gguf: Path) -> None:
    with Session(tiny_gguf, **ARGS) as session:
        first = session.tokenize("List the tables of the database.")
        second = session.tokenize(" Then describe the albums table.")
        released = _logits_after(session, first, second, release=True)
    with Session(tiny_gguf, **ARGS) as session:
        kept = _logits_after(session, first, second, release=False)
    assert np.array_equal(released, kept)


def test_a_file_that_is_not_mapped_releases_nothing(tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(64))
    assert file_mappings(other) == []
    assert release_file_pages(other) == 0
    assert resident_file_bytes(other) == 0
    assert release_file_pages(tmp_path / "missing.gguf") == 0


def test_repack_off_keeps_the_mapping_and_counts_no_release(tiny_gguf: Path) -> None:
    with Session(tiny_gguf, **ARGS) as session:
        assert session.info.mapping_released is False
        assert session.info.repack is False


def test_released_repacked_copies_do_not_count_beyond_the_file(tiny_gguf: Path) -> None:
    """The memory bound calibration uses: repacked copies replace the released mapped pages."""
    mib = 1024 * 1024
    buffers = {
        "CPU_Mapped model": 1200 * mib,
        "CPU_REPACK model": 590 * mib,
        "CPU KV": 96 * mib,
        "CPU compute": 40 * mib,
    }
    info = dict(
        model_path=tiny_gguf,
        architecture="qwen35",
        model_bytes=1200 * mib,
        backend="CPU",
        gpu_layers=0,
        n_layers=24,
        n_threads=2,
        n_ctx=12288,
        n_batch=512,
        n_ubatch=256,
        repack=True,
        n_vocab=248320,
        buffers=buffers,
    )
    assert SessionInfo(**info, mapping_released=True).buffer_bytes == 136 * mib
    assert SessionInfo(**info, mapping_released=False).buffer_bytes == 726 * mib
