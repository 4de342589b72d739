"""The MTP head in the GGUF: written exactly as llama.cpp's own converter writes it, or left out.

The reference is tests/data/mtp_golden.json, made once by tests/make_mtp_golden.py from
llama.cpp's convert_hf_to_gguf.py (vendored in llama-cpp-python 0.3.36) on the same fixture
checkpoint: tensor names, shapes, GGML types and the SHA-256 of every tensor's bytes, and the
metadata the head changes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from edge_sql.convert.gguf_file import GGUFFile, read_gguf
from edge_sql.convert.hf_to_gguf import convert_checkpoint
from gguf_tensors import tensor_bytes

GOLDEN = Path(__file__).parent / "data" / "mtp_golden.json"
N_LAYERS = 4  # the fixture's trunk (tests/fixture_checkpoint.py): the MTP block is blk.4


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def ours(tiny_gguf_bf16: Path) -> GGUFFile:
    return read_gguf(tiny_gguf_bf16)


@pytest.fixture(scope="module")
def no_mtp(tiny_checkpoint: Path, tmp_path_factory) -> tuple[GGUFFile, dict]:
    out = tmp_path_factory.mktemp("no-mtp") / "tiny-no-mtp.gguf"
    report = convert_checkpoint(tiny_checkpoint, out, outtype="bf16", show_progress=False, mtp=False)
    return read_gguf(out), report.dropped


def _sha256(layout: GGUFFile, name: str) -> str:
    return hashlib.sha256(tensor_bytes(layout, name)).hexdigest()


def test_the_golden_file_describes_this_fixture(golden: dict) -> None:
    from conftest import _checkpoint

    key = _checkpoint(sharded=False)[1]
    assert golden["checkpoint_key"] == key, (
        "tests/fixture_checkpoint.py changed: run tests/make_mtp_golden.py (see its docstring) to renew the golden file"
    )


def test_mtp_tensors_are_byte_identical_to_llama_cpp_converter(ours: GGUFFile, golden: dict) -> None:
    expected = {n: t for n, t in golden["tensors"].items() if n.startswith(f"blk.{N_LAYERS}.")}
    assert len(expected) == 15  # the 15 mtp.* tensors of the checkpoint
    assert {n for n in expected if ".nextn." in n} == {
        f"blk.{N_LAYERS}.nextn.{t}.weight" for t in ("eh_proj", "enorm", "hnorm", "shared_head_norm")
    }
    written = {n for n in ours.tensors if n.startswith(f"blk.{N_LAYERS}.")}
    assert written == set(expected)
    for name, want in expected.items():
        entry = ours.tensors[name]
        assert (list(entry.shape), entry.type.name) == (want["shape"], want["type"]), name
        assert _sha256(ours, name) == want["sha256"], name


def test_same_tensors_and_mtp_metadata_as_llama_cpp_converter(ours: GGUFFile, golden: dict) -> None:
    assert {n: (list(e.shape), e.type.name) for n, e in ours.tensors.items()} == {
        n: (t["shape"], t["type"]) for n, t in golden["tensors"].items()
    }
    assert golden["metadata"] == {
        "qwen35.block_count": N_LAYERS + 1,
        "qwen35.nextn_predict_layers": 1,
        "qwen35.attention.recurrent_layers": [True, True, True, False, False],
    }
    for key, value in golden["metadata"].items():
        assert ours.metadata[key] == value, key
    assert ours.mtp_layers == 1


def test_no_mtp_leaves_the_head_out_and_the_rest_unchanged(ours: GGUFFile, no_mtp) -> None:
    layout, dropped = no_mtp
    assert dropped["mtp"] == 15 and layout.mtp_layers == 0
    assert "qwen35.nextn_predict_layers" not in layout.metadata
    assert layout.metadata["qwen35.block_count"] == N_LAYERS
    assert layout.metadata["qwen35.attention.recurrent_layers"] == [True, True, True, False]
    assert set(layout.tensors) == {n for n in ours.tensors if not n.startswith(f"blk.{N_LAYERS}.")}
    for name in layout.tensors:
        assert tensor_bytes(layout, name) == tensor_bytes(ours, name), name


def test_a_config_that_disagrees_with_the_mtp_tensors_is_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from edge_sql.errors import ConversionError
    from test_convert_errors import _linked_copy, _replace

    folder = _linked_copy(tiny_checkpoint, tmp_path / "ckpt")
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    config["text_config"]["mtp_num_hidden_layers"] = 2
    _replace(folder, "config.json", json.dumps(config))
    out = tmp_path / "x.gguf"
    with pytest.raises(ConversionError, match=r"declares 2 MTP layers but the checkpoint holds 1.*--no-mtp"):
        convert_checkpoint(folder, out, show_progress=False)
    assert not out.exists()
    convert_checkpoint(folder, out, show_progress=False, mtp=False)  # without the head it converts
    assert read_gguf(out).mtp_layers == 0
