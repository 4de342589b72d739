"""Speed that holds on a busy machine (runtime/llama/threads.py): OpenMP's short spin is in force
before llama.cpp loads, the thread count follows a slowed step on a fake clock, and no thread
count changes the tokens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge_sql.runtime.llama.threads import (
    FIRST_PROBE_S,
    LAST_PROBE_S,
    SPIN_COUNT,
    WINDOW,
    ThreadGovernor,
    apply_wait_policy,
)

REPO = Path(__file__).resolve().parents[1]


def _libgomp_reads(env_extra: dict[str, str], code: str = "import edge_sql.runtime.llama.backend") -> dict[str, str]:
    """What libgomp itself read when llama.cpp loaded in a fresh process (OMP_DISPLAY_ENV)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(env_extra, OMP_DISPLAY_ENV="VERBOSE", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    shown = {}
    for line in (out.stderr + out.stdout).splitlines():
        name, _, value = line.strip().partition(" = ")
        if name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
            shown[name] = value.strip("'")
    return shown


def test_the_short_spin_is_in_force_when_llama_cpp_loads() -> None:
    assert _libgomp_reads({})["GOMP_SPINCOUNT"] == SPIN_COUNT
    # through the public API's import too (the CLI's path), before anything loads llama.cpp
    assert (
        _libgomp_reads({}, "import edge_sql; from edge_sql import Agent; import llama_cpp")["GOMP_SPINCOUNT"]
        == SPIN_COUNT
    )
    # without edge-sql, libgomp's default spin (what made one busy program stall every step)
    assert _libgomp_reads({}, "import llama_cpp")["GOMP_SPINCOUNT"] == "300000"


def test_a_users_own_openmp_wait_is_left_alone() -> None:
    assert _libgomp_reads({"GOMP_SPINCOUNT": "5"})["GOMP_SPINCOUNT"] == "5"
    active = _libgomp_reads({"OMP_WAIT_POLICY": "active"})
    assert active["OMP_WAIT_POLICY"] == "ACTIVE" and active["GOMP_SPINCOUNT"] != SPIN_COUNT
    env: dict[str, str] = {"OMP_WAIT_POLICY": "passive"}
    assert apply_wait_policy(env) == "OMP_WAIT_POLICY=passive" and "GOMP_SPINCOUNT" not in env
    env = {}
    assert apply_wait_policy(env) == f"GOMP_SPINCOUNT={SPIN_COUNT}" and env == {"GOMP_SPINCOUNT": SPIN_COUNT}


class FakeMachine:
    """Step times by thread count, quiet or with one other program busy on one of 2 cores (the
    shape issue 37 measured: 2 threads collapse, 1 thread holds), on a clock of its own."""

    QUIET: ClassVar[dict[int, float]] = {2: 0.010, 1: 0.017}
    BUSY: ClassVar[dict[int, float]] = {2: 0.400, 1: 0.018}

    def __init__(self) -> None:
        self.now = 0.0
        self.busy = False
        self.applied: list[int] = []
        self.governor = ThreadGovernor(2, self.applied.append, clock=lambda: self.now)

    def run(self, seconds: float) -> dict[int, float]:
        """Decode single tokens for `seconds` of fake time; time spent at each count."""
        spent = {1: 0.0, 2: 0.0}
        end = self.now + seconds
        while self.now < end:
            count = self.governor.count
            step = (self.BUSY if self.busy else self.QUIET)[count]
            self.now += step
            spent[count] += step
            self.governor.record(step, 1)
        return spent


def test_the_thread_count_follows_the_load_on_a_fake_clock() -> None:
    machine = FakeMachine()
    quiet = machine.run(10.0)
    # one probe of 1 thread at the start, one step long, then 2 threads: the quiet rate kept
    assert machine.applied[:2] == [1, 2] and machine.governor.count == 2
    assert quiet[1] < 0.02 * 10.0 and machine.governor.decode_tokens[1] == 1

    machine.busy = True
    first_busy_steps_at_2 = 0
    while machine.governor.count == 2:
        machine.run(0.0001)
        first_busy_steps_at_2 += 1
    assert first_busy_steps_at_2 < 2 * WINDOW  # the window under way when the load came, then one thread
    busy = machine.run(60.0)
    assert machine.governor.count == 1
    # upward probes back off to one every LAST_PROBE_S and stop at their first slow step
    assert busy[2] <= 6 * FakeMachine.BUSY[2]
    rate = sum(busy.values()) / (busy[1] / FakeMachine.BUSY[1] + busy[2] / FakeMachine.BUSY[2])
    assert rate < 1.1 * FakeMachine.BUSY[1]  # within 10% of the best fixed choice under load

    machine.busy = False
    machine.run(LAST_PROBE_S + 1.0)
    assert machine.governor.count == 2  # the other program stopped: back to both cores
    assert machine.governor.decode_tokens[1] > 0 and machine.governor.decode_tokens[2] > 0


def test_a_quiet_machines_first_trial_costs_one_step_where_one_thread_is_not_much_slower() -> None:
    """The 2B shape on a 2-core EPYC: 1 thread decodes at 1/1.4 the rate of 2 (on a Xeon 1/1.8);
    the trial of 1 thread still ends at its first step, and nothing else runs at 1."""
    machine = FakeMachine()
    machine.QUIET = {2: 0.046, 1: 0.065}
    machine.run(30.0)
    assert machine.governor.decode_tokens[1] == 1 and machine.governor.count == 2


def test_steps_of_several_widths_are_compared_within_their_width() -> None:
    """A batched context (runtime/batching/) steps 1 to 8 sequences in turn, a step of eight
    costing 3.3x one: on a quiet machine that is no load (it read as one, and a trial window of
    narrow steps then kept one thread: 57% of the tokens at 1 thread), and a busy program is
    still seen."""
    widths = [8] * 6 + [1] * 6  # eight at once, then one while the others run tool calls
    quiet = {2: 0.010, 1: 0.019}  # a step of one sequence; a step of w costs (2 + w) / 3 of it
    busy = {2: 0.400, 1: 0.020}
    now = [0.0]
    governor = ThreadGovernor(2, lambda _n: None, clock=lambda: now[0])

    def run(seconds: float, costs: dict[int, float]) -> None:
        end = now[0] + seconds
        i = 0
        while now[0] < end:
            width = widths[i % len(widths)]
            step = costs[governor.count] * (2 + width) / 3
            now[0] += step
            governor.record(step, width)
            i += 1

    run(60.0, quiet)
    at_one = governor.decode_tokens[1] / sum(governor.decode_tokens.values())
    assert governor.count == 2 and at_one < 0.03  # the first trial of each width, a step or so each
    governor.decode_tokens.clear()
    run(60.0, busy)
    assert governor.count == 1 and governor.decode_tokens[1] > 0.9 * sum(governor.decode_tokens.values())


def test_prefill_batches_and_fixed_counts_are_counted_not_governed() -> None:
    applied: list[int] = []
    governor = ThreadGovernor(2, applied.append, clock=lambda: 0.0)
    for _ in range(20):
        governor.record(5.0, 512)  # a slow prefill is no decode step
    assert applied == [] and governor.prefill_tokens == {2: 20 * 512}
    gpu = ThreadGovernor(4, applied.append, adaptive=False, clock=lambda: 0.0)
    for seconds in [0.01] * 8 + [1.0] * 8:
        gpu.record(seconds, 1)
    assert applied == [] and gpu.count == 4 and gpu.decode_tokens == {4: 16}
    assert FIRST_PROBE_S < LAST_PROBE_S


def _flipped_logits(path: Path, flip: bool, **options: Any) -> tuple[list[np.ndarray], Any]:
    """Greedy one-token steps after a 600-token prompt (past the 512 cells from which ggml's CPU
    flash attention splits a step's KV cells across the threads), the count flipped between 2
    and 1 before every step when `flip`; each step's logits, and the session's info."""
    from edge_sql.runtime import Session

    with Session(path, n_ctx=1024, n_threads=2, **options) as session:
        context = session._context
        prompt = session.tokenize("SELECT name FROM artists WHERE artist_id = 1; " * 60, special=False)[:600]
        assert len(prompt) == 600
        session.eval(prompt)
        rows, token = [], int(np.argmax(context.logits()))
        for position in range(600, 616):
            if flip:
                context.threads._apply(1 if context.threads.count == 2 else 2)
            context.decode([token], position, outputs="last")
            rows.append(context.logits().copy())
            token = int(np.argmax(rows[-1]))
        return rows, session.info


def test_no_thread_count_changes_the_tokens(tiny_gguf_fast: Path) -> None:
    """With a session's own choices, every step's logits are the same bits whether the count is
    fixed or flips between 2 and 1 at every step, 600 cells in; flash attention asked for by name
    would change them (the reason an adapting session runs without it), so it keeps the count."""
    fixed, info = _flipped_logits(tiny_gguf_fast, flip=False)
    flipped, _ = _flipped_logits(tiny_gguf_fast, flip=True)
    assert info.adapt_threads and info.flash_attn == "off"
    assert all(np.array_equal(a, b) for a, b in zip(fixed, flipped, strict=True))

    flash_fixed, flash_info = _flipped_logits(tiny_gguf_fast, flip=False, flash_attn=True)
    flash_flipped, _ = _flipped_logits(tiny_gguf_fast, flip=True, flash_attn=True)
    assert flash_info.flash_attn == "on" and not flash_info.adapt_threads
    assert not all(np.array_equal(a, b) for a, b in zip(flash_fixed, flash_flipped, strict=True))


def test_the_governor_counts_tokens_by_thread_count(tiny_gguf_fast: Path) -> None:
    """Greedy tokens with the count flipped at every step equal those of a fixed count; the stats
    say how many tokens each count decoded."""
    from edge_sql.runtime import SamplingParams, Session

    def greedy(flip: bool) -> tuple[list[int], dict[str, dict[str, int]]]:
        with Session(tiny_gguf_fast, n_ctx=512, n_threads=2) as session:
            context = session._context
            if flip:
                governor = context.threads
                original = governor.record

                def flipping(seconds: float, n_tokens: int) -> None:
                    original(seconds, n_tokens)
                    governor._apply(1 if governor.count == 2 else 2)

                governor.record = flipping  # type: ignore[method-assign]
            session.eval(session.tokenize("SELECT name FROM artists WHERE", special=False))
            completion = session.generate(params=SamplingParams(temperature=0.0), max_tokens=40, stop_tokens=[])
            return completion.tokens, session.timings.threads_json()

    fixed, fixed_threads = greedy(False)
    flipped, flipped_threads = greedy(True)
    assert len(fixed) == 40 and flipped == fixed
    assert set(flipped_threads["decode"]) == {"1", "2"}
    assert sum(flipped_threads["decode"].values()) == sum(fixed_threads["decode"].values())
    assert "prefill" in fixed_threads or "decode" in fixed_threads


def test_adapting_and_flash_attention_are_resolved_together() -> None:
    """An adapting count runs without flash attention ("auto" would turn it on for the CPU);
    flash attention asked for keeps the count fixed; a fixed count keeps what was asked."""
    from edge_sql.runtime.llama.loading import attention_for_threads
    from edge_sql.runtime.tuning.settings import candidates, flash_options

    assert attention_for_threads(None, True) == (False, True)
    assert attention_for_threads(False, True) == (False, True)
    assert attention_for_threads(True, True) == (True, False)
    assert attention_for_threads(None, False) == (None, False)
    assert attention_for_threads(True, False) == (True, False)
    assert flash_options(1) == (True, False) and flash_options(2) == (False,)
    assert all(s.flash_attn is False for s in candidates(2) if s.n_threads > 1)
    assert any(s.flash_attn for s in candidates(1) if s.n_threads == 1)


def test_tune_times_its_choice_quiet_and_beside_a_busy_program(tiny_gguf_fast: Path) -> None:
    """`busy_check` (what `edge-sql tune` prints): both rates measured, and the loaded run's decode
    tokens accounted for by thread count."""
    from edge_sql.runtime.tuning import busy_check, default_settings

    check = busy_check(tiny_gguf_fast, default_settings(), tokens=24)
    assert check.quiet_tok_s > 0 and check.loaded_tok_s > 0
    assert sum(check.loaded_threads.values()) == 24 - 1  # the last token sampled is not decoded yet
    assert set(check.loaded_threads) <= {str(n) for n in range(1, default_settings().n_threads + 1)}
    assert check.line().startswith(f"decode with these settings: {check.quiet_tok_s:.1f} tok/s quiet")
    assert check.to_json()["loaded_threads"] == check.loaded_threads


def test_on_eight_cores_it_leaves_one_core_per_busy_program() -> None:
    """A simulation of a bigger machine: work divides over the threads while each has a core;
    a thread sharing a core with a busy program stalls every step. One busy program: 7 threads;
    a second one: 6; both gone: 8 again."""
    now = [0.0]
    busy = [0]
    governor = ThreadGovernor(8, lambda n: None, clock=lambda: now[0])

    def run(seconds: float) -> None:
        end = now[0] + seconds
        while now[0] < end:
            count = governor.count
            step = 0.08 / count if count <= 8 - busy[0] else 0.4
            now[0] += step
            governor.record(step, 1)

    run(5.0)
    assert governor.count == 8
    busy[0] = 1
    run(30.0)
    assert governor.count == 7
    busy[0] = 2
    run(30.0)
    assert governor.count == 6
    busy[0] = 0
    run(LAST_PROBE_S + 2 * FIRST_PROBE_S + 1.0)  # one trial within the longest wait, the next soon after
    assert governor.count == 8
