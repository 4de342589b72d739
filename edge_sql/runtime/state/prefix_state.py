"""Saved llama.cpp states of a shared prompt prefix, in memory and on disk.

Every question starts with the same system prompt and tool list (hundreds of tokens, seconds
of prefill on a CPU). `Session` evaluates that prefix once, snapshots its sequence state
(attention KV cells plus the recurrent state of hybrid models such as Qwen3.5) with the
logits after it, and restores the snapshot for the next question. The `PrefixCache` it is
handed keeps the last snapshot in memory and, with a folder, many on disk, under a key that
names everything the state depends on: the model file, the exact prefix tokens (the template
text as this vocabulary spells it), the session's options that shape its context, the backend
and the llama.cpp build. A file that is corrupt, truncated or for another key is ignored with a
note and replaced by a fresh one.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sql.convert.atomic import atomic_output
from edge_sql.runtime.options import SessionOptions
from edge_sql.runtime.state.identity import file_fingerprint, llama_build

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024
MAX_OPENINGS = 4  # whole openings kept in memory for the other episodes of a vote (a few MB to tens each)
MAGIC = b"EDGESQL-STATE-1\n"
SUFFIX = ".state"


@dataclass(frozen=True)
class StateSnapshot:
    """A context at one point: its tokens, llama.cpp's sequence state and the next-token logits."""

    tokens: tuple[int, ...]
    state: bytes
    logits: np.ndarray

    @property
    def nbytes(self) -> int:
        return len(self.state) + self.logits.nbytes + 4 * len(self.tokens)


