"""Several sessions on one context (runtime/batching/batched.py, runtime/batching/sequences.py): each sequence
decodes what it would alone, sequences join and leave at any step, memory stays apart.

Real llama.cpp on the tiny Qwen3.5-architecture fixture (attention and recurrent layers, so a
state leaking between sequences shows in the logits), with the sessions driven from threads at
once as `Agent(parallel=N)` and `serve --parallel` drive them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from edge_sql.runtime import SamplingParams, Session
from edge_sql.runtime.batching.sequences import open_sessions

GREEDY = SamplingParams(greedy=True)
PROMPTS = [
    "<|im_start|>user\nHow many albums are there?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nList the tables.<|im_end|>\n<|im_start|>assistant\n",
    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY",
    "The quick brown fox",
]


def _completion(session: Session, prompt: str, n: int = 24) -> list[int]:
    session.reset()
    session.eval(session.tokenize(prompt))
    return session.generate(params=GREEDY, max_tokens=n).tokens


def _all_at_once(jobs: list[Callable[[], object]]) -> list[object]:
    """Run every job in a thread of its own, started together; their results in order."""
    results: list[object] = [None] * len(jobs)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = jobs[i]()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture(scope="module")
def alone(tiny_gguf: Path) -> dict[str, list[int]]:
    with Session(tiny_gguf, n_ctx=512, n_threads=1) as session:
        return {prompt: _completion(session, prompt) for prompt in PROMPTS}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_identical_questions_at_once_decode_as_one_alone(tiny_gguf: Path, alone: dict, n: int) -> None:
    with open_sessions(tiny_gguf, n=n, n_ctx=512, n_threads=1) as group:
        got = _all_at_once([lambda s=s: _completion(s, PROMPTS[0]) for s in group])
        assert group.counts.mean_width > 1.5  # they did share steps
        assert group.info.n_seq == n and group.info.n_ctx == 512
    assert got == [alone[PROMPTS[0]]] * n


def test_different_questions_at_once_each_decode_as_alone(tiny_gguf: Path, alone: dict) -> None:
    with open_sessions(tiny_gguf, n=len(PROMPTS), n_ctx=512, n_threads=1) as group:
        got = _all_at_once([lambda s=s, p=p: _completion(s, p) for s, p in zip(group, PROMPTS)])
    assert got == [alone[p] for p in PROMPTS]


def test_a_sequence_leaves_and_another_joins_without_touching_the_others(tiny_gguf: Path, alone: dict) -> None:
    """Sequence 0 answers three short prompts one after another (each reset clears its cells)
    while sequence 1 decodes one long completion; the long one's logits are its lone ones."""
    with Session(tiny_gguf, n_ctx=512, n_threads=1) as single:
        single.eval(single.tokenize(PROMPTS[3]))
        long_alone = single.generate(params=GREEDY, max_tokens=120).tokens
    with open_sessions(tiny_gguf, n=2, n_ctx=512, n_threads=1) as group:
        first, second = group.sessions

        def short_ones() -> list[list[int]]:
            return [_completion(first, p, n=8) for p in PROMPTS[:3]]

        def long_one() -> list[int]:
            second.reset()
            second.eval(second.tokenize(PROMPTS[3]))
            return second.generate(params=GREEDY, max_tokens=120).tokens

        shorts, long_batched = _all_at_once([short_ones, long_one])
    assert long_batched == long_alone
    assert shorts == [alone[p][:8] for p in PROMPTS[:3]]


def test_logits_equal_the_lone_sequence_within_rounding(tiny_gguf: Path) -> None:
    """The next-token logits after a prompt, decoded beside another sequence's prompt."""
    with Session(tiny_gguf, n_ctx=512, n_threads=1) as single:
        single.eval(single.tokenize(PROMPTS[1]))
        expected = single.logits()
    with open_sessions(tiny_gguf, n=2, n_ctx=512, n_threads=1) as group:

        def prompt_then_logits(session: Session, prompt: str) -> np.ndarray:
            session.eval(session.tokenize(prompt))
            return session.logits()

        got, _other = _all_at_once(
            [
                lambda: prompt_then_logits(group.sessions[0], PROMPTS[1]),
                lambda: prompt_then_logits(group.sessions[1], PROMPTS[2]),
            ]
        )
    assert np.argmax(got) == np.argmax(expected)
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-3 * float(np.abs(expected).max()))


