"""Make a random-weight Qwen3.5 checkpoint of the real 2B shape, for conversion and speed benchmarks.

Usage: python -m benchmarks.model.make_2b_checkpoint [OUT_DIR] [--force]   (default: benchmarks/work/qwen3.5-2b-random)

The shape is the one in shared/reference/measured-here.md (hidden 2048, 24 layers with full
attention every 4th, FFN 6144, 8/2 heads of 256, Gated DeltaNet 16/16 heads of 128, vocab
248,320, tied embeddings, MRoPE [11, 11, 10]), as `Qwen3_5ForConditionalGeneration` with
one MTP layer (`mtp.*`) and a small vision tower, BF16 safetensors in ~2 GB shards with an
index, and the real Qwen3.5 tokenizer (rebuilt offline by benchmarks/model/checkpoint_tokenizer.py). Tensor
names and shapes come from transformers' model built on the meta device (no memory); values
are drawn shard by shard, so the script needs about one shard of memory. About 3.8 GB on disk.
Compute cost does not depend on the values, so conversion and inference speed are the real
model's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

from benchmarks.model.checkpoint_tokenizer import build_tokenizer

REPO = Path(__file__).resolve().parents[2]

DEFAULT_OUT = REPO / "benchmarks" / "work" / "qwen3.5-2b-random"
SHARD_BYTES = 2 * 1024**3
SEED = 2026

TEXT_CONFIG = {
    "vocab_size": 248320,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 24,
    "full_attention_interval": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    },
    "eos_token_id": 248044,
}
# The vision tower is dropped by the converter; a small one keeps the checkpoint's structure.
VISION_CONFIG = {
    "depth": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 16,
    "out_hidden_size": 2048,
}


def tensor_shapes() -> tuple[dict[str, tuple[int, ...]], object]:
    """Every tensor of the checkpoint: transformers' model on the meta device, plus the MTP layer."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    config = Qwen3_5Config(text_config=dict(TEXT_CONFIG), vision_config=dict(VISION_CONFIG), tie_word_embeddings=True)
    with torch.device("meta"):
        model = Qwen3_5ForConditionalGeneration(config)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items() if name != "lm_head.weight"}
    shapes.update(_mtp_shapes())
    return shapes, config


def _mtp_shapes() -> dict[str, tuple[int, ...]]:
    h, ffn, hd = TEXT_CONFIG["hidden_size"], TEXT_CONFIG["intermediate_size"], TEXT_CONFIG["head_dim"]
    nq, nkv = TEXT_CONFIG["num_attention_heads"], TEXT_CONFIG["num_key_value_heads"]
    p = "mtp.layers.0."
    return {
        "mtp.fc.weight": (h, 2 * h),
        "mtp.norm.weight": (h,),
        "mtp.pre_fc_norm_embedding.weight": (h,),
        "mtp.pre_fc_norm_hidden.weight": (h,),
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
    }


def make_checkpoint(out: Path) -> Path:
    from safetensors.torch import save_file

    shapes, config = tensor_shapes()
    names = sorted(shapes)
    groups: list[list[str]] = [[]]
    size = 0
    for name in names:
        nbytes = 2 * int(torch.Size(shapes[name]).numel())
        if groups[-1] and size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    gen = torch.Generator().manual_seed(SEED)
    weight_map, total = {}, 0
    for index, group in enumerate(groups, start=1):
        file_name = f"model-{index:05d}-of-{len(groups):05d}.safetensors"
        shard = {}
        for name in group:
            t = torch.empty(shapes[name], dtype=torch.bfloat16)
            if name.endswith("A_log"):
                t.uniform_(0.0, 2.0, generator=gen)
            else:
                t.normal_(0.0, 0.02, generator=gen)
            shard[name] = t
            total += t.numel() * 2
        save_file(shard, str(out / file_name), metadata={"format": "pt"})
        weight_map.update({name: file_name for name in group})
        del shard
        print(f"wrote {file_name} ({len(group)} tensors)", file=sys.stderr)
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2) + "\n")
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    config.dtype = torch.bfloat16
    config.save_pretrained(out)
    build_tokenizer(out)
    (out / "README.md").write_text(
        "---\nlicense: apache-2.0\n---\nRandom weights of the Qwen3.5-2B shape (benchmark only).\n"
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--force", action="store_true", help="remake it even if it exists")
    args = parser.parse_args()
    if (args.out / "model.safetensors.index.json").is_file() and not args.force:
        print(f"{args.out} exists (use --force to remake it)", file=sys.stderr)
        return 0
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    make_checkpoint(args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
