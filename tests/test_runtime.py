"""Session on real llama.cpp: eval-once accounting, logits, generation, grammar, special tokens.

Every test runs on SmolLM2-135M (a real language model, `llama` architecture) and on the
small random-weight Qwen3.5 fixture (architecture `qwen35`, the real 248k tokenizer).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from edge_sql.runtime import ContextFullError, GrammarError, SamplingParams, Session

MODELS = ["smollm2_gguf", "tiny_gguf"]
# One thread: CI and dev machines have two cores shared with other work, where llama.cpp's
# spinning worker threads slow each other down.
SESSION_ARGS = dict(n_ctx=512, n_batch=64, n_threads=1)

TOOL_GRAMMAR = r"""
start: "<think>\n" think "\n" END_THINK "\n\n" call ("\n" call){0,2}
think[max_tokens=16]: /[a-zA-Z ,.]*/
call: "{\"tool\": " tool_name ", \"args\": {\"table_name\": " NAME "}}"
tool_name: "\"list_tables\"" | "\"describe_table\"" | "\"run_query\""
NAME: /"[A-Za-z_]{1,12}"/
"""


def _parse_calls(body: str) -> list[dict]:
    """The JSON objects of a turn's body, one after another (whitespace between)."""
    decoder = json.JSONDecoder()
    calls, pos = [], 0
    while pos < len(body):
        call, pos = decoder.raw_decode(body, pos)
        calls.append(call)
        while pos < len(body) and body[pos].isspace():
            pos += 1
    assert calls
    return calls


def _tool_grammar(session: Session) -> str:
    return TOOL_GRAMMAR.replace("END_THINK", session.grammar_token("</think>"))


@pytest.fixture(scope="module", params=MODELS)
def session(request: pytest.FixtureRequest) -> Session:
    path = request.getfixturevalue(request.param)
    with Session(path, **SESSION_ARGS) as loaded:
        yield loaded


def _end_tokens(session: Session) -> list[int]:
    ids = session.tokenize("<|im_end|>")
    assert len(ids) == 1
    return ids


def _chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def test_info_reports_how_it_was_loaded(session: Session) -> None:
    info = session.info
    assert info.backend == "CPU" and info.gpu_layers == 0
    assert info.n_ctx == 512 and info.n_batch == 64 and info.n_threads == 1
    assert info.architecture in ("llama", "qwen35")
    assert session.n_vocab == info.n_vocab > 40000
    assert "CPU" in info.describe()


def test_tokenize_round_trip(session: Session) -> None:
    text = 'SELECT "Order Details"."UnitPrice" FROM "Order Details" -- café ümlaut 表 ✓\n'
    tokens = session.tokenize(text)
    assert session.detokenize(tokens) == text
    special = session.tokenize("<|im_start|>user")
    assert len(session.tokenize("<|im_start|>", special=True)) == 1
    assert len(session.tokenize("<|im_start|>", special=False)) > 1
    assert session.detokenize(special) == "<|im_start|>user"


def test_split_characters_stream_intact(session: Session) -> None:
    """A character whose bytes span a forced run and a sampled token streams whole, never as U+FFFD."""
    rare = ["\U0001d518", "\U0001d519"]  # 4-byte characters: byte-level tokens in both vocabularies
    assert any(len(session.tokenize(c)) > 1 for c in rare)
    grammar = "start: " + " | ".join(json.dumps(c + c) for c in rare)
    for seed in range(3):
        session.reset()
        session.eval(session.tokenize(_chat("Write a symbol.")))
        streamed: list[str] = []
        completion = session.generate(
            grammar=grammar, params=SamplingParams(seed=seed), max_tokens=20, on_text=streamed.append
        )
        assert completion.text in (rare[0] * 2, rare[1] * 2)
        assert "".join(streamed) == completion.text and "\ufffd" not in "".join(streamed)
        assert all(streamed)
        assert session.detokenize(completion.tokens) == completion.text


