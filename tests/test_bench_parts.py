"""The bench harness's parts: teacher forcing, KL, results file, variants, modes, agreement."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from edge_sql.agent.prompt import load_prompt
from edge_sql.bench.agreement import ResultCache
from edge_sql.bench.child import own_peak_rss_bytes, run_worker
from edge_sql.bench.config import BenchConfig
from edge_sql.bench.fidelity import compare_on_tokens, generated_targets, kl_rows
from edge_sql.bench.local_runner import LocalRunner
from edge_sql.bench.modes import SCHEMA_HEADER, parse_modes, prompt_for_mode
from edge_sql.bench.results import ResultsLog, WorkKey
from edge_sql.bench.runner import run_bench, spread_by_difficulty
from edge_sql.bench.variants import BenchSetupError, default_variant_names, parse_variant_names, prepare_variants
from edge_sql.errors import EdgeSqlError
from edge_sql.evaluation import load_bundled
from edge_sql.runtime import Session
from edge_sql.runtime.probes.teacher_forcing import log_softmax, token_logprobs
from edge_sql.tools import ReadOnlyDatabase

# ---- numerics ---------------------------------------------------------------------------------


def test_log_softmax_is_stable_and_normalised() -> None:
    logits = np.array([[1e4, 0.0, -1e4], [3.0, 1.0, 0.5]], dtype=np.float32)
    out = log_softmax(logits)
    assert out.dtype == np.float32 and np.isfinite(out[0, :2]).all()
    assert out[0, 0] == 0.0 and out[0, 1] == -1e4
    expected = np.array([3.0, 1.0, 0.5]) - math.log(math.exp(3.0) + math.exp(1.0) + math.exp(0.5))
    np.testing.assert_allclose(out[1], expected, atol=1e-6)


def test_kl_rows_known_values_and_exact_zero() -> None:
    p = np.log(np.array([[0.5, 0.5], [0.25, 0.75]], dtype=np.float32))
    q = np.log(np.array([[0.9, 0.1], [0.25, 0.75]], dtype=np.float32))
    kl = kl_rows(p, q)
    assert kl[0] == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1), rel=1e-6)
    assert kl[1] == 0.0
    assert (kl_rows(q, q) == 0.0).all()
    assert kl_rows(q, p)[0] == pytest.approx(0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5), rel=1e-6)


# ---- teacher forcing on the fixture model ------------------------------------------------------

SQL_TEXT = "<|im_start|>user\nHow many albums does each artist have? SELECT ArtistId, COUNT(*) FROM Album GROUP BY 1;"


def test_token_logprobs_match_the_sessions_own_logits(tiny_gguf: Path) -> None:
    with Session(tiny_gguf, n_ctx=512, n_threads=1) as session:
        tokens = session.tokenize(SQL_TEXT)
        rows = np.concatenate(list(token_logprobs(session, tokens, chunk=len(tokens))))
        assert rows.shape == (len(tokens), session.n_vocab)
        np.testing.assert_allclose(np.exp(rows.astype(np.float64)).sum(axis=1), 1.0, atol=1e-4)
        for prefix in (len(tokens) // 2, len(tokens)):  # the session's last-token logits at two points
            session.reset()
            session.eval(tokens[:prefix])
            expected = log_softmax(session.logits()[None])[0]
            assert int(expected.argmax()) == int(rows[prefix - 1].argmax())
            np.testing.assert_allclose(rows[prefix - 1], expected, atol=1e-3)
        chunked = list(token_logprobs(session, tokens, chunk=7))
        assert [len(c) for c in chunked] == [7] * (len(tokens) // 7) + ([len(tokens) % 7] if len(tokens) % 7 else [])
        with pytest.raises(ValueError, match="out of range"):
            next(token_logprobs(session, [session.n_vocab + 1]))


def test_same_model_loaded_twice_has_zero_kl(tiny_gguf: Path) -> None:
    with (
        Session(tiny_gguf, n_ctx=256, n_batch=16, n_threads=1) as a,
        Session(tiny_gguf, n_ctx=256, n_batch=16, n_threads=1) as b,
    ):
        tokens = a.tokenize(SQL_TEXT)
        stats = compare_on_tokens(a, b, tokens, chunk=16)
        assert stats.positions == len(tokens)
        assert stats.kl_sum == 0.0 and stats.kl_max == 0.0 and stats.top1_agree == stats.positions > 0
        some = compare_on_tokens(a, b, tokens, chunk=4, positions=[0, 5, len(tokens) - 1])
        assert some.positions == 3 and some.kl_sum == 0.0 and some.top1_agree == 3


def test_fidelity_positions_are_those_that_predicted_generated_tokens(tiny_gguf: Path, tiny_gguf_f32: Path) -> None:
    """Spans [start, end) of generated tokens -> the positions whose distribution produced them,
    and only those positions are compared."""
    assert generated_targets([[3, 5], [8, 9]], 10) == [2, 3, 7]
    assert generated_targets([[3, 5], [8, 9]], 4) == [2]  # a transcript cut at 4 tokens
    assert generated_targets([], 10) == []
    with (
        Session(tiny_gguf, n_ctx=256, n_batch=16, n_threads=1) as ref,
        Session(tiny_gguf_f32, n_ctx=256, n_batch=16, n_threads=1) as var,
    ):
        tokens = ref.tokenize(SQL_TEXT)
        full = kl_rows(
            np.concatenate(list(token_logprobs(ref, tokens))), np.concatenate(list(token_logprobs(var, tokens)))
        )
        assert full.sum() > 0  # BF16 and F32 compute differently
        picked = compare_on_tokens(ref, var, tokens, chunk=4, positions=[1, 6])
        assert picked.positions == 2
        # llama.cpp computes logits only at the picked positions: the same values up to rounding
        # (a matmul over fewer rows), far closer than any other pair of positions would be
        expected = full[1] + full[6]
        assert picked.kl_sum == pytest.approx(expected, rel=1e-3)
        assert picked.kl_max == pytest.approx(max(full[1], full[6]), rel=1e-3)
        others = [full[i] + full[j] for i in range(len(full)) for j in range(i + 1, len(full)) if (i, j) != (1, 6)]
        assert min(abs(other - expected) for other in others) > 10 * abs(picked.kl_sum - expected)


# ---- results file ------------------------------------------------------------------------------


def test_results_log_skips_a_cut_line_and_keeps_appending(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / "results.jsonl")
    first = {"kind": "episode", **WorkKey("BF16", "withheld", "3", 0).as_fields(), "sql": "SELECT 1"}
    log.append(first)
    with log.path.open("a") as handle:
        handle.write('{"kind": "episode", "variant": "Q8')  # a crash mid-line
    log.append({"kind": "episode", **WorkKey("Q8_0", "given", "4", 0).as_fields()})
    assert len(list(log.records())) == 2
    assert log.done("episode") == {WorkKey("BF16", "withheld", "3", 0), WorkKey("Q8_0", "given", "4", 0)}
    assert log.done("fidelity") == set()
    log.clear()
    assert list(log.records()) == []


# ---- variants, modes, questions ----------------------------------------------------------------


def test_variant_names() -> None:
    assert default_variant_names() == ["BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_K_M-sensitive-q8"]
    assert parse_variant_names("q4_k_m, Q8_0,bf16,Q8_0") == ["BF16", "Q4_K_M", "Q8_0"]
    assert parse_variant_names("models/x.gguf") == ["BF16", "models/x.gguf"]
    with pytest.raises(EdgeSqlError, match="unknown quantization 'Q9'"):
        parse_variant_names("Q9")


def test_prepare_variants_rejects_missing_files_and_duplicate_labels(tmp_path: Path) -> None:
    base = tmp_path / "m.gguf"
    base.write_bytes(b"GGUF")
    with pytest.raises(EdgeSqlError, match="no such variant file"):
        prepare_variants(base, ["BF16", str(tmp_path / "absent.gguf")], cache_dir=tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.gguf").write_bytes(b"GGUF")
    with pytest.raises(BenchSetupError, match="two variants are labelled 'm'"):
        prepare_variants(base, ["BF16", str(base), str(tmp_path / "a" / "m.gguf")], cache_dir=tmp_path)
    with pytest.raises(EdgeSqlError, match="no such BF16 model file"):
        prepare_variants(tmp_path / "none.gguf", ["BF16"], cache_dir=tmp_path)


def test_a_quantized_variant_is_made_once_per_cache_and_again_for_a_newer_base(tiny_gguf: Path, tmp_path: Path) -> None:
    """Benches sharing a cache folder (--cache-dir) quantize a variant once; a base converted
    again under the same name (newer than the cached file) gets a fresh one."""
    base = tmp_path / "tiny.gguf"
    base.write_bytes(tiny_gguf.read_bytes())
    lines: list[str] = []
    [_, first] = prepare_variants(base, ["BF16", "Q8_0"], cache_dir=tmp_path / "cache", log=lines.append)
    made = first.path.stat().st_mtime_ns
    [_, again] = prepare_variants(base, ["BF16", "Q8_0"], cache_dir=tmp_path / "cache", log=lines.append)
    assert again.path == first.path and again.path.stat().st_mtime_ns == made and len(lines) == 1
    os.utime(base, ns=(made + 10**9, made + 10**9))  # the base is newer than the cached variant
    [_, fresh] = prepare_variants(base, ["BF16", "Q8_0"], cache_dir=tmp_path / "cache", log=lines.append)
    assert fresh.path == first.path and fresh.path.stat().st_mtime_ns > made
    assert len(lines) == 2 and "older than the base" in lines[1]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["tiny-Q8_0.gguf"]


def test_given_mode_puts_every_create_table_in_the_user_turn() -> None:
    question = next(q for q in load_bundled() if q.db_id == "chinook")
    prompt = load_prompt()
    with ReadOnlyDatabase(question.db_path) as db:
        assert prompt_for_mode(prompt, "withheld", db) is prompt
        given = prompt_for_mode(prompt, "given", db).user_text(question.question, question.evidence)
        tables = db.table_names()
        statements = [db.create_statement(t) for t in tables]
    assert given.startswith(SCHEMA_HEADER) and given.count("CREATE TABLE") == len(tables) >= 11
    assert all(statement.strip().rstrip(";") in given for statement in statements)
    assert given.endswith(prompt.user_text(question.question, question.evidence))
    assert parse_modes("given, withheld,given") == ["given", "withheld"]
    with pytest.raises(EdgeSqlError, match="unknown mode"):
        parse_modes("full")


def test_limit_takes_difficulties_in_turn() -> None:
    questions = load_bundled()
    picked = spread_by_difficulty(questions, 4)
    assert [q.difficulty for q in picked] == ["simple", "moderate", "challenging", "simple"]
    assert spread_by_difficulty(questions, None) == questions


# ---- answer agreement --------------------------------------------------------------------------


def test_answer_agreement_compares_result_sets() -> None:
    db = next(q for q in load_bundled() if q.db_id == "chinook").db_path
    cache = ResultCache()
    a = "SELECT Name FROM Genre WHERE GenreId <= 3"
    assert cache.agree(db, a, "SELECT Name FROM Genre WHERE GenreId IN (3, 2, 1) ORDER BY Name DESC")
    assert not cache.agree(db, a, "SELECT Name FROM Genre WHERE GenreId <= 4")
    assert not cache.agree(db, a, "SELECT Nme FROM Genre")  # one fails
    assert cache.agree(db, "SELECT Nme FROM Genre", None)  # both give no result
    assert not cache.agree(db, "SELECT 1 WHERE 0", None)  # an empty result is a result


# ---- child processes ---------------------------------------------------------------------------


def test_worker_failure_is_an_exit_status_and_peak_rss_is_own(tmp_path: Path) -> None:
    outcome = run_worker({"kind": "no-such-task", "variant": "x", "results_path": str(tmp_path / "r.jsonl")}, tmp_path)
    assert outcome.returncode != 0 and not outcome.ok
    assert outcome.maxrss_upper_bound_bytes > 0
    assert 10e6 < own_peak_rss_bytes() < 64e9
    assert list(tmp_path.glob("*.json")) == []  # the task file is removed


def test_store_model_supplies_base_and_variants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_gguf: Path
) -> None:
    from edge_sql.bench.config import BenchConfig
    from edge_sql.bench.runner import resolve_base
    from edge_sql.store import ModelStore

    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "store"))
    q8_file = tmp_path / "tiny-q8.gguf"
    q8_file.write_bytes(b"GGUF stand-in: recorded, never loaded")
    store = ModelStore()
    store.add("tiny", "BF16", tiny_gguf, checksum=False)
    store.add("tiny", "Q8_0", q8_file, checksum=False)
    base, from_store = resolve_base(BenchConfig(out_dir=tmp_path, model="tiny"))
    assert base == tiny_gguf.resolve()
    assert from_store("Q8_0") == q8_file.resolve() and from_store("Q6_K") is None
    variants = prepare_variants(base, ["BF16", "Q8_0"], cache_dir=tmp_path / "cache", from_store=from_store)
    assert [(v.name, v.path) for v in variants] == [("BF16", base), ("Q8_0", q8_file.resolve())]
    assert not (tmp_path / "cache").exists()  # nothing quantized
    with pytest.raises(BenchSetupError, match="either --base"):
        resolve_base(BenchConfig(out_dir=tmp_path, model="tiny", base=tiny_gguf))


def test_plots_are_skipped_with_a_note_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """matplotlib is an optional extra: without it the bench writes no PNG and says so in one line."""
    import sys

    from edge_sql.bench.plots import SKIPPED_NOTE, write_plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    notes: list[str] = []
    assert write_plots({"variants": [], "settings": {"modes": [], "reference": "BF16"}}, tmp_path, notes.append) == []
    assert notes == [SKIPPED_NOTE] and "pip install 'edge-sql[bench]'" in SKIPPED_NOTE
    assert list(tmp_path.iterdir()) == []


def test_a_bench_on_ray_needs_the_ray_runner_and_nothing_runs_without_it(tmp_path: Path) -> None:
    """The bench does not import the cluster package above it: a config that names a Ray
    cluster is refused before any work unless the Ray runner is handed in."""
    out = tmp_path / "out"
    config = BenchConfig(out_dir=out, base=tmp_path / "missing-bf16.gguf", ray="local")
    with pytest.raises(BenchSetupError, match=r"edge_sql\.cluster\.runner\.RayRunner"):
        run_bench(config)
    assert not out.exists()

    class Refuses(LocalRunner):
        def episodes(self, *args, **kwargs) -> int:
            raise AssertionError("no work may run")

    # with a runner it goes on to its own checks (here: the missing base file)
    with pytest.raises(EdgeSqlError, match=r"missing-bf16.gguf"):
        run_bench(config, runner=Refuses())
