"""Interrupted work leaves nothing behind: SIGTERM, SIGHUP and SIGINT sent to real `edge-sql
convert`, `quantize` and `pull` processes at several points; partial files of killed processes
removed by the next writer; a second pull of the same model waits for the first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edge_sql.convert.atomic import atomic_output, partial_files
from edge_sql.store.index import ModelStore

REPO_ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from edge_sql.cli import main; main()"]


def start(args: list[str], **env: str) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **env}
    return subprocess.Popen(
        [*CLI, *args],
        env=environment,
        cwd=REPO_ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_as_in_a_terminal,
    )


def _as_in_a_terminal() -> None:
    """Ctrl-C reaches the command as it does in a terminal, even where pytest itself was
    started in the background by a shell without job control, which makes its children
    ignore SIGINT (POSIX), so that Python installs no KeyboardInterrupt handler in them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def parts_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.part"))


def wait_for_part(process: subprocess.Popen, folder: Path, *, count: int = 1, timeout: float = 300) -> None:
    """Wait until `count` different .part files have appeared under `folder`."""
    seen: set[Path] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.update(parts_under(folder))
        if len(seen) >= count:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.01)
    raise AssertionError(f"no .part file appeared under {folder}")


def stop(process: subprocess.Popen, signum: int, delay: float) -> tuple[int, str]:
    time.sleep(delay)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


EXIT_CODES = {signal.SIGTERM: 143, signal.SIGHUP: 129, signal.SIGINT: 1}  # SIGINT: click's "Aborted!"


