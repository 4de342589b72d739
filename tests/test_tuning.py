"""Calibration on real llama.cpp with the fixture model: budget, safety, cache, answers unchanged.

Timings on shared CI machines are noisy, so these tests assert what calibration decides from
its measurements (memory bound, choice among candidates, cache keys), never which setting is
fastest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edge_sql.commands.tune import calibration_table
from edge_sql.runtime import Session, tuning
from edge_sql.runtime.llama.backend import default_threads, repack_is_safe
from edge_sql.runtime.state.identity import file_fingerprint
from edge_sql.runtime.tuning import Settings, calibrate, calibration, candidates, predict, timing
from edge_sql.runtime.tuning import settings as tuning_settings

# Small enough for a test: a 1,024-token context measured at 64 and 256 tokens, one thread.
SMALL = dict(n_ctx=1024, points=(64, 256), prefill_chunk=32, decode_tokens=4, process_bytes=0)
SETTINGS = [Settings(fa, ub, 1) for fa in (True, False) for ub in (32, 256)]
# The documented tolerance for settings the tuner may choose (see runtime/tuning.py).
LOGIT_RANGE_SHARE, MAX_KL = 0.05, 0.01


def _buffer_bytes(model: Path, settings: Settings) -> int:
    """llama.cpp's buffers for `settings` plus ggml's attention work buffer (flash attention off)
    plus what the bound adds for what the buffer log misses."""
    import llama_cpp

    with Session(model, settings.session_options(n_ctx=SMALL["n_ctx"])) as session:
        n_head = llama_cpp.llama_model_n_head(session.llama_model)
        return (
            session.info.buffer_bytes
            + tuning.attention_work_bytes(SMALL["n_ctx"], settings, n_head)
            + tuning.UNCOUNTED_BYTES
        )


def test_the_attention_work_buffer_counts_only_without_flash_attention() -> None:
    # the 2B shape: 8 query heads; 12,288 x 128 x 8 F16 weights = 24 MiB
    assert tuning.attention_work_bytes(12288, Settings(False, 128, 2), 8) == 24 * 1024 * 1024
    assert tuning.attention_work_bytes(12288, Settings(False, 256, 2), 8) == 48 * 1024 * 1024
    assert tuning.attention_work_bytes(12288, Settings(True, 256, 2), 8) == 0
    assert tuning.attention_work_bytes(12288, Settings(None, 256, 1), 8) == 0  # auto: on for CPU
    # ... but off where the thread count adapts (runtime/llama/loading.py, attention_for_threads)
    assert tuning.attention_work_bytes(12288, Settings(None, 256, 2), 8) == 48 * 1024 * 1024


def test_the_memory_model_reads_llama_cpps_buffers_by_what_they_hold(tiny_gguf: Path) -> None:
    """One reader of the buffer log's labels: the recurrent state and the MTP drafter's context
    apart from the rest; what counts against the budget is what lies beyond the mapped file."""
    from edge_sql.runtime import SessionInfo
    from edge_sql.runtime.tuning.memory import ContextMemory

    mib = 1024 * 1024
    buffers = {
        "CPU_Mapped model": 1200 * mib,
        "CPU KV": 96 * mib,
        "CPU RS": 3 * mib,
        "CPU output": 1 * mib,
        "CPU compute": 40 * mib,
        "MTP CPU KV": 4 * mib,
        "MTP CPU compute": 30 * mib,
    }
    info = SessionInfo(
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
        repack=False,
        n_vocab=248320,
        buffers=buffers,
    )
    assert ContextMemory.of(info) == ContextMemory(allocated=174 * mib, recurrent_state=3 * mib, mtp_context=34 * mib)
    attention_only = SessionInfo(**{**info.__dict__, "buffers": {"CPU KV": 96 * mib, "CPU compute": 40 * mib}})
    assert ContextMemory.of(attention_only) == ContextMemory(allocated=136 * mib, recurrent_state=0, mtp_context=0)


def test_calibration_never_chooses_a_setting_over_the_memory_budget(tiny_gguf: Path) -> None:
    bounds = {s: _buffer_bytes(tiny_gguf, s) for s in SETTINGS}
    assert len(set(bounds.values())) > 1, bounds  # ubatch and flash attention change the compute buffer
    allowance = sorted(bounds.values())[len(bounds) // 2 - 1]  # some candidates fit, some do not
    lines: list[str] = []
    result = calibrate(
        tiny_gguf, settings=SETTINGS, memory_allowance=allowance, progress=lines.append, full=True, **SMALL
    )  # full: candidates over the budget are timed too (the quick mode skips them)

    assert [m.settings for m in result.measurements] == SETTINGS
    assert any(line.startswith("calibrating tiny") for line in lines)  # the progress line
    for m in result.measurements:
        assert m.memory_bytes == bounds[m.settings]  # llama.cpp's buffers + ggml's work copy (process_bytes=0)
        assert m.fits == (m.memory_bytes <= allowance)
        assert m.points == [64, 256] and len(m.prefill_s) == len(m.decode_s) == 2
        assert all(0 < t < 10 for t in m.prefill_s + m.decode_s)
        assert m.episode_s == pytest.approx(predict(m, tuning.episode_profile(1024)))
    # one token is one ubatch: candidates differing only in n_ubatch share their (pooled) decode timings
    by_flash = {fa: [m.decode_s for m in result.measurements if m.settings.flash_attn == fa] for fa in (True, False)}
    assert all(len(group) == 2 and group[0] == group[1] for group in by_flash.values())
    fitting = [m for m in result.measurements if m.fits]
    assert fitting and len(fitting) < len(SETTINGS)
    chosen = result.chosen_measurement()
    assert chosen.fits and chosen.memory_bytes <= allowance
    assert chosen.episode_s == min(m.episode_s for m in fitting)
    table = calibration_table(result)
    assert "(over)" in table and f"* {result.chosen.label}" in table


def test_quick_calibration_times_only_candidates_within_the_budget(tiny_gguf: Path) -> None:
    """The first run's calibration skips timing (and filling contexts for) what cannot be chosen."""
    bounds = {s: _buffer_bytes(tiny_gguf, s) for s in SETTINGS}
    allowance = sorted(bounds.values())[len(bounds) // 2 - 1]
    result = calibrate(tiny_gguf, settings=SETTINGS, memory_allowance=allowance, full=False, **SMALL)
    for m in result.measurements:
        assert m.memory_bytes == bounds[m.settings] and m.fits == (m.memory_bytes <= allowance)
        assert bool(m.points) == m.fits  # timed exactly when within the budget
        assert (m.episode_s < float("inf")) == m.fits
    assert result.chosen_measurement().fits
    assert "(over: not timed)" in calibration_table(result) and "@64" in calibration_table(result)
    assert any(not m.fits for m in result.measurements) and any(m.fits for m in result.measurements)


def test_quick_calibration_stretches_its_contexts_and_falls_back_to_filling(
    tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick mode reaches its points without prefilling them (a short state stretched); where
    stretching is not possible it fills them; the sweep always fills them for real."""
    filled: list[int] = []
    real_fill = timing._filled_states
    monkeypatch.setattr(
        timing, "_filled_states", lambda base, points, *a: filled.append(len(points)) or real_fill(base, points, *a)
    )
    quick = calibrate(tiny_gguf, settings=SETTINGS[:1], full=False, **SMALL)
    assert filled == [] and quick.chosen_measurement().points == [64, 256]
    calibrate(tiny_gguf, settings=SETTINGS[:1], full=True, **SMALL)
    assert filled == [2]
    monkeypatch.setattr(timing, "stretch_snapshot", lambda snapshot, n: None)
    fallback = calibrate(tiny_gguf, settings=SETTINGS[:1], full=False, **SMALL)
    assert filled == [2, 2] and fallback.chosen_measurement().points == [64, 256]


def test_quick_calibration_times_a_reference_per_decode_key_and_others_while_time_is_left(
    tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = [Settings(fa, ub, 1) for fa in (True, False) for ub in (16, 32, 256)]  # chunk: 32 tokens
    lines: list[str] = []
    result = calibrate(tiny_gguf, settings=settings, full=False, progress=lines.append, **SMALL)
    by = {m.settings: m for m in result.measurements}
    for fa in (True, False):
        ref, ub32, ub256 = (by[Settings(fa, ub, 1)] for ub in (16, 32, 256))
        assert ref.points == ub32.points == ub256.points == [64, 256]
        assert ref.decode_s == ub32.decode_s == ub256.decode_s  # a decode does not depend on n_ubatch
        assert ub256.prefill_s == ub32.prefill_s  # a 32-token chunk is one ubatch for both: one timing
        ratio = np.array(ub32.prefill_s) / np.array(ref.prefill_s)  # timed once, scaled along the curve
        assert np.allclose(ratio, ratio[0])
    numbered = [line.split(": ", 1)[1].split()[0] for line in lines if "/6 flash_attn" in line]
    assert numbered == ["1/6", "2/6", "3/6", "4/6"]  # two references, two ubatch-32 chunks; ubatch 256 shares

    monkeypatch.setattr(calibration, "QUICK_SECONDS", 0.0)  # no time left after the references
    lines.clear()
    hurried = calibrate(tiny_gguf, settings=settings, full=False, progress=lines.append, **SMALL)
    timed = {m.settings for m in hurried.measurements if m.points}
    assert timed == {Settings(True, 16, 1), Settings(False, 16, 1)}
    assert hurried.chosen in timed
    assert sum("not timed (the quick calibration's time is up)" in line for line in lines) == 4  # ub32, ub256 x 2
    assert "(not timed: the quick calibration's time was up)" in calibration_table(hurried)


def test_the_quick_calibration_stops_at_its_budget(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of time, a quick calibration measures only what a choice cannot do without (the
    memory bounds, one round of a reference per flash-attention value, the MTP drafter's
    memory): not the reference of another thread count, no second round of decodes, no other
    candidate; and says so once in plain words."""
    settings = [Settings(fa, ub, 1) for fa in (True, False) for ub in (16, 64)] + [Settings(True, 16, 2)]
    visits: list[int] = []  # prefill runs of each timing at a point
    real_time_at, real_mtp = timing._time_at, calibration.mtp_context_bytes
    monkeypatch.setattr(
        timing,
        "_time_at",
        lambda session, state, chunk, **kw: (
            visits.append(kw["prefill_runs"]) or real_time_at(session, state, chunk, **kw)
        ),
    )
    mtp_measured: list[Settings] = []
    monkeypatch.setattr(
        calibration,
        "mtp_context_bytes",
        lambda path, chosen, n_ctx: mtp_measured.append(chosen) or real_mtp(path, chosen, n_ctx),
    )

    timely = calibrate(tiny_gguf, settings=settings, full=False, **SMALL)  # 50 s: time for everything
    # 3 references x 2 points, then their second round of decodes, then the 2 other chunks
    assert visits == [1] * 6 + [0] * 6 + [1, 1]
    assert all(m.points for m in timely.measurements) and mtp_measured == [timely.chosen]

    monkeypatch.setattr(calibration, "QUICK_SECONDS", 0.0)
    visits.clear(), mtp_measured.clear()
    lines: list[str] = []
    late = calibrate(tiny_gguf, settings=settings, full=False, progress=lines.append, **SMALL)
    assert visits == [1, 1, 1, 1]  # each flash-attention value's reference once at each point, then nothing
    assert {m.settings for m in late.measurements if m.points} == {Settings(True, 16, 1), Settings(False, 16, 1)}
    assert mtp_measured == [late.chosen] and late.mtp_bytes > 0 and late.chosen.draft_max_mtp > 0
    assert sum("not timed (the quick calibration's time is up)" in line for line in lines) == 3
    assert sum("second round of decodes skipped" in line for line in lines) == 1
    plain: list[str] = []
    calibrate(tiny_gguf, settings=settings, full=False, progress=plain.append, plain=True, **SMALL)
    assert plain.count("calibrating tiny-bf16.gguf: time is up, choosing among the settings timed so far") == 1


def test_speculation_gets_the_most_drafts_that_fit_the_memory_left(tiny_gguf: Path) -> None:
    """draft_max is fitted to what the chosen setting leaves of the budget after the MTP
    drafter's context (the fixture has an MTP head), and a session loaded with it, drafting
    from lookup and the head, stays within the budget (llama.cpp's buffers, measured)."""
    base = _buffer_bytes(tiny_gguf, SETTINGS[0])
    mtp = tuning.mtp_context_bytes(tiny_gguf, SETTINGS[0], SMALL["n_ctx"])
    assert mtp > 0  # the head's layer: its own KV cells and compute buffer
    measured = calibrate(tiny_gguf, settings=SETTINGS[:1], memory_allowance=base, **SMALL).chosen_measurement()
    assert measured.n_vocab == 248320 and measured.state_bytes > 0  # Gated DeltaNet layers keep a state
    per_draft = tuning.speculation_bytes(1, measured.state_bytes, measured.n_vocab)
    for drafts_that_fit in (3, 1, 0):  # beside the MTP drafter's context
        allowance = base + mtp + drafts_that_fit * per_draft + per_draft // 2
        result = calibrate(tiny_gguf, settings=SETTINGS[:1], memory_allowance=allowance, **SMALL)
        lookup_fit = min(8, (mtp + drafts_that_fit * per_draft + per_draft // 2) // per_draft)
        assert result.mtp_bytes == mtp
        assert (result.chosen.draft_max, result.chosen.draft_max_mtp) == (lookup_fit, drafts_that_fit)
        assert result.chosen.speculation("lookup") == ("lookup", lookup_fit)
        if not drafts_that_fit:  # the head's context does not fit: auto drafts by lookup alone, mtp is off
            assert result.chosen.speculation("auto") == ("lookup", lookup_fit)
            assert result.chosen.speculation("mtp") == ("off", 0)
            assert "none, auto drafts by lookup alone" in calibration_table(result)
            continue
        assert (
            f"with the MTP drafter's context ({mtp / 2**20:.0f} MiB): draft_max {drafts_that_fit}"
            in calibration_table(result)
        )
        options = result.chosen.session_options("auto", n_ctx=SMALL["n_ctx"])
        assert options.speculate == "auto" and options.draft_max == drafts_that_fit
        with Session(tiny_gguf, options) as session:
            assert session.info.draft_max == drafts_that_fit and session.info.mtp_layers == 1
            assert session.info.buffer_bytes <= allowance  # flash attention on: no work copy
            # what speculation added is what the fit counted for it
            assert session.info.buffer_bytes - base <= mtp + tuning.speculation_bytes(
                drafts_that_fit, measured.state_bytes, measured.n_vocab
            )
    nothing = calibrate(tiny_gguf, settings=SETTINGS[:1], memory_allowance=base + per_draft // 2, **SMALL)
    assert nothing.chosen.speculation("auto") == ("off", 0) and "no draft fits" in calibration_table(nothing)
    assert nothing.chosen.session_options("lookup").speculate == "off"


def test_no_candidate_fits_falls_back_to_the_smallest_memory(tiny_gguf: Path) -> None:
    result = calibrate(tiny_gguf, settings=SETTINGS[:2], memory_allowance=1, **SMALL)
    assert not any(m.fits for m in result.measurements)
    assert result.chosen_measurement().memory_bytes == min(m.memory_bytes for m in result.measurements)
    assert "no candidate fits" in result.note


def test_repack_is_never_tried_where_it_is_unsafe(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuning_settings, "repack_is_safe", lambda: False)
    assert not any(s.repack for s in candidates())
    unsafe = Settings(True, 256, 1, repack=True)
    result = calibrate(tiny_gguf, settings=[unsafe, SETTINGS[0]], **SMALL)
    assert [m.settings for m in result.measurements] == [SETTINGS[0]]
    monkeypatch.setattr(tuning_settings, "repack_is_safe", lambda: True)
    assert any(s.repack for s in candidates())  # offered where the build runs it safely


def test_this_build_offers_repack_only_if_safe() -> None:
    assert any(s.repack for s in candidates()) == repack_is_safe()


def test_episode_profile_grows_to_the_budget_in_six_rounds() -> None:
    profile = tuning.episode_profile()
    assert sum(1 for seg in profile if seg.decode) == 7  # six tool rounds and the final answer
    end = profile[-1]
    assert tuning.EPISODE_TOKENS - 700 <= end.context + end.prefill + end.decode <= tuning.EPISODE_TOKENS
    assert [seg.context for seg in profile] == sorted(seg.context for seg in profile)


def test_per_token_interpolates_and_extrapolates() -> None:
    assert tuning.per_token([100, 300], [1.0, 3.0], 200) == pytest.approx(2.0)
    assert tuning.per_token([100, 300], [1.0, 3.0], 500) == pytest.approx(5.0)
    assert tuning.per_token([100, 300], [1.0, 3.0], 0) == pytest.approx(0.5)  # floored at half the cheapest
    assert tuning.per_token([100, 300], [3.0, 2.0], 900) == pytest.approx(2.0)  # noise never makes it cheaper


def test_calibration_is_cached_reused_and_invalidated_when_the_file_changes(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    model = tmp_path / "model.gguf"
    shutil.copyfile(tiny_gguf, model)
    lines: list[str] = []
    quick = {k: v for k, v in SMALL.items() if k != "n_ctx"} | {"settings": SETTINGS[1:3]}
    first, how = tuning.tuned_settings(model, progress=lines.append, n_ctx=1024, options=quick)
    assert how == "calibrated" and any("quick calibration" in line for line in lines)
    files = list((tmp_path / "home" / "tuning").glob("*.json"))
    assert len(files) == 1
    saved = json.loads(files[0].read_text())
    assert saved["model_path"] == str(model) and saved["mode"] == "quick"
    assert first in [m.settings for m in tuning.cached_calibration(model).measurements]

    lines.clear()
    again, how = tuning.tuned_settings(model, progress=lines.append, n_ctx=1024, options=quick)
    assert (again, how, lines) == (first, "cached", [])

    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the file was rewritten
    assert tuning.cached_calibration(model) is None
    _, how = tuning.tuned_settings(model, n_ctx=1024, options=quick)
    assert how == "calibrated"
    assert len(list((tmp_path / "home" / "tuning").glob("*.json"))) == 1  # the stale entry is gone


def test_a_first_run_says_in_plain_words_what_calibration_does_and_how_long(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a newcomer sees of the first run's calibration: what it is for, about how long it
    takes (longer on a busy machine), how far it got; llama.cpp's setting names only under
    `edge-sql tune`."""
    monkeypatch.setattr(calibration, "other_load", lambda own_threads: 99.0)  # a busy machine
    model = tmp_path / "model.gguf"
    shutil.copyfile(tiny_gguf, model)
    quick = {k: v for k, v in SMALL.items() if k != "n_ctx"} | {"settings": SETTINGS}
    lines: list[str] = []
    tuning.tuned_settings(model, progress=lines.append, folder=tmp_path / "cache", n_ctx=1024, options=quick)
    assert lines[0].startswith(
        "first run of model.gguf on this machine: a quick calibration measures which "
        "llama.cpp settings run it fastest here, about 50 s (longer: other processes keep "
        "the CPUs busy), once per file"
    )
    assert lines[1] == "calibrating model.gguf: measuring the memory of 4 candidate settings"
    counts = [line for line in lines[2:] if line.startswith("calibrating model.gguf: ")]
    assert re.fullmatch(
        r"calibrating model\.gguf: timing setting 1 of 4 \(how fast it reads a prompt and writes "
        r"tokens with it\); \d+ s so far, about 50 s in all",
        counts[0],
    ), counts
    done = [line for line in lines if line.startswith("calibrated in ")]
    assert len(done) == 1 and done[0].endswith(" s; later runs of this file reuse it")
    for jargon in ("flash_attn", "n_ubatch", "n_threads", "repack", "-token context", "candidates ("):
        assert not any(jargon in line for line in lines), (jargon, lines)
    detail: list[str] = []  # `edge-sql tune` names them
    calibrate(model, progress=detail.append, full=False, **quick)
    assert any("flash_attn=on n_ubatch=32" in line for line in detail)


def test_a_fixed_thread_count_is_a_candidate_of_the_one_calibration_per_file(tiny_gguf: Path, tmp_path: Path) -> None:
    """`--threads N` and the default share one calibration of the file: the caller's count is
    one of the candidates, and a later caller with another count gets the cached choice at it."""
    assert 7 in {s.n_threads for s in candidates(7)} and candidates(default_threads()) == candidates()
    model, folder = tmp_path / "model.gguf", tmp_path / "cache"
    shutil.copyfile(tiny_gguf, model)
    quick = {k: v for k, v in SMALL.items() if k != "n_ctx"} | {"settings": SETTINGS[:2]}
    first, how = tuning.tuned_settings(model, folder=folder, n_ctx=1024, options=quick)
    assert how == "calibrated"
    again, how = tuning.tuned_settings(model, folder=folder, n_ctx=1024, options=quick, n_threads=first.n_threads)
    assert (again, how) == (first, "cached")
    other, how = tuning.tuned_settings(model, folder=folder, n_ctx=1024, options=quick, n_threads=3)
    assert (other, how) == (replace(first, n_threads=3), "cached")
    assert (other.draft_max, other.draft_max_mtp) == (first.draft_max, first.draft_max_mtp)
    assert len(list(folder.glob("*.json"))) == 1


def test_saving_a_calibration_never_shares_a_temporary_file_with_another_writer(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    """Two processes calibrating one file at once each write under their own temporary name."""
    chosen = Settings(flash_attn=True, n_ubatch=64, n_threads=1)
    calibration_record = tuning.Calibration(
        key=tuning.cache_key(tiny_gguf),
        model_path=str(tiny_gguf),
        mode="quick",
        chosen=chosen,
        measurements=[tuning.Measurement(chosen, [64], [0.01], [0.05], 1)],
        memory_allowance=2,
        seconds=1.0,
    )
    folder = tmp_path / "cache"
    folder.mkdir()
    other = folder / f"{calibration_record.key}.tmp"  # the name every writer used to share
    other.write_text("another process, half-way through its write")
    saved = tuning.save_calibration(calibration_record, folder)
    assert other.read_text() == "another process, half-way through its write"
    assert tuning.cached_calibration(tiny_gguf, folder).chosen == chosen and saved.parent == folder
    assert sorted(p.name for p in folder.iterdir()) == sorted([other.name, saved.name])  # no temporary left


def test_fingerprint_sees_a_changed_byte_with_size_and_mtime_kept(tiny_gguf: Path, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    shutil.copyfile(tiny_gguf, model)
    stat = model.stat()
    before = file_fingerprint(model)
    with model.open("r+b") as handle:
        handle.seek(stat.st_size - 10)
        byte = handle.read(1)
        handle.seek(stat.st_size - 10)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert model.stat().st_size == stat.st_size and model.stat().st_mtime_ns == stat.st_mtime_ns
    assert file_fingerprint(model) != before


@pytest.mark.parametrize("model_fixture", ["tiny_gguf", "smollm2_gguf"])
def test_logits_agree_across_the_settings_the_tuner_may_choose(
    model_fixture: str, request: pytest.FixtureRequest
) -> None:
    model = request.getfixturevalue(model_fixture)
    tokens = np.random.default_rng(1).integers(0, 30000, 133).tolist()
    # one thread: llama.cpp splits a matmul's rows between threads, so the count does not
    # change any sum (and spinning threads on a busy two-core machine make this test slow); at
    # one thread the tuner tries flash attention on and off with every ubatch (flash_options)
    one_thread = [Settings(fa, ub, 1) for fa in tuning_settings.flash_options(1) for ub in tuning_settings.UBATCHES]
    options = [Settings(None, 256, 1), *one_thread, *(replace(s, n_threads=1) for s in candidates())]
    options = list(dict.fromkeys(options))
    assert len(options) >= 9
    reference = None
    for settings in options:
        with Session(model, settings.session_options(n_ctx=512)) as session:
            session.eval(tokens[:130])
            after_prompt = session.logits()
            for token in tokens[130:]:
                session.eval([token])
            got = (after_prompt, session.logits())
        if reference is None:
            reference = got
            continue
        for ref, logits in zip(reference, got):
            spread = float(ref.max() - ref.min())
            assert float(np.abs(logits - ref).max()) <= LOGIT_RANGE_SHARE * spread, settings
            # the most likely token changes only between near-ties (within the tolerance)
            assert ref[int(logits.argmax())] >= ref.max() - LOGIT_RANGE_SHARE * spread, settings
            p, q = _softmax(ref), _softmax(logits)
            assert float(np.sum(p * (np.log(p + 1e-30) - np.log(q + 1e-30)))) < MAX_KL, settings


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits.astype(np.float64) - logits.max())
    return z / z.sum()


def test_a_busy_machine_is_noted_and_a_quiet_one_is_not() -> None:
    assert tuning.busy_note(None, 2) == ""  # no load average on this OS
    assert tuning.busy_note(0.4, 2) == ""
    assert tuning.busy_note(1.0, 2) == ""  # half the CPUs: still fine
    note = tuning.busy_note(3.1, 2)
    assert "busy" in note and "3.1 on 2 CPUs" in note and "edge-sql tune" in note
    load = tuning.other_load(own_threads=1000)  # more threads than any load: clamped at zero
    assert load is None or load == 0.0


def test_the_calibration_records_the_load_of_other_processes(tiny_gguf: Path) -> None:
    result = calibrate(tiny_gguf, settings=SETTINGS[:1], **SMALL)
    assert result.other_load is not None and result.other_load >= 0.0
    assert ("busy" in result.note) == (result.other_load > default_threads() / 2)
    assert tuning.Calibration.from_json(json.loads(json.dumps(result.to_json()))).other_load == result.other_load


def test_tune_reports_a_bad_model_as_one_line_error(tmp_path: Path) -> None:
    """`edge-sql tune` leaves its errors to the group, like every command: one line, exit 1."""
    from click.testing import CliRunner

    from edge_sql.cli import main
    from edge_sql.errors import ModelFileError

    missing = tmp_path / "missing.gguf"
    result = CliRunner().invoke(main, ["tune", str(missing)])
    assert result.exit_code == 1
    assert result.output == f"Error: no such model file: {missing}\n"
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("not a model\n")
    result = CliRunner().invoke(main, ["tune", str(not_gguf)])
    assert result.exit_code == 1 and result.output.startswith("Error: ") and str(not_gguf) in result.output
    assert result.output.count("\n") == 1
    # `run`'s first-use calibration says nothing either before the file is known to be a model
    lines: list[str] = []
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        tuning.tuned_settings(not_gguf, progress=lines.append, folder=tmp_path / "cache")
    assert lines == []


def test_calibration_progress_says_in_words_what_it_times_and_an_overrun() -> None:
    """`2/5, 101 s of about 50 s` said nothing a newcomer could read (issue 40)."""
    from edge_sql.runtime.tuning.plan import Budget as TimeBudget
    from edge_sql.runtime.tuning.plan import Inputs, Reporter, RunPlan

    lines: list[str] = []
    plan = RunPlan(
        model_path=Path("model.gguf"),
        n_ctx=1024,
        points=[256],
        inputs=Inputs(np.random.default_rng(0), 8, 8),
        baseline=0,
        budget=TimeBudget(50.0, started=time.perf_counter() - 101),
        report=Reporter(lines.append, True),
        n_timed=5,
        counted=1,
    )
    plan.timing("flash_attn=on n_ubatch=512 n_threads=2 repack=off")
    assert re.fullmatch(
        r"calibrating model\.gguf: timing setting 2 of 5 \(how fast it reads a prompt and writes tokens "
        r"with it\); 10\d s so far, more than the 50 s planned: the CPUs are slower or busier than "
        r"expected",
        lines[0],
    ), lines