def test_sessions_starting_together_evaluate_the_shared_prefix_once(tiny_gguf: Path) -> None:
    """Four sessions of a group start at once with the same shared prefix (the system prompt):
    one evaluates it, the other three wait for its state and restore it, and each completion
    is the lone session's (the prefix declared shared there too)."""
    prefix_text, questions = PROMPTS[0][: -len("assistant\n")], ["A", "B", "C", "D"]
    with Session(tiny_gguf, n_ctx=512, n_threads=1) as single:
        prefix = single.tokenize(prefix_text)
        own = [len(single.tokenize(q)) for q in questions]
        expected = []
        for question in questions:
            single.reset()
            single.shared_prefix(prefix)
            single.eval(prefix + single.tokenize(question))
            expected.append(single.generate(params=GREEDY, max_tokens=8).tokens)

    def start(session: Session, question: str) -> tuple[list[int], int, int]:
        session.reset()
        session.shared_prefix(prefix)
        session.eval(prefix + session.tokenize(question))
        tokens = session.generate(params=GREEDY, max_tokens=8).tokens
        return tokens, session.timings.prompt_tokens, session.timings.restored_tokens

    with open_sessions(tiny_gguf, n=4, n_ctx=512, n_threads=1) as group:
        got = _all_at_once([lambda s=s, q=q: start(s, q) for s, q in zip(group, questions)])
    assert [tokens for tokens, _, _ in got] == expected
    evaluated = sorted(n - k for (_, n, _), k in zip(got, own))
    assert evaluated == [0, 0, 0, len(prefix)]  # the prefix's tokens evaluated by one session only
    assert sorted(restored for _, _, restored in got) == [0, len(prefix), len(prefix), len(prefix)]


def test_a_long_prompt_advances_in_chunks_while_another_samples(tiny_gguf: Path) -> None:
    """n_batch 32: a 200-token prompt takes several steps; the other sequence gets a token
    into each of them (more steps shared than the prompt alone needs)."""
    long_prompt = " ".join(f"row {i}" for i in range(100))
    with open_sessions(tiny_gguf, n=2, n_ctx=512, n_batch=32, n_ubatch=32, n_threads=1) as group:
        a, b = group.sessions
        a.eval(a.tokenize(PROMPTS[0]))

        def sample() -> list[int]:
            return a.generate(params=GREEDY, max_tokens=12).tokens

        def read() -> int:
            b.eval(b.tokenize(long_prompt))
            return b.n_past

        _all_at_once([sample, read])
        counts = group.counts
    assert counts.sequences > counts.steps  # some steps carried both
    assert counts.tokens >= 200


def test_snapshots_restore_into_another_sequence(tiny_gguf: Path, alone: dict) -> None:
    """The shared-prefix path: a state saved from sequence 0 restored into sequence 1 continues
    as the lone session does."""
    with open_sessions(tiny_gguf, n=2, n_ctx=512, n_threads=1) as group:
        a, b = group.sessions
        a.eval(a.tokenize(PROMPTS[0]))
        snapshot = a.snapshot()
        a.reset()
        assert b.restore(snapshot)
        got = b.generate(params=GREEDY, max_tokens=24).tokens
    assert got == alone[PROMPTS[0]]


def test_a_failed_decode_reaches_the_thread_that_asked(tiny_gguf: Path) -> None:
    with open_sessions(tiny_gguf, n=2, n_ctx=64, n_threads=1) as group:
        a = group.sessions[0]
        with pytest.raises(ValueError, match="out of range"):
            a.eval([10**9])
        a.eval(a.tokenize(PROMPTS[2]))
        assert a.generate(params=GREEDY, max_tokens=4).tokens


def test_mtp_speculation_is_refused_for_several_sequences(tiny_gguf: Path) -> None:
    from edge_sql.errors import EdgeSqlError

    with pytest.raises(EdgeSqlError, match="lookup or off"):
        open_sessions(tiny_gguf, n=2, n_ctx=256, n_threads=1, speculate="auto")