def wait_for_size(process: subprocess.Popen, folder: Path, size: int, timeout: float = 300) -> None:
    """Wait until the .part file under `folder` holds at least `size` bytes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(p.stat().st_size for p in parts_under(folder) if p.exists()) >= size:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.005)
    raise AssertionError(f"the .part file under {folder} did not reach {size} bytes")


@pytest.mark.parametrize(
    ("signum", "written"),
    [
        (signal.SIGTERM, 0.0),
        (signal.SIGINT, 0.3),
        (signal.SIGHUP, 0.8),
    ],
)
def test_convert_interrupted(
    tiny_checkpoint: Path, tiny_gguf_bf16: Path, tmp_path: Path, signum: int, written: float
) -> None:
    """Signalled once a share of the output is written (the same conversion as `tiny_gguf_bf16`):
    a point in the file, not a time, so that a faster converter is still caught in the middle."""
    out = tmp_path / "out" / "model.gguf"
    out.parent.mkdir()
    process = start(["convert", str(tiny_checkpoint), "-o", str(out), "--no-progress"])
    wait_for_part(process, out.parent)
    wait_for_size(process, out.parent, int(written * tiny_gguf_bf16.stat().st_size))
    code, stderr = stop(process, signum, 0.0)
    assert code == EXIT_CODES[signum], stderr
    assert os.listdir(out.parent) == []


def test_convert_terminated_before_writing(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "model.gguf"
    process = start(["convert", str(tiny_checkpoint), "-o", str(out), "--no-progress"])
    code, stderr = stop(process, signal.SIGTERM, 0.3)  # still starting or reading the checkpoint
    assert code in (143, -signal.SIGTERM), stderr  # before the CLI runs: Python's default ending
    assert not out.exists() and parts_under(tmp_path) == []


@pytest.mark.parametrize(
    ("signum", "delay"),
    [
        (signal.SIGTERM, 0.0),
        (signal.SIGTERM, 0.2),
        (signal.SIGINT, 0.0),
    ],
)
def test_quantize_interrupted(tiny_gguf_bf16: Path, tmp_path: Path, signum: int, delay: float) -> None:
    out = tmp_path / "model-q8.gguf"
    process = start(["quantize", str(tiny_gguf_bf16), "-t", "Q8_0", "-o", str(out), "--threads", "1"])
    wait_for_part(process, tmp_path)
    code, stderr = stop(process, signum, delay)
    assert code == EXIT_CODES[signum], stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("signum", "parts_before"),
    [
        (signal.SIGINT, 1),  # while converting to BF16
        (signal.SIGTERM, 2),  # while quantizing
    ],
)
def test_pull_interrupted(tiny_checkpoint: Path, tmp_path: Path, signum: int, parts_before: int) -> None:
    store = tmp_path / "store"
    process = start(["pull", str(tiny_checkpoint), "--quant", "Q8_0"], EDGE_SQL_HOME=str(store), HF_HUB_OFFLINE="1")
    wait_for_part(process, store, count=parts_before)
    code, stderr = stop(process, signum, 0.0)
    assert code == EXIT_CODES[signum], stderr
    assert parts_under(store) == [], stderr
    recorded = ModelStore(store).list()
    assert "Q8_0" not in [m.variant for m in recorded]
    assert all(m.exists for m in recorded)  # BF16 recorded only once complete
    on_disk = sorted(p.name for p in (store / "models").rglob("*.gguf"))
    assert on_disk == sorted(m.path.name for m in recorded)


@pytest.mark.parametrize("interrupted_record", [1, 2])  # the BF16 entry, the Q8_0 entry
def test_pull_interrupted_while_recording_leaves_no_unrecorded_file(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interrupted_record: int
) -> None:
    """A signal while the index is written (the file already renamed into place) takes the new
    file away too: what is on disk is what the index names (CI once caught that window)."""
    from edge_sql.store.pull import pull_model

    store = ModelStore(tmp_path / "store")
    real_add = ModelStore.add
    calls: list[str] = []

    def add_then_interrupted(self: ModelStore, name: str, variant: str, path: Path, **kw: object):
        calls.append(variant)
        if len(calls) == interrupted_record:
            raise KeyboardInterrupt  # as SIGTERM does under edge_sql.interrupts
        return real_add(self, name, variant, path, **kw)

    monkeypatch.setattr(ModelStore, "add", add_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        pull_model(str(tiny_checkpoint), quant="Q8_0", store=store)
    recorded = store.list()
    on_disk = sorted(p.name for p in (store.root / "models").rglob("*.gguf"))
    assert on_disk == sorted(m.path.name for m in recorded)
    assert [m.variant for m in recorded] == (["BF16"] if interrupted_record == 2 else [])
    assert parts_under(store.root) == []


HOLD_PARTIAL = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from edge_sql.convert.atomic import atomic_output\n"
    "with atomic_output(Path(sys.argv[1])) as tmp:\n"
    "    tmp.write_bytes(b'half a model')\n"
    "    print('writing', flush=True)\n"
    "    time.sleep(600)\n"
)


def writer(out: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD_PARTIAL, str(out)],
        text=True,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert process.stdout is not None and process.stdout.readline() == "writing\n"
    return process


def test_partial_file_of_a_killed_writer_is_removed_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "model.gguf"
    killed = writer(out)
    killed.kill()  # SIGKILL: no clean-up can run
    killed.wait()
    left = partial_files(out)
    assert len(left) == 1 and left[0].read_bytes() == b"half a model"
    assert f".model.gguf.{killed.pid}." in left[0].name
    with atomic_output(out) as tmp:
        assert not left[0].exists()  # removed before the new write starts
        tmp.write_bytes(b"a whole model")
    assert sorted(os.listdir(tmp_path)) == ["model.gguf"]
    assert out.read_bytes() == b"a whole model"


def test_partial_file_of_a_live_writer_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "model.gguf"
    running = writer(out)
    try:
        theirs = partial_files(out)
        assert len(theirs) == 1
        with atomic_output(out) as tmp:
            tmp.write_bytes(b"mine")
            assert set(partial_files(out)) == {theirs[0], tmp}
        assert theirs[0].exists() and out.read_bytes() == b"mine"
    finally:
        running.kill()
        running.wait()


def test_quantize_after_a_killed_quantize(tiny_gguf_bf16: Path, tmp_path: Path) -> None:
    out = tmp_path / "model-q8.gguf"
    process = start(["quantize", str(tiny_gguf_bf16), "-t", "Q8_0", "-o", str(out), "--threads", "1"])
    wait_for_part(process, tmp_path)
    process.kill()
    process.communicate()
    assert len(parts_under(tmp_path)) == 1
    again = start(["quantize", str(tiny_gguf_bf16), "-t", "Q8_0", "-o", str(out), "--threads", "1"])
    _, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr
    assert os.listdir(tmp_path) == ["model-q8.gguf"]


LOCK_HOLDER = (
    "import sys\n"
    "from pathlib import Path\n"
    "from edge_sql.store.lock import model_lock\n"
    "with model_lock(Path(sys.argv[1]), 'tiny', log=lambda m: print(m, flush=True)):\n"
    "    print('holding', flush=True)\n"
    "    sys.stdin.readline()\n"
    "print('released', flush=True)\n"
)


def test_second_pull_of_a_model_waits_for_the_first(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def holder() -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(tmp_path)],
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    first = holder()
    assert first.stdout.readline() == "holding\n"
    second = holder()  # sees the lock taken, says so, and waits
    procs = [first, second]
    assert second.stdout.readline() == (
        f"another pull of tiny is running (process {first.pid}); waiting for it to finish\n"
    )
    time.sleep(0.3)
    assert second.poll() is None
    first.stdin.write("\n")
    first.stdin.flush()
    assert first.stdout.readline() == "released\n"
    assert second.stdout.readline() == "holding\n"
    second.stdin.write("\n")
    second.stdin.flush()
    assert second.stdout.readline() == "released\n"
    for process in procs:
        assert process.wait(timeout=10) == 0