def test_each_token_is_evaluated_once(session: Session, request: pytest.FixtureRequest) -> None:
    """Eval, generate, eval more, generate: counters match; logits equal a from-scratch run."""
    session.reset()
    end = _end_tokens(session)
    params = SamplingParams(seed=5)
    first = session.tokenize(_chat("List the tables."))
    session.eval(first)
    one = session.generate(params=params, max_tokens=12, stop_tokens=end)
    second = session.tokenize("<|im_end|>\n<|im_start|>user\nAnd the columns?<|im_end|>\n<|im_start|>assistant\n")
    if one.ended_turn:
        second = second[1:]
    session.eval(second)
    two = session.generate(params=params, max_tokens=12, stop_tokens=end)
    third = session.tokenize("\nthanks")
    session.eval(third)

    transcript = first + one.tokens + second + two.tokens + third
    assert session.tokens == transcript
    assert session.n_past == len(transcript)
    assert session.timings.prompt_tokens == len(first) + len(second) + len(third)
    assert session.timings.generated_tokens == len(one.tokens) + len(two.tokens)
    assert session.timings.prompt_tokens + session.timings.generated_tokens == session.n_past
    # every token went through llama_decode exactly once, by our count and by llama.cpp's
    assert session.decoded_tokens == len(transcript)
    batched, single = session.llama_perf_counts()
    assert len(one.tokens) >= 2  # so llama.cpp's counters (floored at 1) are exact
    assert batched + single == len(transcript)

    incremental = session.logits()
    with Session(request.getfixturevalue(_model_of(session)), **SESSION_ARGS) as fresh:
        fresh.eval(transcript)
        scratch = fresh.logits()
    assert int(np.argmax(incremental)) == int(np.argmax(scratch))
    np.testing.assert_allclose(incremental, scratch, rtol=0, atol=2e-2 * float(np.abs(scratch).max()))


def _model_of(session: Session) -> str:
    return "tiny_gguf" if session.info.architecture == "qwen35" else "smollm2_gguf"


def test_seed_reproduces_a_generation(session: Session) -> None:
    prompt = session.tokenize(_chat("Name three colours."))
    runs = []
    for seed in (11, 11, 12):
        session.reset()
        session.eval(prompt)
        runs.append(session.generate(params=SamplingParams(seed=seed, temperature=1.0), max_tokens=16).tokens)
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_greedy_follows_argmax(session: Session) -> None:
    session.reset()
    session.eval(session.tokenize(_chat("Count: one, two,")))
    expected = int(np.argmax(session.logits()))
    completion = session.generate(params=SamplingParams(greedy=True), max_tokens=1)
    assert completion.tokens == [expected]
    assert completion.stop_reason == "max_tokens"


def test_stop_token_ends_the_turn(session: Session) -> None:
    """Under a grammar the stop token is allowed where the grammar may end; once sampled it
    stays in the context. A grammar that runs to its end appends nothing more."""
    end = _end_tokens(session)
    reasons = set()
    for seed in range(6):
        session.reset()
        session.eval(session.tokenize(_chat("Hi")))
        grammar = "start: /[a-z]{0,2}/"  # accepting from the start: the stop token is allowed
        completion = session.generate(
            grammar=grammar, params=SamplingParams(seed=seed, temperature=2.0), max_tokens=20, stop_tokens=end
        )
        reasons.add(completion.stop_reason)
        assert re.fullmatch(r"[a-z]{0,2}", completion.text)
        if completion.stop_reason == "stop":
            assert completion.ended_turn and completion.tokens[-1] == end[0] == session.tokens[-1]
        else:
            assert completion.stop_reason == "grammar_done" and not completion.ended_turn
            assert end[0] not in completion.tokens and len(completion.text) == 2
    assert reasons <= {"stop", "grammar_done"}


def test_generate_needs_a_prompt(session: Session) -> None:
    session.reset()
    with pytest.raises(ValueError, match="needs a prompt"):
        session.generate(max_tokens=2)


