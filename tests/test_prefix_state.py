"""The shared prompt prefix evaluated once: saved llama.cpp state restored in memory and from disk.

On the fixture Qwen3.5 model (hybrid: attention KV cells and recurrent Gated DeltaNet state),
with the real system prompt and tool list as the prefix.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from edge_sql.agent import Budget, load_prompt
from edge_sql.runtime import PrefixCache, SamplingParams, Session
from edge_sql.runtime.state.prefix_state import StateSnapshot

ARGS = dict(n_ctx=2048, n_threads=1)


def _opening(session: Session, question: str = "How many albums are there?") -> tuple[list[int], list[int]]:
    """The shared prefix and the question's own tokens, as the episode builds them."""
    shared, own = load_prompt().opening(question, None, max_rounds=Budget().max_rounds)
    ids = lambda pieces: [t for text, special in pieces for t in session.tokenize(text, special=special)]
    return ids(shared), ids(own)


def _evaluate(session: Session, prefix: list[int], own: list[int]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Logits after the prefix and after the question; 4 greedy tokens."""
    session.eval(prefix)
    after_prefix = session.logits()
    session.eval(own)
    after_question = session.logits()
    tokens = session.generate(params=SamplingParams(greedy=True), max_tokens=4).tokens
    return after_prefix, after_question, tokens


def _fresh(model: Path, prefix: list[int], own: list[int], **kwargs) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """`_evaluate` in a new session: everything evaluated from nothing."""
    with Session(model, **{**ARGS, **kwargs}) as session:
        return _evaluate(session, prefix, own)


def _cached_run(session: Session, prefix: list[int], own: list[int]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """`_evaluate` after a reset, with the prefix declared shared (restored when its state is kept)."""
    session.reset()
    session.shared_prefix(prefix)
    return _evaluate(session, prefix, own)


def _same(a, b) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2] == b[2]


def test_restored_prefix_gives_the_logits_of_a_fresh_evaluation_in_memory_and_from_disk(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "states"
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(cache)) as session:
        prefix, own = _opening(session)
        assert len(prefix) > 300  # the system prompt and the tool list
        reference = _fresh(tiny_gguf, prefix, own)

        first = _cached_run(session, prefix, own)  # evaluated, then saved
        assert session.timings.restored_tokens == 0 and session.timings.prompt_tokens == len(prefix) + len(own)
        assert len(list(cache.glob("*.state"))) == 1
        _same(first, reference)

        second = _cached_run(session, prefix, own)  # restored from memory
        assert session.timings.restored_tokens == len(prefix)
        assert session.timings.prompt_tokens == len(own)
        assert session.decoded_tokens == len(own) + 4 - 1  # the last sampled token is still pending
        assert session.n_past == len(prefix) + len(own) + 4
        _same(second, reference)

    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(cache)) as later:  # a new process would do the same
        from_disk = _cached_run(later, prefix, own)
        assert later.timings.restored_tokens == len(prefix)
        _same(from_disk, reference)


def test_a_different_question_after_the_restored_prefix(tiny_gguf: Path, tmp_path: Path) -> None:
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(tmp_path)) as session:
        prefix, own = _opening(session)
        _, other = _opening(session, "Which artist has the most albums?")
        _cached_run(session, prefix, own)
        restored = _cached_run(session, prefix, other)
        assert session.timings.restored_tokens == len(prefix)
    _same(restored, _fresh(tiny_gguf, prefix, other))


def test_a_changed_template_model_file_or_setting_never_reuses_a_stale_state(tiny_gguf: Path, tmp_path: Path) -> None:
    cache = tmp_path / "states"
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(cache)) as session:
        prefix, own = _opening(session)
        _cached_run(session, prefix, own)
        changed = prefix[:-3] + session.tokenize(" Be brief.") + prefix[-3:]  # another template text
        result = _cached_run(session, changed, own)
        assert session.timings.restored_tokens == 0
    _same(result, _fresh(tiny_gguf, changed, own))

    copy = tmp_path / "copy.gguf"  # the same weights in another (newer) file
    shutil.copyfile(tiny_gguf, copy)
    stat = copy.stat()
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with Session(copy, **ARGS, prefix_cache=PrefixCache(cache)) as other_file:
        _cached_run(other_file, prefix, own)
        assert other_file.timings.restored_tokens == 0

    for setting in (dict(n_ubatch=64), dict(flash_attn=False), dict(n_ctx=1024)):
        with Session(tiny_gguf, **{**ARGS, **setting}, prefix_cache=PrefixCache(cache)) as other_setting:
            result = _cached_run(other_setting, prefix, own)
            assert other_setting.timings.restored_tokens == 0, setting
        _same(result, _fresh(tiny_gguf, prefix, own, **setting))
    assert len(list(cache.glob("*.state"))) == 6  # one per distinct key


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_a_corrupt_or_truncated_state_file_is_ignored_with_a_note_and_rebuilt(
    tiny_gguf: Path, tmp_path: Path, damage: str
) -> None:
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(tmp_path)) as session:
        prefix, own = _opening(session)
        reference = _cached_run(session, prefix, own)
    (path,) = tmp_path.glob("*.state")
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = bytearray(b"not a state file at all")
    path.write_bytes(bytes(data))

    notes: list[str] = []
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(tmp_path, log=notes.append)) as session:
        result = _cached_run(session, prefix, own)
        assert session.timings.restored_tokens == 0
    _same(result, reference)
    assert len(notes) == 1 and "ignoring the saved prompt state" in notes[0], notes
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(tmp_path, log=notes.append)) as session:  # rebuilt
        _same(_cached_run(session, prefix, own), reference)
        assert session.timings.restored_tokens == len(prefix)
    assert len(notes) == 1


def test_the_disk_cache_stays_within_its_size(tiny_gguf: Path, tmp_path: Path) -> None:
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(tmp_path)) as session:
        prefix, own = _opening(session)
        _cached_run(session, prefix, own)
        size = next(tmp_path.glob("*.state")).stat().st_size
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(tmp_path, max_bytes=int(size * 1.5))) as session:
        newer = prefix[:-3] + session.tokenize(" Be brief.") + prefix[-3:]
        _cached_run(session, newer, own)
    assert len(list(tmp_path.glob("*.state"))) == 1  # the older state was evicted
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(tmp_path)) as session:
        _cached_run(session, newer, own)
        assert session.timings.restored_tokens == len(newer)


def test_without_a_declared_prefix_nothing_is_restored(tiny_gguf: Path) -> None:
    with Session(tiny_gguf, **ARGS) as session:
        prefix, own = _opening(session)
        for _ in range(2):
            session.reset()
            session.eval(prefix + own)
            assert session.timings.restored_tokens == 0 and session.timings.prompt_tokens == len(prefix) + len(own)


def test_the_key_hashes_the_options_a_state_depends_on(tmp_path: Path) -> None:
    from edge_sql.runtime.options import SessionOptions
    from edge_sql.runtime.state.prefix_state import prefix_key

    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    base = SessionOptions(n_ctx=2048, n_threads=1)
    key = prefix_key(model, base, "CPU", [1, 2, 3])
    # what the model loads or how it drafts leaves the context's state as it is
    assert (
        prefix_key(model, SessionOptions(n_ctx=2048, n_threads=1, mtp=True, speculate="auto"), "CPU", [1, 2, 3]) == key
    )
    for other in (
        SessionOptions(n_ctx=1024, n_threads=1),
        SessionOptions(n_ctx=2048, n_threads=2),
        SessionOptions(n_ctx=2048, n_threads=1, flash_attn=False),
        SessionOptions(n_ctx=2048, n_threads=1, draft_max=4),
    ):
        assert prefix_key(model, other, "CPU", [1, 2, 3]) != key, other
    assert prefix_key(model, base, "CUDA", [1, 2, 3]) != key
    assert prefix_key(model, base, "CPU", [1, 2, 4]) != key


def test_a_claimed_state_is_made_once_and_waited_for() -> None:
    """The first claimer of a missing key gets None and makes it; a second claimer waits for
    its `put` and gets that state; after a claimer that fails, the next one makes it."""
    cache = PrefixCache()
    snapshot = StateSnapshot(tokens=(1, 2, 3), state=b"state", logits=np.zeros(4, np.float32))
    got: list[object] = []

    def claim_too() -> None:
        with cache.claim("k", [1, 2, 3]) as state:
            got.append(state)

    with cache.claim("k", [1, 2, 3]) as first:
        assert first is None
        waiter = threading.Thread(target=claim_too)
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive() and not got  # it waits while the state is being made
        cache.put("k", snapshot)
    waiter.join(5)
    assert got == [snapshot]
    with pytest.raises(RuntimeError), cache.claim("other", [4]) as made:
        assert made is None
        raise RuntimeError("evaluation failed")
    with cache.claim("other", [4]) as again:  # not left waiting for the failed one
        assert again is None


def test_a_group_and_a_single_session_load_each_others_saved_state(tiny_gguf: Path, tmp_path: Path) -> None:
    """Issue 40, bug 5: the sequences of a batched context (a vote's sessions) and a session of
    its own keep one state per prompt prefix, which loads in both, in whichever sequence, from
    disk, with no note; and the logits and tokens after it are those of a fresh evaluation."""
    from edge_sql.runtime.batching.sequences import open_sessions

    notes: list[str] = []
    states = tmp_path / "states"
    with Session(tiny_gguf, **ARGS) as session:
        prefix, own = _opening(session)
    reference = _fresh(tiny_gguf, prefix, own)
    with open_sessions(tiny_gguf, None, 3, **ARGS, prefix_cache=PrefixCache(states, log=notes.append)) as group:
        first = _cached_run(group.sessions[2], prefix, own)  # evaluated in sequence 2, saved
        assert group.sessions[2].timings.restored_tokens == 0
    (saved,) = states.glob("*.state")
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(states, log=notes.append)) as single:
        from_group = _cached_run(single, prefix, own)
        assert single.timings.restored_tokens == len(prefix)
    saved.unlink()
    with Session(tiny_gguf, **ARGS, prefix_cache=PrefixCache(states, log=notes.append)) as single:
        _cached_run(single, prefix, own)  # evaluated by a session of its own, saved
    with open_sessions(tiny_gguf, None, 2, **ARGS, prefix_cache=PrefixCache(states, log=notes.append)) as group:
        from_single = [_cached_run(s, prefix, own) for s in group.sessions]
        assert [s.timings.restored_tokens for s in group.sessions] == [len(prefix)] * 2
    assert notes == [] and len(list(states.glob("*.state"))) == 1
    for result in (first, from_group, *from_single):
        _same(result, reference)


def test_sessions_starting_together_evaluate_a_shared_opening_once(tiny_gguf: Path) -> None:
    """A vote's K episodes share their whole opening (system prompt and question): one session
    evaluates the question after the prefix's state, the others restore the opening's state; each
    then generates the greedy tokens of a session that evaluated everything itself."""
    from edge_sql.runtime.batching.sequences import open_sessions

    with Session(tiny_gguf, **ARGS) as session:
        prefix, own = _opening(session)
    reference = _fresh(tiny_gguf, prefix, own)
    runs: dict[int, tuple] = {}
    with open_sessions(tiny_gguf, None, 3, **ARGS, prefix_cache=PrefixCache()) as group:

        def episode(i: int, session: Session) -> None:
            session.shared_prefix(prefix, opening=prefix + own)
            session.eval(prefix + own)
            after = session.logits()
            tokens = session.generate(params=SamplingParams(greedy=True), max_tokens=4).tokens
            runs[i] = (after, tokens, session.timings.prompt_tokens, session.timings.restored_tokens)

        threads = [threading.Thread(target=episode, args=(i, s)) for i, s in enumerate(group.sessions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(r[2] for r in runs.values()) == [0, 0, len(prefix) + len(own)]  # evaluated once in all
    assert sorted(r[3] for r in runs.values()) == [0, len(prefix) + len(own), len(prefix) + len(own)]
    for after, tokens, _, _ in runs.values():
        np.testing.assert_array_equal(after, reference[1])
        assert tokens == reference[2]


def test_the_one_stream_form_of_an_attention_only_model(smollm2_gguf: Path) -> None:
    """SmolLM2 (llama: attention cells without the M-RoPE extension, no recurrent state): a
    sequence's state in a context of three sequences is, in the one-stream form, the bytes a
    context of its own writes, and loads into any sequence."""
    from edge_sql.runtime.batching.sequences import open_sessions
    from edge_sql.runtime.llama.context import read_sequence_state
    from edge_sql.runtime.llama.state_streams import portable

    with Session(smollm2_gguf, n_ctx=512, n_threads=1) as single:
        tokens = single.tokenize("SELECT name FROM sqlite_master WHERE type = 'table'; " * 4)
        single.eval(tokens)
        alone = single.snapshot().state
    with open_sessions(smollm2_gguf, None, 3, n_ctx=512, n_threads=1) as group:
        for session in group.sessions[1:]:
            session.eval(tokens)
            raw = read_sequence_state(session.context.ptr, session.context.seq)
            assert raw != alone and portable(raw) == alone
        assert group.sessions[0].context.set_state(alone, tokens)