def prefix_key(model_path: Path, options: SessionOptions, backend: str, tokens: Sequence[int]) -> str:
    """What a saved prefix state depends on, hashed: model file, tokens, the resolved options'
    state fields (`SessionOptions.state_fields`), backend, llama.cpp build."""
    parts = {
        "model": file_fingerprint(model_path),
        "tokens": hashlib.sha256(np.asarray(tokens, dtype=np.int32).tobytes()).hexdigest(),
        "n_tokens": len(tokens),
        "options": options.state_fields(),
        "backend": backend,
        "build": llama_build(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]


class PrefixCache:
    """The last prefix state in memory, and optionally many in a folder of at most `max_bytes`.

    `log` receives one-line notes (a state ignored or not saved). A session made without one
    keeps a memory-only cache of its own.
    """

    def __init__(
        self,
        folder: str | Path | None = None,
        *,
        max_bytes: int = DEFAULT_CACHE_BYTES,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.max_bytes = max_bytes
        self.log = log or (lambda _message: None)
        self._memory: tuple[str, StateSnapshot] | None = None
        self._openings: OrderedDict[str, StateSnapshot] = OrderedDict()  # memory only (`put(..., disk=False)`)
        self._lock = threading.RLock()  # the sessions of a group (runtime/batching/sequences.py) share one
        self._made = threading.Condition(self._lock)
        self._making: set[str] = set()  # keys whose state a caller of `claim` is making

    def _get(self, key: str, tokens: Sequence[int]) -> StateSnapshot | None:
        """The snapshot saved under `key` for exactly `tokens`, or None (holding the lock)."""
        opening = self._openings.get(key)
        if opening is not None and list(opening.tokens) == list(tokens):
            return opening
        if self._memory is not None and self._memory[0] == key and list(self._memory[1].tokens) == list(tokens):
            return self._memory[1]
        if self.folder is None:
            return None
        path = self.folder / f"{key}{SUFFIX}"
        if not path.is_file():
            return None
        try:
            snapshot = read_snapshot(path, key)
        except (OSError, ValueError) as exc:
            self.log(f"note: ignoring the saved prompt state {path.name} ({exc}); it will be rebuilt")
            self._remove(path)
            return None
        if list(snapshot.tokens) != list(tokens):
            self.log(f"note: ignoring the saved prompt state {path.name} (other tokens); it will be rebuilt")
            self._remove(path)
            return None
        os.utime(path)  # most recently used: the last to be evicted
        self._memory = (key, snapshot)
        return snapshot

    @contextmanager
    def claim(self, key: str, tokens: Sequence[int]) -> Iterator[StateSnapshot | None]:
        """The snapshot saved under `key` for exactly `tokens`; None only to the one caller that
        is to make it (and `put` it within the block): while it does, others claiming the same
        key wait, then get its state. N sessions starting at once evaluate a shared prefix
        once, not N times."""
        with self._made:
            while key in self._making:
                self._made.wait()
            snapshot = self._get(key, tokens)
            if snapshot is None:
                self._making.add(key)
        try:
            yield snapshot
        finally:
            if snapshot is None:
                with self._made:
                    self._making.discard(key)
                    self._made.notify_all()

    def put(self, key: str, snapshot: StateSnapshot, *, disk: bool = True) -> None:
        """Keep `snapshot` in memory and, with a folder, on disk (evicting the least recently used).
        `disk=False`: a state of one question's whole opening, kept in memory beside the shared
        prefix's (the last few) for the other episodes of a vote, never written."""
        with self._lock:
            if not disk:
                self._openings[key] = snapshot
                while len(self._openings) > MAX_OPENINGS:
                    self._openings.popitem(last=False)
                return
            self._put(key, snapshot)

    def _put(self, key: str, snapshot: StateSnapshot) -> None:
        self._memory = (key, snapshot)
        if self.folder is None or snapshot.nbytes > self.max_bytes:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_snapshot(self.folder / f"{key}{SUFFIX}", key, snapshot)
            self._evict()
        except OSError as exc:
            self.log(f"note: could not save the prompt state in {self.folder} ({exc})")

    def discard(self, key: str) -> None:
        """Forget a snapshot that llama.cpp refused to load."""
        with self._lock:
            self._discard(key)

    def _discard(self, key: str) -> None:
        self._openings.pop(key, None)
        if self._memory is not None and self._memory[0] == key:
            self._memory = None
        if self.folder is not None:
            self._remove(self.folder / f"{key}{SUFFIX}")

    def _evict(self) -> None:
        assert self.folder is not None  # only a cache with a folder evicts files
        files = sorted(self.folder.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        total = 0
        for path in files:
            total += path.stat().st_size
            if total > self.max_bytes:
                self._remove(path)

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass


def write_snapshot(path: Path, key: str, snapshot: StateSnapshot) -> None:
    """MAGIC, header length, JSON header (key, sizes, SHA-256 of the payload), payload; atomic."""
    tokens = np.asarray(snapshot.tokens, dtype="<i4").tobytes()
    logits = np.asarray(snapshot.logits, dtype="<f4").tobytes()
    payload = [tokens, snapshot.state, logits]
    digest = hashlib.sha256()
    for part in payload:
        digest.update(part)
    header = json.dumps({"key": key, "sizes": [len(p) for p in payload], "sha256": digest.hexdigest()}).encode()
    with atomic_output(path) as tmp, tmp.open("wb") as handle:
        handle.write(MAGIC + struct.pack("<I", len(header)) + header)
        for part in payload:
            handle.write(part)


def read_snapshot(path: Path, key: str) -> StateSnapshot:
    """Read and verify a snapshot file; ValueError when it is corrupt, truncated or for another key."""
    data = path.read_bytes()
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        raise ValueError("not a prompt state file")
    (header_len,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    try:
        header = json.loads(data[start : start + header_len])
        sizes = [int(n) for n in header["sizes"]]
    except (ValueError, KeyError, TypeError):
        raise ValueError("unreadable header") from None
    if header.get("key") != key:
        raise ValueError("saved under another key")
    offset = start + header_len
    if len(sizes) != 3 or len(data) != offset + sum(sizes):
        raise ValueError(f"truncated: {len(data)} bytes, expected {offset + sum(sizes)}")
    parts = []
    for size in sizes:
        parts.append(data[offset : offset + size])
        offset += size
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    if digest.hexdigest() != header.get("sha256"):
        raise ValueError("checksum mismatch")
    tokens, state, logits = parts
    return StateSnapshot(
        tokens=tuple(int(t) for t in np.frombuffer(tokens, dtype="<i4")),
        state=state,
        logits=np.frombuffer(logits, dtype="<f4").astype(np.float32),
    )
