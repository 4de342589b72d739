"""What the converter writes: tensors, transforms, dropped parts, metadata; sharded == single."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from edge_sql.convert.gguf_file import GGUFFile, read_gguf
from edge_sql.convert.hf_to_gguf import ConversionReport, convert_checkpoint
from gguf_tensors import tensor_bytes, tensor_values

PREFIX = "model.language_model."


def _hf_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a single-file checkpoint, read with the safetensors library itself."""
    with safe_open(str(checkpoint / "model.safetensors"), framework="pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 - safe_open is not iterable


def _f32(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy()


@pytest.fixture(scope="module")
def hf(tiny_checkpoint: Path) -> dict[str, torch.Tensor]:
    return _hf_tensors(tiny_checkpoint)


@pytest.fixture(scope="module")
def text_config(tiny_checkpoint: Path) -> dict:
    return json.loads((tiny_checkpoint / "config.json").read_text())["text_config"]


@pytest.fixture(scope="module")
def bf16(tiny_gguf_bf16: Path) -> GGUFFile:
    return read_gguf(tiny_gguf_bf16)


@pytest.fixture(scope="module")
def sharded_conversion(tiny_checkpoint_sharded: Path, tmp_path_factory) -> tuple[ConversionReport, GGUFFile]:
    out = tmp_path_factory.mktemp("sharded") / "sharded.gguf"
    report = convert_checkpoint(tiny_checkpoint_sharded, out, outtype="bf16", show_progress=False)
    return report, read_gguf(out)


def test_sharded_and_single_file_give_identical_tensors(bf16: GGUFFile, sharded_conversion) -> None:
    _, sharded = sharded_conversion
    assert list(sharded.tensors) == list(bf16.tensors)
    for name in bf16.tensors:
        assert sharded.tensors[name].type == bf16.tensors[name].type
        assert sharded.tensors[name].shape == bf16.tensors[name].shape
        assert tensor_bytes(sharded, name) == tensor_bytes(bf16, name), name
    differing = {k for k in bf16.metadata if bf16.metadata[k] != sharded.metadata.get(k)}
    assert differing == {"general.name"}  # named after the folder: "checkpoint" / "checkpoint-sharded"


def test_vision_tensors_are_dropped_and_counted_and_the_mtp_head_kept(
    tiny_checkpoint_sharded: Path, sharded_conversion
) -> None:
    report, layout = sharded_conversion
    index = json.loads((tiny_checkpoint_sharded / "model.safetensors.index.json").read_text())
    names = list(index["weight_map"])
    n_vision = sum(n.startswith("model.visual.") for n in names)
    n_mtp = sum(n.startswith("mtp.") for n in names)
    assert n_vision > 0 and n_mtp == 15
    assert report.dropped == {"vision": n_vision} and report.mtp_layers == 1
    assert report.tensors == len(names) - n_vision == len(layout.tensors) == 55 + n_mtp
    assert not [n for n in layout.tensors if "visual" in n or "mtp" in n]
    assert len([n for n in layout.tensors if n.startswith("blk.4.")]) == n_mtp  # the MTP block after the trunk
    assert layout.metadata["qwen35.block_count"] == 5  # llama.cpp counts the MTP block (test_convert_mtp.py)


def test_tensor_names_shapes_and_storage(bf16: GGUFFile, text_config: dict) -> None:
    h, v = text_config["hidden_size"], text_config["vocab_size"]
    linear = [i for i, t in enumerate(text_config["layer_types"]) if t == "linear_attention"]
    full = [i for i, t in enumerate(text_config["layer_types"]) if t == "full_attention"]
    assert linear == [0, 1, 2] and full == [3]
    t = bf16.tensors
    assert t["token_embd.weight"].shape == (v, h) and t["token_embd.weight"].type.name == "BF16"
    assert "output.weight" not in t  # tied embeddings
    assert t["blk.0.ssm_conv1d.weight"].shape == (2 * 2 * 64 + 4 * 64, 4)
    for name, entry in t.items():
        one_d = len(entry.shape) == 1
        if one_d or name.endswith("ssm_conv1d.weight"):
            assert entry.type.name == "F32", name
        else:
            assert entry.type.name == "BF16", name
    assert {n.split(".")[2] for n in t if n.startswith("blk.3.")} >= {"attn_q", "attn_k", "attn_v", "attn_q_norm"}
    assert not [n for n in t if n.startswith("blk.3.") and "ssm" in n]
    assert not [n for n in t if n.startswith("blk.0.") and n.startswith("blk.0.attn_q.")]


def test_untransformed_bf16_weights_are_bit_identical(bf16: GGUFFile, hf: dict) -> None:
    pairs = {
        "token_embd.weight": PREFIX + "embed_tokens.weight",
        "blk.1.ffn_down.weight": PREFIX + "layers.1.mlp.down_proj.weight",
        "blk.3.attn_q.weight": PREFIX + "layers.3.self_attn.q_proj.weight",
    }
    for gguf_name, hf_name in pairs.items():
        assert tensor_bytes(bf16, gguf_name) == hf[hf_name].contiguous().view(torch.int16).numpy().tobytes()


def test_f32_gguf_holds_the_exact_values(tiny_gguf_f32: Path, hf: dict) -> None:
    f32 = read_gguf(tiny_gguf_f32)
    assert f32.tensors["token_embd.weight"].type.name == "F32"
    np.testing.assert_array_equal(tensor_values(f32, "token_embd.weight"), _f32(hf[PREFIX + "embed_tokens.weight"]))


def test_norm_and_decay_transforms(bf16: GGUFFile, hf: dict) -> None:
    # zero-centred RMSNorm weights become 1 + w ...
    for gguf_name, hf_name in {
        "output_norm.weight": "norm.weight",
        "blk.0.attn_norm.weight": "layers.0.input_layernorm.weight",
        "blk.2.post_attention_norm.weight": "layers.2.post_attention_layernorm.weight",
        "blk.3.attn_q_norm.weight": "layers.3.self_attn.q_norm.weight",
        "blk.3.attn_k_norm.weight": "layers.3.self_attn.k_norm.weight",
    }.items():
        np.testing.assert_array_equal(tensor_values(bf16, gguf_name), _f32(hf[PREFIX + hf_name]) + 1.0)
    # ... except the gated linear-attention norm, applied as w
    np.testing.assert_array_equal(
        tensor_values(bf16, "blk.0.ssm_norm.weight"), _f32(hf[PREFIX + "layers.0.linear_attn.norm.weight"])
    )


def _tiled_order(n_k: int, n_v: int) -> list[int]:
    """HF value head at each GGUF position: GGUF position j * n_k + g holds HF head g * r + j."""
    r = n_v // n_k
    return [g * r + j for j in range(r) for g in range(n_k)]


def test_linear_attention_value_heads_are_tiled(bf16: GGUFFile, hf: dict, text_config: dict) -> None:
    n_k, n_v = text_config["linear_num_key_heads"], text_config["linear_num_value_heads"]
    d = text_config["linear_value_head_dim"]
    assert n_k != n_v  # the fixture exercises the reordering
    order = _tiled_order(n_k, n_v)
    p = PREFIX + "layers.1.linear_attn."

    def heads(x: np.ndarray, size: int, axis: int = 0) -> list[np.ndarray]:
        return np.split(x, x.shape[axis] // size, axis=axis)

    z_hf, z = heads(_f32(hf[p + "in_proj_z.weight"]), d), heads(tensor_values(bf16, "blk.1.attn_gate.weight"), d)
    for pos, head in enumerate(order):
        np.testing.assert_array_equal(z[pos], z_hf[head])
    np.testing.assert_array_equal(tensor_values(bf16, "blk.1.ssm_beta.weight"), _f32(hf[p + "in_proj_b.weight"])[order])
    np.testing.assert_array_equal(
        tensor_values(bf16, "blk.1.ssm_alpha.weight"), _f32(hf[p + "in_proj_a.weight"])[order]
    )
    np.testing.assert_array_equal(tensor_values(bf16, "blk.1.ssm_dt.bias"), _f32(hf[p + "dt_bias"])[order])
    np.testing.assert_allclose(tensor_values(bf16, "blk.1.ssm_a"), -np.exp(_f32(hf[p + "A_log"]))[order], rtol=1e-6)
    out_hf = heads(_f32(hf[p + "out_proj.weight"]), d, axis=1)
    out = heads(tensor_values(bf16, "blk.1.ssm_out.weight"), d, axis=1)
    for pos, head in enumerate(order):
        np.testing.assert_array_equal(out[pos], out_hf[head])
    qk = 2 * n_k * text_config["linear_key_head_dim"]
    qkv_hf, qkv = _f32(hf[p + "in_proj_qkv.weight"]), tensor_values(bf16, "blk.1.attn_qkv.weight")
    np.testing.assert_array_equal(qkv[:qk], qkv_hf[:qk])
    for pos, head in enumerate(order):
        np.testing.assert_array_equal(heads(qkv[qk:], d)[pos], heads(qkv_hf[qk:], d)[head])
    conv_hf, conv = _f32(hf[p + "conv1d.weight"])[:, 0, :], tensor_values(bf16, "blk.1.ssm_conv1d.weight")
    np.testing.assert_array_equal(conv[:qk], conv_hf[:qk])
    for pos, head in enumerate(order):
        np.testing.assert_array_equal(heads(conv[qk:], d)[pos], heads(conv_hf[qk:], d)[head])


def test_model_and_tokenizer_metadata(bf16: GGUFFile, tiny_checkpoint: Path, text_config: dict) -> None:
    m = bf16.metadata
    expected = {
        "general.architecture": "qwen35",
        "general.type": "model",
        "general.name": "checkpoint",
        "general.converter.name": "edge-sql convert",
        "general.file_type": 32,  # MOSTLY_BF16
        "qwen35.block_count": 5,  # 4 trunk blocks and the MTP block
        "qwen35.nextn_predict_layers": 1,
        "qwen35.context_length": text_config["max_position_embeddings"],
        "qwen35.embedding_length": 256,
        "qwen35.feed_forward_length": 512,
        "qwen35.attention.head_count": 4,
        "qwen35.attention.head_count_kv": 2,
        "qwen35.attention.key_length": 64,
        "qwen35.attention.value_length": 64,
        "qwen35.rope.freq_base": 1e7,
        "qwen35.rope.dimension_count": 16,  # head_dim 64 x partial_rotary_factor 0.25
        "qwen35.rope.dimension_sections": [3, 3, 2, 0],  # mrope_section padded to four
        "qwen35.ssm.conv_kernel": 4,
        "qwen35.ssm.state_size": 64,
        "qwen35.ssm.group_count": 2,
        "qwen35.ssm.time_step_rank": 4,
        "qwen35.ssm.inner_size": 256,
        "qwen35.full_attention_interval": 4,
        "qwen35.attention.recurrent_layers": [True, True, True, False, False],
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen35",
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.ggml.eos_token_id": 248046,  # <|im_end|>
        "tokenizer.ggml.padding_token_id": 248044,  # <|endoftext|>
    }
    assert {k: m.get(k) for k in expected} == expected
    assert m["qwen35.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)
    assert "tokenizer.ggml.bos_token_id" not in m
    assert m["tokenizer.chat_template"] == (tiny_checkpoint / "chat_template.jinja").read_text()
    assert "<think>" in m["tokenizer.chat_template"]
    assert bf16.array_lengths["tokenizer.ggml.tokens"] == 248320
    assert bf16.array_lengths["tokenizer.ggml.token_type"] == 248320
    assert bf16.array_lengths["tokenizer.ggml.merges"] > 240000


def test_source_repo_and_license_go_into_general_metadata(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "named.gguf"
    convert_checkpoint(
        tiny_checkpoint,
        out,
        outtype="bf16",
        show_progress=False,
        source_repo="cwolff/qwen3.5-2b-grpo-synsql",
        license="apache-2.0",
    )
    m = read_gguf(out).metadata
    assert m["general.name"] == "qwen3.5-2b-grpo-synsql"
    assert m["general.source.huggingface.repository"] == "cwolff/qwen3.5-2b-grpo-synsql"
    assert m["general.source.repo_url"] == "https://huggingface.co/cwolff/qwen3.5-2b-grpo-synsql"
    assert m["general.license"] == "apache-2.0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["named.gguf"]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # ordinary permissions, not mkstemp's 0600


def test_metadata_arrays_packed_in_bulk_are_the_bytes_gguf_packs(tiny_checkpoint: Path) -> None:
    """The converter's writer packs string and integer arrays in bulk (convert/gguf_stream.py);
    every value gives exactly gguf's own bytes, and gguf still judges what it does not pack."""
    import gguf

    from edge_sql.convert.gguf_stream import BulkArrayWriter
    from edge_sql.convert.tokenizer_meta import add_tokenizer_metadata, read_tokenizer

    vocab_size = json.loads((tiny_checkpoint / "config.json").read_text())["text_config"]["vocab_size"]
    ours, theirs = BulkArrayWriter(None, "qwen35"), gguf.GGUFWriter(None, "qwen35")
    for writer in (ours, theirs):
        add_tokenizer_metadata(writer, read_tokenizer(tiny_checkpoint, vocab_size))
    values = list(theirs.kv_data[0].values())
    assert {v.type for v in values} >= {gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING}
    for value in values:  # tokens, token types, merges, ids, chat template, ...
        packed = ours._pack_val(value.value, value.type, add_vtype=True, sub_type=value.sub_type)
        assert packed == gguf.GGUFWriter._pack_val(
            theirs, value.value, value.type, add_vtype=True, sub_type=value.sub_type
        )
    array = gguf.GGUFValueType.ARRAY
    for items in (
        ["ä", "", "a b", "<|im_end|>"],
        [0, -1, 2**31 - 1, -(2**31)],
        [1.5, 2.0],
        [True, False],
        [b"raw", "x"],
    ):
        assert ours._pack_val(items, array, add_vtype=False) == gguf.GGUFWriter._pack_val(
            theirs, items, array, add_vtype=False
        )
    for bad in ([1, "a"], [True, 1], []):  # mixed or empty: gguf's own error
        with pytest.raises(ValueError):
            ours._pack_val(bad, array, add_vtype=True)
    with pytest.raises(struct.error):  # out of INT32's range, as gguf's own packing refuses it
        ours._pack_val([2**31], array, add_vtype=True)