def test_cancel_and_max_tokens(session: Session) -> None:
    session.reset()
    session.eval(session.tokenize(_chat("Tell a long story.")))
    calls = iter(range(100))
    completion = session.generate(params=SamplingParams(seed=2), max_tokens=50, should_stop=lambda: next(calls) >= 3)
    assert completion.stop_reason == "cancelled" and len(completion.tokens) == 3
    completion = session.generate(params=SamplingParams(seed=2), max_tokens=4)
    assert completion.stop_reason == "max_tokens" and len(completion.tokens) == 4


def test_context_full_is_a_clean_stop(request: pytest.FixtureRequest, session: Session) -> None:
    with Session(request.getfixturevalue(_model_of(session)), n_ctx=256, n_batch=256, n_threads=1) as small:
        filler = small.tokenize(" the")[0]
        small.eval([filler] * (small.n_ctx - 3))
        completion = small.generate(params=SamplingParams(seed=4), max_tokens=50)
        assert completion.stop_reason == "context_full"
        assert len(completion.tokens) == 3 and small.n_past == small.n_ctx
        with pytest.raises(ContextFullError, match="context full"):
            small.eval(small.tokenize(" more"))


def test_grammar_token_uses_special_tokens_only_when_they_exist(session: Session) -> None:
    end = _end_tokens(session)[0]
    assert session.grammar_token("<|im_end|>") == f"<[{end}]>"
    assert session.grammar_token('say "hi"\n') == '"say \\"hi\\"\\n"'
    if session.info.architecture == "qwen35":
        assert session.grammar_token("</think>") == "<[248069]>"
        assert session.grammar_token("<think>") == "<[248068]>"
    else:  # SmolLM2 has no think tokens: a plain literal
        assert session.grammar_token("</think>") == '"</think>"'


def test_grammar_special_token_is_emitted_as_one_token(session: Session) -> None:
    session.reset()
    session.eval(session.tokenize(_chat("Think first.")))
    grammar = f'start: "ok" {session.grammar_token("</think>")} "done"'
    completion = session.generate(grammar=grammar, params=SamplingParams(seed=0), max_tokens=20)
    assert completion.text == "ok</think>done"
    think_ids = session.tokenize("</think>")
    if session.info.architecture == "qwen35":
        assert think_ids == [248069] and 248069 in completion.tokens
    assert completion.stop_reason == "grammar_done" and completion.n_forced == len(completion.tokens)


def test_tool_call_grammar_always_parses(session: Session) -> None:
    """Seeded generations under a think + JSON tool-call grammar all parse (20+ on the random model)."""
    grammar = _tool_grammar(session)
    end = _end_tokens(session)
    prompt = session.tokenize(_chat("Which tables are there?"))
    finished = 0
    forced = 0
    seeds = range(24 if session.info.architecture == "qwen35" else 8)
    for seed in seeds:
        session.reset()
        session.eval(prompt)
        completion = session.generate(grammar=grammar, params=SamplingParams(seed=seed), max_tokens=90, stop_tokens=end)
        forced += completion.n_forced
        if completion.stop_reason == "max_tokens":
            continue  # a random model may run long; what it wrote is still a grammar prefix
        finished += 1
        assert completion.stop_reason in ("stop", "grammar_done")
        assert completion.ended_turn == (completion.stop_reason == "stop")
        head, sep, body = completion.text.partition("\n</think>\n\n")
        assert sep and head.startswith("<think>\n"), completion.text
        for call in _parse_calls(body):
            assert call["tool"] in ("list_tables", "describe_table", "run_query")
            assert set(call["args"]) == {"table_name"} and isinstance(call["args"]["table_name"], str)
    assert finished >= len(seeds) * 2 // 3
    assert forced > 0


def test_invalid_grammar_is_a_clear_error(session: Session) -> None:
    with pytest.raises(GrammarError, match="invalid grammar"):
        session.generate(grammar="start: undefined_rule", max_tokens=3)


