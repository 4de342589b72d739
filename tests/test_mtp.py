"""The MTP head at run time: loaded with the model, main outputs unchanged, and the drafter.

Runs on the Qwen3.5 fixture, whose GGUF carries the MTP head as llama.cpp's converter writes
it (test_convert_mtp.py). The fixture's head has random weights, so its drafts are checked for
what does not depend on quality: valid ids, determinism, the cache following the session, the
memory it takes; acceptance needs the real weights (benchmarks/results/mtp.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sql.convert.hf_to_gguf import convert_checkpoint
from edge_sql.errors import EdgeSqlError
from edge_sql.runtime import SamplingParams, Session
from edge_sql.runtime.speculation.mtp import MTPDrafter

# a small context keeps each session light (threads: the CPUs this test worker runs on)
SESSION_ARGS = dict(n_ctx=512, n_batch=64, mtp=True)
PROMPT = (
    "<|im_start|>user\nHow many customers live in Berlin? Use the customers table.<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nI should count the rows of customers where city is Berlin."
)
# the fixture: 2 KV heads of dim 64 in the MTP layer, F16 cache
MTP_LAYER_KV_BYTES_PER_POSITION = 2 * 2 * 64 * 2


@pytest.fixture(scope="module")
def no_mtp_gguf(tiny_checkpoint: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("no-mtp") / "tiny-no-mtp.gguf"
    convert_checkpoint(tiny_checkpoint, out, outtype="bf16", show_progress=False, mtp=False)
    return out


def _prompt_logits(session: Session) -> np.ndarray:
    session.reset()
    session.eval(session.tokenize(PROMPT))
    return session.logits()


def test_the_head_loads_and_leaves_the_main_model_unchanged(tiny_gguf: Path, no_mtp_gguf: Path) -> None:
    with Session(tiny_gguf, **SESSION_ARGS) as with_head, Session(no_mtp_gguf, **SESSION_ARGS) as without:
        assert (with_head.info.mtp_layers, without.info.mtp_layers) == (1, 0)
        assert with_head.info.n_layers == without.info.n_layers == 4  # the trunk; the head is extra
        reference = _prompt_logits(without)
        assert np.array_equal(_prompt_logits(with_head), reference)
        with MTPDrafter(with_head.context):  # the session now also keeps every hidden state for the drafter
            assert np.array_equal(_prompt_logits(with_head), reference)
            greedy = SamplingParams(greedy=True)
            drafted_alongside = with_head.generate(params=greedy, max_tokens=8).tokens
        _prompt_logits(without)
        assert drafted_alongside == without.generate(params=greedy, max_tokens=8).tokens
        with pytest.raises(EdgeSqlError, match="has no MTP head"):
            MTPDrafter(without.context)
    with Session(tiny_gguf, **{**SESSION_ARGS, "mtp": False}) as not_loaded:
        assert not_loaded.info.mtp_layers == 0  # loaded only on request (its weights cost memory)
        assert np.array_equal(_prompt_logits(not_loaded), reference)
        with pytest.raises(EdgeSqlError, match=r"mtp=True"):
            MTPDrafter(not_loaded.context)


def test_drafts_are_valid_and_deterministic(tiny_gguf: Path) -> None:
    drafts = []
    for _ in range(2):  # two independent sessions and drafters, same steps
        with Session(tiny_gguf, **SESSION_ARGS) as session, MTPDrafter(session.context) as drafter:
            prompt = session.tokenize(PROMPT)
            session.eval(prompt)
            before = session.logits()
            context = prompt + [int(np.argmax(before))]  # sampled, not decoded yet
            first = drafter.draft(context, 4)
            assert drafter.draft(context, 4) == first  # same state, same draft
            assert len(first) == 4 and all(0 <= t < session.n_vocab for t in first)
            assert np.array_equal(session.logits(), before)  # drafting never touches the session
            assert drafter.draft(context, 0) == []
            assert drafter.draft(context + first[:2], 3) == []  # the session has no state at those positions
            assert (drafter.stats.drafts, drafter.stats.draft_tokens) == (2, 8)
            assert drafter.stats.mirrored_tokens == len(prompt)
            drafter.p_min = 1.0  # no token is that certain: the draft stops before its first token
            assert drafter.draft(context, 4) == []
            drafter.p_min = 1e-9  # every token is: the whole draft, unchanged
            assert drafter.draft(context, 4) == first
            assert drafter.stats.draft_steps == 4 + 4 + 1 + 4
            drafts.append(first)
    assert drafts[0] == drafts[1]


def test_the_mtp_cache_follows_the_session(tiny_gguf: Path) -> None:
    with Session(tiny_gguf, **{**SESSION_ARGS, "n_batch": 16}) as session, MTPDrafter(session.context) as drafter:
        prompt = session.tokenize(PROMPT)
        assert len(prompt) > 32
        session.eval(prompt)  # three or more decodes of at most 16 tokens, mirrored one by one
        assert drafter.cache_span == (0, len(prompt) - 1)
        p = len(prompt)
        context = prompt + [int(np.argmax(session.logits()))]
        drafted = drafter.draft(context, 3)
        assert drafter.cache_span == (0, p + 2)  # draft entries at p .. p + 2
        session.eval([context[-1], drafted[0]])  # as a verification batch would: drafts replaced
        assert drafter.cache_span == (0, p + 1)
        session.reset()
        drafter.reset()  # as a session with speculation on does on reset
        assert drafter.draft(context, 2) == []  # no hidden state of the new context yet
        session.eval(prompt[:10])
        assert drafter.cache_span == (0, 9)  # a context that starts afresh: the cache too
        drafter.observe(2, 3)
        drafter.observe(0, 1)
        assert drafter.acceptance == 0.5
        with pytest.raises(ValueError):
            drafter.observe(4, 3)


def test_a_restored_prefix_keeps_its_mtp_cache(tiny_gguf: Path) -> None:
    with Session(tiny_gguf, **SESSION_ARGS) as session, MTPDrafter(session.context) as drafter:
        prompt = session.tokenize(PROMPT)
        session.eval(prompt)
        saved = session.snapshot()
        session.eval(session.tokenize(" Then I answer."))
        session.reset()
        drafter.reset()
        assert session.restore(saved)  # no decode: the drafter never sees these tokens again
        mirrored = drafter.stats.mirrored_tokens
        session.eval(session.tokenize(" So"))
        assert drafter.stats.mirrored_tokens == mirrored + 1
        assert drafter.cache_span == (0, len(prompt) - 1)  # the prompt's entries kept, not re-evaluated
        assert len(drafter.draft(session.tokens + [int(np.argmax(session.logits()))], 2)) == 2
        session.reset()
        drafter.reset()
        session.eval(session.tokenize("SELECT"))  # another context from position 0: nothing kept
        assert drafter.cache_span[0] == 0 and drafter.cache_span[1] < 3


def test_the_drafter_adds_one_layer_of_cache_not_a_second_context(tiny_gguf: Path) -> None:
    with Session(tiny_gguf, **SESSION_ARGS) as session, MTPDrafter(session.context) as drafter:
        assert drafter.buffers["CPU KV"] == 512 * MTP_LAYER_KV_BYTES_PER_POSITION
        assert not [kind for kind in drafter.buffers if kind.endswith(" RS")]  # no recurrent state
        assert not [kind for kind in drafter.buffers if kind.endswith(" model")]  # no weights loaded again
        assert sum(drafter.buffers.values()) < 16 * 2**20