def test_lookup_speculation_per_sequence_keeps_the_lone_completions(tiny_gguf: Path) -> None:
    """Each sequence verifies its own drafts (a verify batch is one request of several tokens)
    and rolls its own rejected drafts back; what is appended is what plain decoding appends."""
    repeating = "SELECT a, b FROM t; SELECT a, b FROM t; SELECT a, b FROM t; SELECT"
    prompts = [repeating, PROMPTS[2], repeating]
    with Session(tiny_gguf, n_ctx=512, n_threads=1) as single:
        expected = [_completion(single, p, n=40) for p in prompts]
    with open_sessions(tiny_gguf, n=3, n_ctx=512, n_threads=1, speculate="lookup") as group:
        got = _all_at_once([lambda s=s, p=p: _completion(s, p, n=40) for s, p in zip(group, prompts)])
        drafted = sum(s.timings.draft_tokens for s in group.sessions)
        rolled_back = sum(s.timings.rolled_back_tokens for s in group.sessions)
    assert got == expected
    assert drafted > 0, "no drafts were verified: the test did not exercise speculation"
    print(f"drafted {drafted}, rolled back {rolled_back}")


# ---- memory: what calibration predicts for N sequences, and refusing more ------------------


def test_calibration_fits_the_sequences_its_budget_holds_and_their_buffers_match(tiny_gguf: Path) -> None:
    from edge_sql.runtime.tuning import Settings, calibrate, check_parallel
    from edge_sql.runtime.tuning.parallel import ParallelFit, allocated_with

    settings = Settings(True, 32, 1)
    small = dict(n_ctx=1024, points=(64,), prefill_chunk=32, decode_tokens=4, process_bytes=0)
    one = allocated_with(tiny_gguf, settings, 1024, 1)
    per_sequence = allocated_with(tiny_gguf, settings, 1024, 2) - one
    bound = calibrate(tiny_gguf, settings=[settings], full=False, **small).chosen_measurement().memory_bytes
    # a budget for the lone bound plus two and a half sequences: two more fit, not three
    result = calibrate(
        tiny_gguf, settings=[settings], full=False, parallel_memory=bound + 5 * per_sequence // 2, **small
    )
    chosen = result.chosen
    assert chosen.parallel_max == 3
    timed = [int(width) for width, _ in result.parallel_rates]
    assert timed == [1, 2, 3]  # the doubling widths that fit, and the most that fit
    assert chosen.parallel == ParallelFit(3, 0, 0, tuple(map(tuple, result.parallel_rates))).n
    assert result.parallel_speedup > 0
    with open_sessions(tiny_gguf, chosen.session_options(n_ctx=1024, n_gpu_layers=0), 3) as group:
        assert group.info.buffer_bytes == one + 2 * chosen.sequence_bytes  # what the fit measured
        assert bound + group.info.buffer_bytes - one <= result.parallel_allowance
        kinds = group.info.buffers
    with Session(tiny_gguf, chosen.session_options(n_ctx=1024, n_gpu_layers=0)) as single:
        assert kinds["CPU KV"] == 3 * single.info.buffers["CPU KV"]  # cells per sequence, not shared
        assert kinds["CPU RS"] == pytest.approx(3 * single.info.buffers["CPU RS"], rel=0.05)
    check_parallel(chosen, 3)
    with pytest.raises(Exception, match=r"4 episodes at once do not fit: at most 3 fit"):
        check_parallel(chosen, 4)


def test_the_default_n_is_the_fewest_sequences_near_the_best_measured_speed() -> None:
    """The measured rates choose the default, not the count that fits: on the vendored
    llama.cpp 16 sequences cost about what 8 do (a tiled kernel from 8 rows, microtiles of 16)."""
    from edge_sql.runtime.tuning.parallel import ParallelFit, widths_to_time

    assert widths_to_time(16) == [1, 2, 4, 8, 16]
    assert widths_to_time(11) == [1, 2, 4, 8, 11]
    assert widths_to_time(1) == [1]
    measured_here = ((1, 13.3), (2, 14.3), (4, 15.7), (8, 16.0), (16, 30.2))  # 2B shape, 2-core EPYC
    fit = ParallelFit(16, 170 << 20, 4 << 30, measured_here)
    assert (fit.n, fit.speedup) == (16, 2.27)
    flat = ParallelFit(8, 1, 1, ((1, 10.0), (2, 17.0), (4, 19.6), (8, 20.0)))
    assert (flat.n, flat.speedup) == (4, 1.96)  # 19.6 is within 5% of 20.0: the fewer sequences
    assert ParallelFit(1, 0, 0).n == 1 and ParallelFit(1, 0, 0).speedup == 1.0


