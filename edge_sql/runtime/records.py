"""The plain records a session hands out: how it was loaded, what a call cost, what it added.

A leaf of the runtime (it imports only the options): the agent, the bench and the speculation
code read these without depending on the session that fills them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from edge_sql.runtime.options import SpeculateMode, settings_line

StopReason = Literal["stop", "grammar_done", "max_tokens", "cancelled", "context_full"]

BufferRole = Literal["mapped", "repacked", "recurrent", "mtp", "other"]
MTP_PREFIX = "MTP "  # the MTP drafter's context's buffers, as the session names them


def buffer_role(label: str) -> BufferRole:
    """What a buffer llama.cpp logged holds, from its label ("CPU_Mapped model", "CPU_REPACK
    model", "CPU RS", "CPU KV", "CPU compute"; the session prefixes its MTP context's with
    `MTP_PREFIX`). llama.cpp's C API has no per-buffer sizes, so its log is the source, and this
    is the one place that knows its labels."""
    if label.startswith(MTP_PREFIX):
        return "mtp"
    if label.endswith("_Mapped model"):
        return "mapped"
    if label.endswith("_REPACK model"):
        return "repacked"
    return "recurrent" if label.split()[-1] == "RS" else "other"


@dataclass(frozen=True)
class SessionInfo:
    """How the model was loaded: what `edge-sql run` reports at start."""

    model_path: Path
    architecture: str
    model_bytes: int
    backend: str  # "CPU" or the GPU backend's name ("CUDA", "Metal", ...)
    gpu_layers: int  # layers offloaded to the GPU (0 on CPU)
    n_layers: int
    n_threads: int
    n_ctx: int
    n_batch: int
    n_ubatch: int
    repack: bool
    n_vocab: int
    flash_attn: str = "auto"  # "on", "off" or "auto" (llama.cpp decides)
    mtp_layers: int = 0  # multi-token-prediction layers loaded (Session(mtp=True): llama.cpp's load_mtp)
    speculate: SpeculateMode = "off"  # "off", "lookup", "auto", "mtp" (see runtime/speculation/speculative.py)
    draft_max: int = 0  # most draft tokens in one verify batch (0: speculation off)
    rollback: str = ""  # how rejected drafts leave memory: "kv" (attention only) or "kv+n_rs_seq"
    # bytes llama.cpp allocated beyond the mapped file, by kind ("CPU KV", "CPU compute", ...)
    buffers: dict[str, int] = field(default_factory=dict)
    # repacked weights: the file's mapping was released after loading (runtime/llama/mapping.py), so
    # the repacked copies take the place of their mapped originals instead of adding to them
    mapping_released: bool = False
    n_seq: int = 1  # sequences (episodes at once) in the context, each n_ctx tokens
    # the thread count follows the machine's load (runtime/llama/threads.py; CPU, more than one
    # thread, flash attention off: see loading.py's `attention_for_threads`)
    adapt_threads: bool = False

    @property
    def settings(self) -> str:
        """The speed-relevant llama.cpp settings in one short line (what `--json` stats name)."""
        return settings_line(
            flash_attn=self.flash_attn,
            n_ubatch=self.n_ubatch,
            n_threads=self.n_threads,
            repack=self.repack,
            gpu_layers=self.gpu_layers,
            speculate=self.speculate,
            draft_max=self.draft_max,
        )

    @property
    def buffer_bytes(self) -> int:
        """llama.cpp's own allocations that are not the memory-mapped model file (nor, once the
        mapping is released, the repacked copies that stand in for its pages)."""
        return sum(
            size
            for kind, size in self.buffers.items()
            if buffer_role(kind) != "mapped" and not (self.mapping_released and buffer_role(kind) == "repacked")
        )

    def describe(self) -> str:
        where = f"{self.backend}, {self.gpu_layers}/{self.n_layers} layers on GPU" if self.gpu_layers else "CPU"
        return (
            f"{self.model_path.name} ({self.architecture}, {self.model_bytes / 1e9:.2f} GB) on {where}, "
            f"{self.n_threads} thread{'' if self.n_threads == 1 else 's'}"
            f"{' (fewer while the machine is busy)' if self.adapt_threads else ''}, context {self.n_ctx} tokens"
        )


@dataclass
class DraftCounts:
    """Draft tokens of one source: evaluated in verify batches, accepted, rolled back.

    The one count of speculation's outcome: the verifier fills one per source and call
    (`Timings.drafts`), a drafter that learns from its outcomes keeps its own (`MTPDrafter`).
    """

    drafted: int = 0  # draft tokens evaluated (each verify batch also holds one real token)
    accepted: int = 0  # of which the model's own choice agreed: now part of the context
    batches: int = 0  # verify batches

    @property
    def rolled_back(self) -> int:
        """Drafted but rejected: evaluated, then removed from llama.cpp's memory."""
        return self.drafted - self.accepted

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def record(self, accepted: int, proposed: int) -> None:
        """One verify batch: `accepted` of `proposed` drafts kept."""
        self.drafted += proposed
        self.accepted += accepted
        self.batches += 1

    def add(self, other: DraftCounts) -> None:
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.batches += other.batches

    def to_json(self) -> dict[str, int | float]:
        return {
            "drafted": self.drafted,
            "accepted": self.accepted,
            "rolled_back": self.rolled_back,
            "batches": self.batches,
            "acceptance": round(self.acceptance, 4),
        }