def test_repack_is_off_by_default_and_refused_where_it_would_crash(smollm2_gguf: Path) -> None:
    from edge_sql.errors import EdgeSqlError
    from edge_sql.runtime.llama.backend import repack_is_safe

    with Session(smollm2_gguf, n_ctx=256, n_threads=1) as plain:
        assert plain.info.repack is False and plain.info.n_ubatch == 256
    if repack_is_safe():
        with Session(smollm2_gguf, n_ctx=256, n_threads=1, repack=True) as packed:
            packed.eval(packed.tokenize("a multi-token batch"))
            assert packed.info.repack is True
    else:
        with pytest.raises(EdgeSqlError, match="AMX"):
            Session(smollm2_gguf, n_ctx=256, repack=True)


def test_llama_model_is_public_until_close(smollm2_gguf: Path) -> None:
    with Session(smollm2_gguf, n_ctx=256, n_threads=1) as loaded:
        assert loaded.llama_model  # a non-null llama_model pointer
    with pytest.raises(RuntimeError, match="closed"):
        loaded.llama_model  # noqa: B018 - the access is what raises


def test_the_typed_keywords_are_exactly_the_options_fields() -> None:
    """`Session(**settings)`'s TypedDict names every SessionOptions field and nothing else, and
    calibration's callers may pass exactly the fields it does not choose."""
    import dataclasses
    import typing

    from edge_sql.runtime.options import CallerSettings, SessionOptions, SessionSettings

    fields = {f.name: f.type for f in dataclasses.fields(SessionOptions)}
    assert set(SessionSettings.__annotations__) == set(fields)
    assert set(typing.get_type_hints(SessionSettings)) == set(fields)
    assert set(CallerSettings.__annotations__) == {
        "n_ctx",
        "n_gpu_layers",
        "n_batch",
        "mtp",
        "verbose",
        "adapt_threads",
    }


def test_options_are_resolved_once_and_given_as_a_record_or_as_keywords(smollm2_gguf: Path) -> None:
    from edge_sql.runtime import SessionOptions

    options = SessionOptions(n_ctx=256, n_threads=1)
    with Session(smollm2_gguf, options) as given, Session(smollm2_gguf, options, n_batch=32) as on_top:
        # one thread has nothing to adapt: flash attention stays llama.cpp's choice
        assert given.options == SessionOptions(
            n_ctx=256, n_threads=1, n_gpu_layers=given.info.gpu_layers, n_ubatch=256, draft_max=0, adapt_threads=False
        )
        assert (on_top.options.n_batch, on_top.options.n_ubatch) == (32, 32)  # ubatch at most n_batch
        assert on_top.info.n_ubatch == 32 and on_top.info.n_ctx == given.info.n_ctx == 256
    with pytest.raises(TypeError):
        Session(smollm2_gguf, options, n_contexts=2)  # not a field of SessionOptions
    with pytest.raises(ValueError, match="n_threads"):
        Session(smollm2_gguf, options, n_threads=0)


def test_the_context_knows_what_its_memory_holds(session: Session) -> None:
    """`LlamaContext.tokens` (what an MTP drafter compares with) follows eval, the lazily
    decoded last sampled token, restore and reset."""
    session.reset()
    prompt = session.tokenize(_chat("Count the albums."))
    session.eval(prompt)
    assert session.context.tokens == prompt
    completion = session.generate(params=SamplingParams(seed=3), max_tokens=5)
    assert session.context.tokens == session.tokens[:-1]  # the last sampled token waits for the next batch
    saved = session.snapshot()  # decodes it
    assert session.context.tokens == session.tokens == prompt + completion.tokens
    session.reset()
    assert session.context.tokens == [] and session.context.span == (-1, -1)
    assert session.restore(saved)
    assert session.context.tokens == list(saved.tokens) and session.context.span[1] == len(saved.tokens) - 1