def test_more_logits_rows_than_the_context_holds_is_an_error_not_an_abort(tiny_gguf: Path) -> None:
    """llama.cpp aborts the process (GGML_ASSERT n_outputs_max) when one batch asks for more
    rows than the context was made for (measured: two sequences, a context of one row); the
    decoder refuses such a request before llama.cpp sees it."""
    with open_sessions(tiny_gguf, n=2, n_ctx=128, n_threads=1) as group:
        context = group.sessions[0].context
        with pytest.raises(ValueError, match="logits rows"):
            context.decode([1, 2, 3], 0, outputs="all")
        context.decode([1, 2, 3], 0, outputs="last")  # one row: fine, and the context still works
        assert context.logits(-1).shape == (context.n_vocab,)


# ---- one step, one weight pass: how llama.cpp cuts a step, and what the decoder does about it --


@pytest.mark.parametrize(
    "parts, n_ubatch",
    [
        ([(0, 1), (1, 1), (2, 1), (3, 1)], 64),  # consecutive ids, a token each: one pass
        ([(0, 1), (1, 1), (3, 1)], 64),  # a gap: a pass per run of ids
        ([(0, 1), (2, 1)], 64),
        ([(0, 1), (1, 5)], 64),  # a forced run beside a sampled token
        ([(0, 3), (1, 5), (2, 2)], 4),  # equal tokens each, n_ubatch of them at most
        ([(1, 2), (2, 2), (3, 7)], 8),
    ],
)
def test_micro_batches_are_the_passes_llama_cpp_runs(tiny_gguf: Path, parts: list, n_ubatch: int) -> None:
    """`micro_batches` mirrors llama.cpp's split: the graph runs (counted with a cb_eval that
    sees the final norm of every graph) equal the micro-batches it predicts."""
    import llama_cpp

    from edge_sql.runtime import SessionOptions
    from edge_sql.runtime.batching.batched import micro_batches
    from edge_sql.runtime.llama.batch import TokenBatch
    from edge_sql.runtime.llama.context import create_context
    from edge_sql.runtime.llama.loading import open_model
    from edge_sql.runtime.llama.shared_models import release
    from edge_sql.runtime.probes.imatrix import FINAL_NORM, GGMLTensor

    graphs = []

    def on_node(tensor: int, ask: bool, _user: int) -> bool:
        if ask and GGMLTensor.from_address(tensor).name == FINAL_NORM:
            graphs.append(1)
        return False

    callback = llama_cpp.ggml_backend_sched_eval_callback(on_node)
    options = SessionOptions(n_ctx=64, n_batch=64, n_ubatch=n_ubatch, n_threads=1)
    loaded, base, _info = open_model(tiny_gguf, options, n_seq=4)
    total = sum(n for _, n in parts)
    try:
        with (
            create_context(
                loaded, base.options, what="a counted context", n_outputs=64, n_seq=4, cb_eval=callback
            ) as context,
            TokenBatch(64) as batch,
        ):
            batch.fill_parts(
                [(seq, np.arange(100, 100 + n, dtype=np.int32), 0, np.ones(n, dtype=bool)) for seq, n in parts]
            )
            batch.decode(context.ptr)
    finally:
        base.close()
        release(loaded)
    assert len(graphs) == len(micro_batches(parts, n_ubatch))
    assert sum(n for cut in micro_batches(parts, n_ubatch) for _, n in cut) == total


def _members_decode(group, jobs: list[tuple[int, list[int]]]) -> None:
    """Each (session index, tokens) decoded by its member from a thread of its own, all of them
    engaged before any asks (so the first step holds every request)."""
    contexts = [group.sessions[i].context for i, _ in jobs]
    barrier = threading.Barrier(len(jobs))

    def job(context, tokens: list[int]) -> None:
        with context.engaged():
            barrier.wait()
            context.decode(tokens, len(context.tokens), outputs="last")

    _all_at_once([lambda c=c, t=t: job(c, t) for c, (_, t) in zip(contexts, jobs)])


