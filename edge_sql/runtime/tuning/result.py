"""What a calibration measured and chose: the records the cache stores and `edge-sql tune` shows."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from edge_sql.runtime.state.identity import cpu_model, llama_build
from edge_sql.runtime.tuning.settings import Settings

# 2: the bound counts ggml's attention work buffer; other_load. 3: draft_max in budget.
# 4: the quick mode measures at stretched 1,024/8,192-token contexts (its earlier choices could be 16% slower)
# 5: one calibration per file and machine (no thread count in the key: the caller's is a candidate)
# 6: episodes at once (Settings.parallel, sequence_bytes) and their measured speed-up
# 7: the default N is the fewest near the best measured speed (parallel_rates), up to 16 fit (parallel_max)
# 8: flash attention off above one thread (the thread count adapts to the load; settings.flash_options)
# 9: widths timed with every decode on one thread and no wait for a finished session (issue 54):
#    earlier rates understate what several sequences at once give
CACHE_VERSION = 9


@dataclass
class Measurement:
    """One candidate's measured costs (seconds per token at each context length) and memory bound."""

    settings: Settings
    points: list[int]
    prefill_s: list[float]
    decode_s: list[float]
    memory_bytes: int  # bound on peak RSS beyond the model file, at n_ctx
    episode_s: float = 0.0  # predicted time of `episode_profile()`
    fits: bool = True
    state_bytes: int = 0  # llama.cpp's recurrent state of one sequence (0: attention only)
    n_vocab: int = 0

    def to_json(self) -> dict:
        return {**asdict(self), "settings": asdict(self.settings)}

    @classmethod
    def from_json(cls, data: dict) -> Measurement:
        return cls(**{**data, "settings": Settings(**data["settings"])})


@dataclass
class Calibration:
    """The result: what was measured, under which budget, and the chosen settings."""

    key: str
    model_path: str
    mode: str  # "quick" or "full"
    chosen: Settings
    measurements: list[Measurement]
    memory_allowance: int
    seconds: float
    machine: str = field(default_factory=cpu_model)
    build: str = field(default_factory=llama_build)
    note: str = ""
    other_load: float | None = None  # run-queue length of other processes when it ended (None: unknown)
    mtp_bytes: int = 0  # the MTP drafter's own context (files with an MTP head): counted before fitting draft_max
    parallel_allowance: int = 0  # what several episodes at once may allocate (tuning/parallel.py)
    parallel_speedup: float = 1.0  # aggregate decode tok/s of `chosen.parallel` sequences over one, measured
    parallel_rates: list[list[float]] = field(default_factory=list)  # [sequences, aggregate decode tok/s] timed

    def best(self) -> Measurement:
        """The fastest measured candidate regardless of memory."""
        return min(self.measurements, key=lambda m: m.episode_s)

    def chosen_measurement(self) -> Measurement:
        return next(m for m in self.measurements if m.settings == self.chosen)

    def to_json(self) -> dict:
        data = asdict(self)
        data["chosen"] = asdict(self.chosen)
        data["measurements"] = [m.to_json() for m in self.measurements]
        data["version"] = CACHE_VERSION
        return data

    @classmethod
    def from_json(cls, data: dict) -> Calibration:
        data = dict(data)
        if data.pop("version", None) != CACHE_VERSION:
            raise ValueError("another cache version")
        data["chosen"] = Settings(**data["chosen"])
        data["measurements"] = [Measurement.from_json(m) for m in data["measurements"]]
        return cls(**data)
