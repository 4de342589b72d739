"""Speculative decoding on real llama.cpp: exact verification, rollback, stats, lookup drafts.

Both layer kinds are covered: SmolLM2-135M (`llama`, attention only: rollback is KV removal)
and the Qwen3.5 fixture (`qwen35`, Gated DeltaNet + attention: the recurrent state rolls back
through llama.cpp's `n_rs_seq` snapshots). Drafters here are real `Drafter`s with known
behaviour: one always wrong (every draft is rolled back), one that knows the greedy
continuation but spoils every few tokens (partial acceptance), and prompt lookup.
"""

from __future__ import annotations

import math
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from edge_sql.agent import Budget, load_prompt, run_episode
from edge_sql.errors import EdgeSqlError
from edge_sql.runtime import SamplingParams, Session
from edge_sql.runtime.speculation.lookup import LookupDrafter
from edge_sql.runtime.speculation.speculative import Speculator
from edge_sql.tools import ReadOnlyDatabase, Toolbox
from episode_checks import check_each_token_evaluated_once, check_turns_parse, sha256
from fixture_budget import TRAINED_LIMITS
from repl_bounds import SMALL as CLI_SMALL

MODELS = ["smollm2_gguf", "tiny_gguf"]
ARGS = dict(n_ctx=1024, n_batch=64, n_threads=1)
DRAFT_MAX = 6
DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
GRAMMAR = r"""
start: "SELECT " COLS " FROM " NAME (" WHERE " NAME " = " NUM)? ";"
COLS: /[A-Za-z_, ]{1,40}/
NAME: /[A-Za-z_]{1,16}/
NUM: /[0-9]{1,4}/
"""


class WrongDrafter:
    """Proposes `k` copies of a token the model never picks here: every draft is rejected."""

    name = "wrong"

    def __init__(self, token: int) -> None:
        self.token = token
        self.observed: list[tuple[int, int]] = []

    def draft(self, context: Sequence[int], k: int) -> list[int]:
        return [self.token] * k

    def observe(self, accepted: int, proposed: int) -> None:
        self.observed.append((accepted, proposed))

    def reset(self) -> None:
        self.observed = []


class SpoiltOracle:
    """Knows the greedy continuation of `prompt` and proposes it, spoiling every `every`-th token."""

    name = "oracle"

    def __init__(self, prompt: list[int], continuation: list[int], every: int, wrong: int) -> None:
        self.prompt, self.continuation, self.every, self.wrong = prompt, continuation, every, wrong

    def draft(self, context: Sequence[int], k: int) -> list[int]:
        done = len(context) - len(self.prompt)
        out = self.continuation[done : done + k]
        return [self.wrong if (done + i) % self.every == self.every - 1 else t for i, t in enumerate(out)]

    def observe(self, accepted: int, proposed: int) -> None:
        pass

    def reset(self) -> None:
        pass


def _chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module", params=MODELS)
def pair(request: pytest.FixtureRequest):
    """The same model twice: speculation off (the reference) and on."""
    path = request.getfixturevalue(request.param)
    with Session(path, **ARGS) as plain, Session(path, speculate="lookup", draft_max=DRAFT_MAX, **ARGS) as spec:
        yield plain, spec


def _run(
    session: Session,
    prompt: list[int],
    *,
    max_tokens: int,
    grammar: str | None = None,
    params: SamplingParams = SamplingParams(greedy=True),
    tail: list[int] = (),
):
    session.reset()
    session.eval(prompt)
    completion = session.generate(grammar=grammar, params=params, max_tokens=max_tokens)
    session.eval(list(tail))
    return completion, session.logits()


# Verify batches and single-token decodes round differently on Qwen3.5's recurrent layers (up to
# about 0.2% of the largest logit on the fixture; on SmolLM2 they are bit-identical), so a greedy
# step whose top two logits are closer than that may go either way, with or without drafts.
NEAR_TIE = 0.005


def _reference(plain: Session, prompt: list[int], *, max_tokens: int, tail: list[int] = ()):
    """The plain greedy run, checked to have no near-tie on its path (the identity tests'
    precondition: a prompt whose path has one must be replaced, not the assertion relaxed)."""
    reference, logits = _run(plain, prompt, max_tokens=max_tokens, tail=tail)
    if plain.info.architecture != "qwen35":
        return reference, logits  # attention only: batches and single decodes agree to the bit
    for i in range(len(reference.tokens)):
        plain.reset()
        plain.eval(prompt + reference.tokens[:i])
        top = np.sort(plain.logits())[-2:]
        assert top[1] - top[0] > NEAR_TIE * abs(top[1]) + 1e-3, f"near-tie at step {i}: use another prompt"
    return reference, logits