def test_a_short_forced_run_rides_along_a_token_a_step(tiny_gguf: Path) -> None:
    """Four members sample a token each while a fifth decodes three forced tokens: the forced
    run takes one token in the shared step (one pass, not two) and the rest in a step alone."""
    with open_sessions(tiny_gguf, n=5, n_ctx=128, n_threads=1) as group:
        _members_decode(group, [(0, [11]), (1, [12]), (2, [13]), (3, [14]), (4, [20, 21, 22])])
        counts = group.counts
        assert (counts.steps, counts.passes, counts.tokens) == (2, 2, 7)
        assert group.sessions[4].context.tokens == [20, 21, 22]


def test_a_gap_in_the_ids_is_closed_by_moving_memory_and_the_idle_episode_is_kept(tiny_gguf: Path, alone: dict) -> None:
    """Sessions 0 and 2 generate together while session 1 holds an evaluated prompt: the step
    trades ids 1 and 2 (their states move with them), every later step is one pass, and all three
    continue exactly as alone."""
    with open_sessions(tiny_gguf, n=4, n_ctx=512, n_threads=1) as group:
        a, idle, c, _empty = group.sessions
        idle.eval(idle.tokenize(PROMPTS[1]))
        got = _all_at_once([lambda: _completion(a, PROMPTS[0]), lambda: _completion(c, PROMPTS[2])])
        counts = group.counts
        assert counts.moves in (1, 2)  # the idle one's state, and c's unless the trade came at its first decode
        assert sorted([a.context.seq, c.context.seq]) == [0, 1] and idle.context.seq == 2
        assert counts.passes <= counts.steps + 2  # at most the steps before the trade cost two
        held = idle.generate(params=GREEDY, max_tokens=24).tokens
    assert got == [alone[PROMPTS[0]], alone[PROMPTS[2]]]
    assert held == alone[PROMPTS[1]]


def test_an_episode_back_from_a_tool_call_within_the_grace_shares_the_steps(tiny_gguf: Path) -> None:
    """Session 1 pauses 100 ms between rounds (a tool call, within the 200 ms grace); session 0
    waits for it rather than running its own round alone, so nearly every step carries both
    (without the grace 1.36 sequences a step on a 2-core Xeon: the rounds drift apart)."""
    import time

    def rounds(session: Session, pause: float) -> None:
        session.reset()
        session.eval(session.tokenize(PROMPTS[0]))
        for _ in range(3):
            session.generate(params=GREEDY, max_tokens=6)
            time.sleep(pause)
            session.eval(session.tokenize(" and then"))

    with open_sessions(tiny_gguf, n=2, n_ctx=512, n_threads=1) as group:
        _all_at_once([lambda: rounds(group.sessions[0], 0.0), lambda: rounds(group.sessions[1], 0.1)])
        counts = group.counts
    assert counts.sequences >= 1.6 * counts.steps, counts


def test_a_session_gone_idle_holds_nobody_for_its_grace(tiny_gguf: Path, alone: dict) -> None:
    """Session 1's work ends (an episode over: `context.idle()`) while session 0 still generates;
    with a grace of 30 s, session 0 would otherwise wait that long at its next step for a
    session that is not coming back. Its tokens are what it decodes alone."""
    import time

    def short_then_idle(session: Session) -> None:
        _completion(session, PROMPTS[1], n=2)
        session.context.idle()

    with open_sessions(tiny_gguf, n=2, n_ctx=512, n_threads=1) as group:
        group._decoder.grace_s = 30.0  # type: ignore[union-attr]
        tick = time.monotonic()
        got = _all_at_once(
            [lambda: _completion(group.sessions[0], PROMPTS[0]), lambda: short_then_idle(group.sessions[1])]
        )
        took = time.monotonic() - tick
    assert took < 20.0, f"{took:.1f} s: session 0 waited out the grace of the idle session"
    assert got[0] == alone[PROMPTS[0]]
