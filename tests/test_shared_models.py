"""Sessions of one file share the loaded model and its vocabulary view (runtime/llama/shared_models.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sql.runtime import Session, release_idle
from edge_sql.runtime.llama import shared_models

ARGS = dict(n_ctx=256, n_threads=1)


def test_sessions_of_one_file_share_the_model_and_its_vocabulary_view(tiny_gguf: Path) -> None:
    release_idle()
    with Session(tiny_gguf, **ARGS) as first, Session(tiny_gguf, n_ctx=512, n_threads=1, flash_attn=False) as second:
        assert first.llama_model == second.llama_model  # one model, two contexts
        assert first.lltokenizer() is second.lltokenizer()
        tokens = first.tokenize("SELECT COUNT(*) FROM Album")
        first.eval(tokens)
        second.eval(tokens)
        assert np.abs(first.logits() - second.logits()).max() < 0.05 * np.ptp(first.logits())  # own contexts
        assert len(second.tokens) == len(tokens) and len(first.tokens) == len(tokens)
    (loaded,) = shared_models._loaded.values()
    assert loaded.refs == 0  # both closed: kept idle for the next session
    with Session(tiny_gguf, **ARGS) as again:
        assert shared_models._loaded[loaded.key] is loaded and again.llama_model == loaded.model
        assert loaded.lltokenizer is not None  # not rebuilt
    assert release_idle() == 1 and not shared_models._loaded


def test_loading_another_file_frees_the_idle_model(tiny_gguf: Path, tiny_gguf_fast: Path) -> None:
    release_idle()
    with Session(tiny_gguf, **ARGS):
        pass
    with Session(tiny_gguf_fast, **ARGS) as other:
        assert [m.key[0] for m in shared_models._loaded.values()] == [str(tiny_gguf_fast.resolve())]
        assert next(iter(shared_models._loaded.values())).refs == 1
        other.eval(other.tokenize("Hello"))
        assert np.isfinite(other.logits()).all()
    release_idle()


def test_a_rewritten_file_is_loaded_again(tiny_gguf: Path, tmp_path: Path) -> None:
    release_idle()
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    with Session(copy, **ARGS):
        pass
    (before,) = shared_models._loaded.values()
    copy.write_bytes(tiny_gguf.read_bytes())  # same bytes, a new file version (mtime)
    with Session(copy, **ARGS):
        (after,) = shared_models._loaded.values()
        assert after is not before and after.key != before.key
    release_idle()


def test_a_session_without_the_mtp_head_takes_the_model_loaded_with_it(tiny_gguf: Path) -> None:
    """The head is an extra block the main graph never runs: a session that does not draft with
    it uses the file's model loaded with it (same buffers, same logits) instead of loading the
    file again; a session that drafts with it never gets a model loaded without it."""
    release_idle()
    with Session(tiny_gguf, **ARGS) as plain:
        tokens = plain.tokenize("SELECT COUNT(*) FROM Album")
        plain.eval(tokens)
        reference, buffers = plain.logits(), plain.info.buffers
        with Session(tiny_gguf, mtp=True, **ARGS) as with_head:  # needs the head: loaded again
            assert with_head.llama_model != plain.llama_model and with_head.info.mtp_layers == 1
    assert release_idle() == 2  # both idle now
    with Session(tiny_gguf, mtp=True, **ARGS):
        pass  # the model with the head stays loaded, idle
    (loaded,) = shared_models._loaded.values()
    with Session(tiny_gguf, **ARGS) as without_head:
        assert without_head.llama_model == loaded.model and loaded.refs == 1
        assert without_head.info.mtp_layers == 0 and without_head.info.buffers == buffers
        without_head.eval(tokens)
        assert np.array_equal(without_head.logits(), reference)
    assert release_idle() == 1 and not shared_models._loaded