def _assert_same_logits(logits: np.ndarray, plain: Session, tokens: list[int], incremental: np.ndarray) -> None:
    """`logits` equal those of a context that never saw a draft: `tokens` evaluated from
    scratch in one batch (the same arithmetic as a verify batch: equal to rounding), and the
    plain incremental run's (single-token decodes round differently on Qwen3.5's recurrent
    layers, about 0.2% of the largest logit here) up to that rounding."""
    plain.reset()
    plain.eval(tokens)
    scratch = plain.logits()
    scale = float(np.abs(scratch).max())
    assert int(np.argmax(logits)) == int(np.argmax(scratch)) == int(np.argmax(incremental))
    np.testing.assert_allclose(logits, scratch, rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(logits, incremental, rtol=0, atol=1e-2 * scale)


def test_speculation_sizes_the_context_only_when_on(pair) -> None:
    plain, spec = pair
    assert plain.info.speculate == "off" and plain.info.draft_max == 0 and plain.speculator is None
    assert "speculate" not in plain.info.settings
    assert spec.info.speculate == "lookup" and spec.info.draft_max == DRAFT_MAX
    assert spec.info.rollback == ("kv+n_rs_seq" if spec.info.architecture == "qwen35" else "kv")
    assert spec.speculator is not None and spec.speculator.names == ["lookup"]


def test_rejected_drafts_roll_back_to_a_context_that_never_saw_them(pair) -> None:
    """Every draft is wrong: each verify batch rolls back all its drafts. The output, the
    counters and the logits afterwards are those of decoding without drafts."""
    plain, spec = pair
    prompt = plain.tokenize(_chat("Write a query that lists the albums."))
    tail = plain.tokenize(" and more")
    reference, ref_logits = _reference(plain, prompt, max_tokens=20, tail=tail)
    wrong = plain.tokenize("~")[0]
    assert wrong not in reference.tokens
    drafter = WrongDrafter(wrong)
    spec.use_drafters([drafter])
    try:
        completion, logits = _run(spec, prompt, max_tokens=20, tail=tail)
    finally:
        spec.use_drafters([LookupDrafter()])
    assert completion.tokens == reference.tokens and completion.stop_reason == reference.stop_reason
    _assert_same_logits(logits, plain, prompt + completion.tokens + tail, ref_logits)
    counts = completion.timings.drafts["wrong"]
    assert counts.batches >= 10 and counts.accepted == 0 and counts.rolled_back == counts.drafted >= counts.batches
    assert drafter.observed and all(accepted == 0 for accepted, _ in drafter.observed)
    # the drafts are no part of the context; llama.cpp saw them once each, plus every real token once
    transcript = prompt + completion.tokens + tail
    assert spec.tokens == transcript and spec.n_past == len(transcript)
    assert spec.timings.prompt_tokens + spec.timings.generated_tokens == len(transcript)
    assert spec.timings.rolled_back_tokens == counts.rolled_back
    assert spec.decoded_tokens == len(transcript) + counts.rolled_back
    batched, single = spec.llama_perf_counts()
    assert batched + single == len(transcript) + counts.rolled_back


def test_partly_right_drafts_are_accepted_up_to_the_first_mismatch(pair) -> None:
    plain, spec = pair
    prompt = plain.tokenize(_chat("List the tables."))
    tail = plain.tokenize("\nok")
    reference, ref_logits = _reference(plain, prompt, max_tokens=24, tail=tail)
    assert reference.stop_reason == "max_tokens"
    wrong = plain.tokenize("~")[0]
    spec.use_drafters([SpoiltOracle(prompt, reference.tokens, every=5, wrong=wrong)])
    try:
        completion, logits = _run(spec, prompt, max_tokens=24, tail=tail)
    finally:
        spec.use_drafters([LookupDrafter()])
    assert completion.tokens == reference.tokens
    _assert_same_logits(logits, plain, prompt + completion.tokens + tail, ref_logits)
    counts = completion.timings.drafts["oracle"]
    # every 5th token is spoilt: of each 5 generated tokens 4 come from accepted drafts at best
    assert counts.accepted >= len(reference.tokens) // 2
    assert counts.rolled_back > 0 and counts.accepted + counts.rolled_back == counts.drafted
    assert spec.decoded_tokens == len(prompt) + len(reference.tokens) + len(tail) + counts.rolled_back


def test_grammar_state_advances_only_over_accepted_tokens(pair) -> None:
    """Under a grammar, with drafts that are right, wrong and outside the grammar: the
    completion is the non-speculative one and matches the grammar."""
    plain, spec = pair
    prompt = plain.tokenize(_chat("Write SQL for the Album table."))
    reference, ref_logits = _run(plain, prompt, max_tokens=64, grammar=GRAMMAR)
    assert reference.text.startswith("SELECT ") and reference.text.endswith(";")
    spec.use_drafters([SpoiltOracle(prompt, reference.tokens, every=3, wrong=plain.tokenize("~")[0])])
    try:
        completion, logits = _run(spec, prompt, max_tokens=64, grammar=GRAMMAR)
    finally:
        spec.use_drafters([LookupDrafter()])
    assert completion.tokens == reference.tokens and completion.text == reference.text
    assert completion.stop_reason == reference.stop_reason == "grammar_done"
    assert completion.n_forced == reference.n_forced
    _assert_same_logits(logits, plain, prompt + completion.tokens, ref_logits)
    assert completion.timings.drafts["oracle"].accepted > 0


def test_stop_conditions_are_those_of_plain_decoding(pair) -> None:
    """Cancellation after n checks, max_tokens and a stop token end a speculative generation
    at the same token as a plain one."""
    plain, spec = pair
    prompt = plain.tokenize(_chat("Write a query that lists the albums."))
    reference, _ = _reference(plain, prompt, max_tokens=40)
    spec.use_drafters([SpoiltOracle(prompt, reference.tokens, every=4, wrong=plain.tokenize("~")[0])])
    try:
        for session in (plain, spec):
            session.reset()
            session.eval(prompt)
        calls = {id(plain): iter(range(100)), id(spec): iter(range(100))}
        cancelled = [
            s.generate(
                params=SamplingParams(greedy=True), max_tokens=40, should_stop=lambda s=s: next(calls[id(s)]) >= 7
            )
            for s in (plain, spec)
        ]
        assert cancelled[0].tokens == cancelled[1].tokens and len(cancelled[1].tokens) == 7
        assert cancelled[1].stop_reason == "cancelled"
        assert next(calls[id(plain)]) == next(calls[id(spec)])  # should_stop was asked as often
        short = [_run(s, prompt, max_tokens=9)[0] for s in (plain, spec)]
        assert short[0].tokens == short[1].tokens == reference.tokens[:9]
        assert short[1].stop_reason == "max_tokens"
        # a stop token: the first token from the 2nd on that the reference had not written before
        at = next(i for i in range(1, len(reference.tokens)) if reference.tokens[i] not in reference.tokens[:i])
        ended = []
        for s in (plain, spec):
            s.reset()
            s.eval(prompt)
            ended.append(
                s.generate(params=SamplingParams(greedy=True), max_tokens=40, stop_tokens=[reference.tokens[at]])
            )
        assert ended[0].tokens == ended[1].tokens == reference.tokens[: at + 1]
        assert ended[1].stop_reason == "stop" and ended[1].ended_turn
        assert ended[1].text == plain.detokenize(reference.tokens[:at])  # the stop token is not text
        assert spec.tokens == prompt + reference.tokens[: at + 1]
    finally:
        spec.use_drafters([LookupDrafter()])


def _chi_square_bound(df: int, z: float = 3.09) -> float:
    """The chi-square quantile at about 99.9% (Wilson-Hilferty): a tolerant bound."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_sampling_after_drafts_keeps_the_model_distribution(smollm2_gguf) -> None:
    """Temperature 1: the tokens sampled at positions that were drafted follow the same
    distribution with and without drafts (chi-square over disjoint seeds), and one seed gives
    the same tokens either way (the same random draw per position)."""
    params = lambda seed: SamplingParams(seed=seed, temperature=1.0, top_k=8, top_p=1.0)
    with Session(smollm2_gguf, **ARGS) as plain, Session(smollm2_gguf, speculate="lookup", draft_max=4, **ARGS) as spec:
        prompt = plain.tokenize(_chat("Name a colour."))
        greedy, _ = _run(plain, prompt, max_tokens=4)
        spec.use_drafters([SpoiltOracle(prompt, greedy.tokens, every=100, wrong=0)])
        prompt_state = {}
        for session in (plain, spec):  # the prompt evaluated once per session, restored for each run
            session.reset()
            session.eval(prompt)
            prompt_state[session] = session.snapshot()

        def sample(session: Session, seed: int):
            session.reset()
            assert session.restore(prompt_state[session])
            return session.generate(params=params(seed), max_tokens=3)

        n = 160
        plain_runs = [sample(plain, seed).tokens for seed in range(n)]
        spec_runs = [sample(spec, seed) for seed in range(n, 2 * n)]
        same_seed = [sample(spec, seed).tokens for seed in range(40)]
    drafted = [c.timings.drafts["oracle"] for c in spec_runs if c.timings.drafts]
    assert sum(d.accepted for d in drafted) > 0 and sum(d.rolled_back for d in drafted) > 0  # kept and rejected
    assert sum(a == b for a, b in zip(same_seed, plain_runs)) >= 39
    for position in (1, 2):  # positions whose logits came from a verify batch
        counts_plain = Counter(tuple(run[: position + 1]) for run in plain_runs)
        counts_spec = Counter(tuple(c.tokens[: position + 1]) for c in spec_runs)
        categories = [c for c in counts_plain | counts_spec if counts_plain[c] + counts_spec[c] >= 10]
        pooled = lambda counts, cats=categories: [counts[c] for c in cats] + [n - sum(counts[c] for c in cats)]
        a, b = pooled(counts_plain), pooled(counts_spec)
        cells = [(x, y) for x, y in zip(a, b) if x + y > 0]
        statistic = sum((x - y) ** 2 / (x + y) for x, y in cells)  # two equal-size samples
        assert len(cells) >= 3
        assert statistic < _chi_square_bound(len(cells) - 1), (position, cells)


def test_lookup_drafter_finds_the_longest_latest_match() -> None:
    drafter = LookupDrafter(min_n=2, max_n=4)
    context = [1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 7, 2, 3]
    # suffix (2, 3): latest earlier occurrence is at 6..7, followed by 4, 5, 7
    assert drafter.draft(context, 3) == [4, 5, 7]
    context += [4]
    # (2, 3, 4) occurred at 6..8: followed by 5, 7, 2
    assert drafter.draft(context, 5) == [5, 7, 2, 3, 4]
    assert drafter.draft(context + [8, 8, 6], 4) == []  # (8, 6) never occurred
    assert drafter.draft([5, 6, 5, 6], 2) == [5, 6]  # another context: the index starts over
    assert drafter.draft([1], 3) == [] and drafter.draft(context, 0) == []


def test_speculator_adapts_draft_length_and_auto_turns_a_losing_source_off() -> None:
    always = WrongDrafter(7)
    speculator = Speculator([always], max_k=8, auto=True)
    name, drafts = speculator.propose([1, 2, 3], room=100)
    assert name == "wrong" and len(drafts) == 4  # the first draft length
    speculator.record(name, 4, 4)
    assert len(speculator.propose([1], room=100)[1]) == 8  # fully accepted: doubled, up to max_k
    assert len(speculator.propose([1], room=3)[1]) == 3  # never more than the room
    speculator.record(name, 8, 0)
    assert len(speculator.propose([1], room=100)[1]) == 1  # rejected at once: one token next time
    losing = Speculator([WrongDrafter(7)], max_k=8, auto=True)
    for _batch in range(4):  # each batch: one draft, rejected, a loss of 0.1 decodes
        assert losing.is_on("wrong")
        losing.record(losing.propose([1], room=100)[0], 1, 0)
    assert not losing.is_on("wrong") and losing.propose([1], room=100) is None
    for _ in range(70):
        losing.propose([1], room=100)
    assert losing.is_on("wrong")  # tried again after the cool-down
    costly = Speculator([WrongDrafter(7)], max_k=8, auto=True)
    for _batch in range(4):  # 3 of 4 drafts accepted, but the batch measured 5 decodes: a loss
        costly.record(costly.propose([1], room=100)[0], 4, 3, cost=5.0)
    assert not costly.is_on("wrong")
    cheap = Speculator([WrongDrafter(7)], max_k=8, auto=True)
    for _batch in range(8):  # 1 of 4 accepted in a batch that cost 1.2 decodes: a gain
        cheap.record(cheap.propose([1], room=100)[0], 4, 1, cost=1.2)
    assert cheap.is_on("wrong")
    plain = Speculator([WrongDrafter(7)], max_k=8, auto=False)
    for _ in range(10):
        plain.record("wrong", 1, 0)
    assert plain.is_on("wrong")  # "lookup" mode never turns its source off


def test_speculate_modes_are_checked_before_loading(smollm2_gguf) -> None:
    with pytest.raises(EdgeSqlError, match="has no MTP head"):  # SmolLM2 has none
        Session(smollm2_gguf, speculate="mtp", **ARGS)
    with pytest.raises(EdgeSqlError, match="unknown speculation mode"):
        Session(smollm2_gguf, speculate="fast", **ARGS)
    with pytest.raises(ValueError, match="draft_max"):
        Session(smollm2_gguf, speculate="lookup", draft_max=64, **ARGS)
    with Session(smollm2_gguf, **ARGS) as plain, pytest.raises(RuntimeError, match="speculation is off"):
        plain.use_drafters([LookupDrafter()])


# ---- whole episodes ---------------------------------------------------------------------------

SMOLLM2_BUDGET = dict(
    max_tokens=2048,
    max_think_tokens=16,
    max_final_think_tokens=8,
    max_sql_chars=80,
    max_name_chars=24,
    max_final_sql_tokens=40,
    max_calls_per_turn=2,
    max_rounds=2,
)
EPISODE_CASES = {  # fixture: (n_ctx, budget, [(database, question, prompt template)], sampling)
    "smollm2_gguf": (
        2048,
        SMOLLM2_BUDGET,
        [
            ("chinook", "How many rows does the Album table have?", None),
            ("chinook", "How many tracks are in the Track table?", "sqale-v1"),
        ],
    ),
    "tiny_gguf": (
        2048,
        dict(
            max_tokens=1024,
            max_think_tokens=12,
            max_final_think_tokens=8,
            max_sql_chars=24,
            max_name_chars=16,
            min_string_chars=8,
            min_think_tokens=4,
            max_final_sql_tokens=24,
            max_calls_per_turn=3,
        ),
        [
            ("chinook", "How many albums are there?", None),
            ("northwind", "How many orders were shipped to France?", None),
        ],
    ),
    "tiny_trained_gguf": (
        4096,
        TRAINED_LIMITS,
        [
            ("chinook", "How many rows does the Album table have?", None),
            ("northwind", "What is the largest UnitPrice in Products?", None),
            ("chinook", "Show the Name of every row of Artist.", None),
        ],
    ),
}


@pytest.fixture(scope="module")
def databases(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("dbs")
    paths = {name: folder / f"{name}.sqlite" for name in ("chinook", "northwind")}
    for name, path in paths.items():
        shutil.copyfile(DATA_DIR / name / f"{name}.sqlite", path)
    return paths


@pytest.mark.parametrize("model", list(EPISODE_CASES))
def test_greedy_episodes_are_token_identical_with_lookup(model, request, databases) -> None:
    path = request.getfixturevalue(model)
    n_ctx, budget, cases = EPISODE_CASES[model]
    before = {name: sha256(p) for name, p in databases.items()}
    runs = {}
    modes = ("off", "lookup", "auto") + (("mtp",) if model != "smollm2_gguf" else ())  # the fixture has a head
    for mode in modes:
        with Session(path, n_ctx=n_ctx, n_threads=1, speculate=mode) as session:
            runs[mode] = []
            for db, question, template in cases:
                with ReadOnlyDatabase(databases[db]) as database:
                    result = run_episode(
                        session,
                        Toolbox(database),
                        question,
                        params=SamplingParams(greedy=True),
                        prompt=load_prompt(template),
                        budget=Budget(**budget),
                    )
                runs[mode].append((result, list(session.tokens), session.decoded_tokens))
    assert {name: sha256(p) for name, p in databases.items()} == before
    for mode in modes[1:]:
        for (ref, ref_tokens, ref_decoded), (result, tokens, decoded) in zip(runs["off"], runs[mode]):
            assert tokens == ref_tokens and result.transcript == ref.transcript
            assert (result.sql, result.rows, result.stop) == (ref.sql, ref.rows, ref.stop)
            check_turns_parse(result)
            check_each_token_evaluated_once(result, len(tokens))
            stats = result.stats.to_json()
            assert stats["speculate"] == mode and ref.stats.to_json()["speculate"] == "off"
            assert stats["draft_tokens"] == stats["draft_tokens_accepted"] + stats["draft_tokens_rolled_back"]
            assert stats["draft_tokens"] == sum(d["drafted"] for d in stats["drafts"].values())
            assert ref.stats.to_json()["draft_tokens"] == 0 and ref.stats.to_json()["drafts"] == {}
            # each token of the transcript evaluated once (or restored), plus the rolled-back drafts;
            # the last token is pending (not yet decoded) without drafts and may have been
            # decoded as an accepted draft with them
            assert decoded - ref_decoded - stats["draft_tokens_rolled_back"] in (0, 1)
    accepted = sum(r.stats.to_json()["draft_tokens_accepted"] for r, _, _ in runs["lookup"])
    generated = sum(r.stats.to_json()["generated_tokens"] for r, _, _ in runs["lookup"])
    print(f"\n{model}: lookup accepted {accepted} draft tokens of {generated} generated")
    assert accepted > 0
    if "mtp" in modes:  # the head drafted (its random weights are rarely right: verification decides)
        assert all(set(r.stats.to_json()["drafts"]) <= {"mtp"} for r, _, _ in runs["mtp"])
        assert sum(r.stats.to_json()["drafts"].get("mtp", {}).get("drafted", 0) for r, _, _ in runs["mtp"]) > 0


# ---- the command line and the API ---------------------------------------------------------------


def test_run_json_reports_drafts_and_answers_the_same(tiny_trained_gguf, smollm2_gguf, chinook_db) -> None:
    import json

    from click.testing import CliRunner

    from edge_sql.cli import main

    outputs = {}
    for mode in ("off", "lookup"):
        result = CliRunner().invoke(
            main,
            [
                "run",
                "--db",
                str(chinook_db),
                "--model",
                str(tiny_trained_gguf),
                "--question",
                "How many rows does the Album table have?",
                "--json",
                "--trace",
                "--greedy",
                "--speculate",
                mode,
                *CLI_SMALL,
            ],
            catch_exceptions=False,
        )
        outputs[mode] = json.loads(result.stdout.strip().splitlines()[-1])
        assert result.exit_code == (0 if outputs[mode]["sql"] is not None else 3), result.output  # 3: no answer
    off, on = outputs["off"], outputs["lookup"]
    assert on["transcript"] == off["transcript"] and on["sql"] == off["sql"] and on["rows"] == off["rows"]
    assert off["stats"]["speculate"] == "off" and off["stats"]["draft_tokens"] == 0
    stats = on["stats"]
    assert stats["speculate"] == "lookup" and "speculate=lookup" in stats["llama_settings"]
    lookup = stats["drafts"]["lookup"]
    assert (
        lookup["drafted"] == stats["draft_tokens"] == stats["draft_tokens_accepted"] + stats["draft_tokens_rolled_back"]
    )
    assert lookup["accepted"] == stats["draft_tokens_accepted"] > 0
    assert stats["transcript_tokens"] == (
        stats["prompt_tokens_evaluated"] + stats["generated_tokens"] + stats["prefix_tokens_restored"]
    )
    for command in ("run", "bench", "serve"):
        help_text = CliRunner().invoke(main, [command, "--help"]).output
        assert "--speculate [off|lookup|auto|mtp]" in help_text, command
    refused = CliRunner().invoke(
        main,
        [
            "run",
            "--db",
            str(chinook_db),
            "--model",
            str(smollm2_gguf),
            "--question",
            "x",
            "--speculate",
            "mtp",
            *CLI_SMALL,
        ],
    )
    assert refused.exit_code == 1 and "has no MTP head" in refused.output


def test_agent_speculates_when_asked(tiny_trained_gguf, chinook_db) -> None:
    import edge_sql

    with edge_sql.Agent(
        tiny_trained_gguf,
        n_ctx=2048,
        n_threads=1,
        pull_if_missing=False,
        tune=False,
        prefix_cache=False,
        speculate="auto",
        budget=Budget(max_tokens=2048, **{k: v for k, v in TRAINED_LIMITS.items() if k != "max_tokens"}),
    ) as agent:
        assert agent.info.speculate == "auto" and agent.session.speculator.auto
        result = agent.ask("Show the Name of every row of Artist.", chinook_db, greedy=True)
    assert result.stats.to_json()["speculate"] == "auto" and result.stats.to_json()["draft_tokens"] > 0
    assert result.stats.to_json()["drafts"]["lookup"]["accepted"] == result.stats.to_json()["draft_tokens_accepted"]
