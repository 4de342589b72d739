"""The results file: one JSON line per finished piece of work, so a crashed run can resume.

Every record has a `kind` ("episode", "fidelity", "load", "crash") and, for work items, a key
(variant, mode, question id, seed). A run skips the keys already present; a line cut short
by a crash is ignored. Writers append one line at a time and flush it, so at most the
episode in progress is lost.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast, overload

from edge_sql.bench.records import (
    BenchRecord,
    CrashRecord,
    EpisodeRecord,
    FidelityRecord,
    KeyFields,
    LoadRecord,
    PeakRecord,
    ProcessRecord,
)

RESULTS_FILE_NAME = "results.jsonl"


@dataclass(frozen=True, order=True)
class WorkKey:
    """Identifies one episode (or one fidelity comparison) of a bench run."""

    variant: str
    mode: str
    question_id: str
    seed: int

    def as_fields(self) -> KeyFields:
        return {"variant": self.variant, "mode": self.mode, "question_id": self.question_id, "seed": self.seed}

    @classmethod
    def of(cls, record: KeyFields) -> WorkKey:
        return cls(record["variant"], record["mode"], str(record["question_id"]), int(record["seed"]))


class ResultsLog:
    """Append-only JSON-lines file of bench records."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @overload
    def records(self, kind: Literal["episode"]) -> Iterator[EpisodeRecord]: ...
    @overload
    def records(self, kind: Literal["fidelity"]) -> Iterator[FidelityRecord]: ...
    @overload
    def records(self, kind: Literal["load"]) -> Iterator[LoadRecord]: ...
    @overload
    def records(self, kind: Literal["process"]) -> Iterator[ProcessRecord]: ...
    @overload
    def records(self, kind: Literal["peak"]) -> Iterator[PeakRecord]: ...
    @overload
    def records(self, kind: Literal["crash"]) -> Iterator[CrashRecord]: ...
    @overload
    def records(self, kind: None = None) -> Iterator[BenchRecord]: ...
    def records(self, kind: str | None = None) -> Iterator[BenchRecord]:
        """Every complete record (optionally of one kind), in the order written: each the shape
        records.py gives its kind (this file is written only by those writers)."""
        if not self.path.is_file():
            return
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash
                if isinstance(record, dict) and (kind is None or record.get("kind") == kind):
                    yield cast("BenchRecord", record)

    def done(self, kind: Literal["episode", "fidelity"]) -> set[WorkKey]:
        """The keys of the finished work items of `kind`."""
        return {WorkKey.of(r) for r in self.records(kind)}

    def append(self, record: Mapping[str, object]) -> None:
        """Write one record (records.py says each kind's shape) as one line and push it to disk."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        with self.path.open("a", encoding="utf-8") as handle:
            if handle.tell() > 0 and not self._ends_with_newline():
                handle.write("\n")  # close a line a crash cut short
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"

    def clear(self) -> None:
        """Start afresh (what `--no-resume` does)."""
        self.path.unlink(missing_ok=True)
