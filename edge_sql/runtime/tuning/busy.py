"""The chosen settings' decode rate on a quiet machine and beside one other busy program.

Why: a laptop is never idle. `edge-sql tune` shows both rates, so a user sees what an indexer or
a browser costs an answer (issue 37: without the short spin and the thread count that follows
the load, one busy program made decoding 80x slower on a 2-core machine).
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from edge_sql.runtime.session import Session
from edge_sql.runtime.text.sampling import SamplingParams
from edge_sql.runtime.tuning.settings import Settings

BUSY_TOKENS = 64  # decoded tokens per rate: enough for the thread count to settle under load


class BusyPrograms:
    """`n` processes spinning on a core each while the block runs (the programs a laptop runs)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> BusyPrograms:
        self._procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        time.sleep(0.5 if self.n else 0)  # started and spinning before anything is timed
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for proc in self._procs:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class BusyCheck:
    """Decode tok/s of one setting, quiet and beside one busy program, and the thread counts used."""

    quiet_tok_s: float
    loaded_tok_s: float
    loaded_threads: dict[str, int]  # decode tokens per thread count under load

    def to_json(self) -> dict[str, object]:
        return {
            "quiet_tok_s": round(self.quiet_tok_s, 2),
            "loaded_tok_s": round(self.loaded_tok_s, 2),
            "loaded_threads": self.loaded_threads,
        }

    def line(self) -> str:
        counts = ", ".join(f"{tokens} at {count}" for count, tokens in self.loaded_threads.items())
        return (
            f"decode with these settings: {self.quiet_tok_s:.1f} tok/s quiet, {self.loaded_tok_s:.1f} tok/s "
            f"beside one other busy program (tokens by thread count: {counts})"
        )


def busy_check(model_path: Path, settings: Settings, *, tokens: int = BUSY_TOKENS) -> BusyCheck:
    """Greedy decode of `tokens` tokens with `settings` (the thread count adapting, as `run` has
    it), once quiet and once while one other process spins."""
    with Session(model_path, settings.session_options(n_ctx=max(256, 2 * tokens), n_gpu_layers=0)) as session:
        prompt = session.tokenize("Which customers spent the most money in total?", special=False)

        def rate() -> tuple[float, dict[str, int]]:
            session.reset()
            session.eval(prompt)
            done = session.generate(params=SamplingParams(greedy=True), max_tokens=tokens)
            return (
                done.timings.generated_tokens / done.timings.generate_s if done.timings.generate_s else 0.0,
                done.timings.threads_json().get("decode", {}),
            )

        rate()  # warm-up: the first decodes pay for pages and caches
        quiet, _ = rate()
        with BusyPrograms(1):
            loaded, threads = rate()
    return BusyCheck(quiet, loaded, threads)