@dataclass
class Timings:
    """Token counts and seconds; `Session.timings` sums them since the last reset."""

    prompt_tokens: int = 0
    prompt_s: float = 0.0  # eval(): decoding prompt tokens (and a pending sampled token)
    restored_tokens: int = 0  # prompt tokens restored from a saved prefix state, not evaluated
    restore_s: float = 0.0  # of eval()'s time, restoring them
    generated_tokens: int = 0  # sampled + forced
    forced_tokens: int = 0  # of which the grammar forced
    generate_s: float = 0.0  # wall time inside generate()
    decode_s: float = 0.0  # of which llama_decode
    sample_s: float = 0.0  # of which sampling and grammar masks
    # speculative decoding, per draft source: drafted (evaluated), accepted, rolled back
    drafts: dict[str, DraftCounts] = field(default_factory=dict)
    # tokens evaluated per ("prefill" or "decode", thread count): the count follows the machine's
    # load (runtime/llama/threads.py), so a phase may have run with several
    threads: Counter[tuple[str, int]] = field(default_factory=Counter)

    @property
    def prompt_tok_s(self) -> float:
        return self.prompt_tokens / self.prompt_s if self.prompt_s else 0.0

    @property
    def decode_tok_s(self) -> float:
        return self.generated_tokens / self.generate_s if self.generate_s else 0.0

    @property
    def draft_tokens(self) -> int:
        return sum(counts.drafted for counts in self.drafts.values())

    @property
    def accepted_draft_tokens(self) -> int:
        return sum(counts.accepted for counts in self.drafts.values())

    @property
    def rolled_back_tokens(self) -> int:
        """Draft tokens evaluated and then removed again (not part of the context)."""
        return self.draft_tokens - self.accepted_draft_tokens

    def threads_json(self) -> dict[str, dict[str, int]]:
        """`threads` as the stats show it: {"prefill": {"2": 812}, "decode": {"2": 290, "1": 41}}."""
        shown: dict[str, dict[str, int]] = {}
        for (phase, count), tokens in sorted(self.threads.items(), key=lambda item: (item[0][0], -item[0][1])):
            shown.setdefault(phase, {})[str(count)] = tokens
        return shown

    def add(self, other: Timings) -> None:
        for name in self.__dataclass_fields__:
            if name == "drafts":
                for source, counts in other.drafts.items():
                    self.drafts.setdefault(source, DraftCounts()).add(counts)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Completion:
    """What one `generate` call added to the context.

    `tokens` are all tokens appended (including a final stop token), from context position
    `start` to `end`; `text` is their text without that stop token. `ended_turn` says whether a
    stop token closed the turn.
    """

    tokens: list[int]
    text: str
    stop_reason: StopReason
    n_forced: int
    ended_turn: bool
    timings: Timings = field(default_factory=Timings)
    # with generate(audit=True): grammar steps checked, and how many of them the grammar
    # overruled the model's own top token (its raw argmax was not allowed)
    n_audited: int = 0
    n_overruled: int = 0
    start: int = 0  # the context position of its first token: [start, end) are the model's own

    @property
    def end(self) -> int:
        """The context position after its last token."""
        return self.start + len(self.tokens)
