"""What Qwen3.5 (text part) looks like to llama.cpp: dimensions, the tensor name table, metadata.

Everything here is read from the checkpoint's config.json; nothing about a particular model
size is assumed. The tensor table maps Hugging Face names to GGUF names plus the value
transforms of `edge_sql.convert.transforms`; the generic writer in `edge_sql.convert.gguf_stream` applies it.

The multi-token-prediction (MTP) head is written as llama.cpp's converter writes it (vendored
in llama-cpp-python 0.3.36, `_QwenMtpMixin`): its decoder layer becomes an extra block
`blk.{n_layers}` after the trunk (full-attention tensor names, norms +1), `mtp.fc` becomes
`nextn.eh_proj`, the two pre-fc norms `nextn.enorm`/`nextn.hnorm` and `mtp.norm`
`nextn.shared_head_norm`; `block_count` counts the extra block, `nextn_predict_layers` says how
many there are, and `recurrent_layers` marks it as attention. llama.cpp loads it only with
`llama_model_params.load_mtp`, so a file with the head runs unchanged without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import gguf
from gguf import MODEL_TENSOR as T

from edge_sql.errors import ConversionError

GGUF_ARCH = gguf.MODEL_ARCH.QWEN35
ARCH_NAME = gguf.MODEL_ARCH_NAMES[GGUF_ARCH]  # "qwen35"
SUPPORTED_ARCHITECTURES = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")
LAYER_KINDS = {"linear_attention": "linear", "full_attention": "full"}
DEFAULT_MROPE_SECTION = (11, 11, 10)  # transformers' default when the config omits it


@dataclass(frozen=True)
class Qwen35Dims:
    """The text model's dimensions, all taken from config.json."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    context_length: int
    rope_theta: float
    rope_dim: int
    rope_sections: tuple[int, int, int, int]
    layer_kinds: tuple[str, ...]  # "linear" or "full" per layer
    full_attention_interval: int
    conv_kernel: int
    linear_k_heads: int
    linear_v_heads: int
    linear_k_head_dim: int
    linear_v_head_dim: int
    tied_embeddings: bool
    mtp_layers: int = 0  # MTP layers written after the trunk (0: no MTP head in the GGUF)

    @property
    def n_blocks(self) -> int:
        """Blocks in the GGUF: the trunk plus the MTP layers (llama.cpp's `block_count`)."""
        return self.n_layers + self.mtp_layers

    @classmethod
    def from_config(cls, config: dict) -> Qwen35Dims:
        architectures = config.get("architectures") or [config.get("model_type", "unknown")]
        arch = architectures[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ConversionError(
                f"unsupported architecture {arch}: edge-sql converts {' and '.join(SUPPORTED_ARCHITECTURES)} only"
            )
        text = config.get("text_config") or config
        if config.get("quantization_config") or text.get("quantization_config"):
            method = (config.get("quantization_config") or text["quantization_config"]).get("quant_method", "?")
            raise ConversionError(f"the checkpoint is already quantized ({method}); convert a BF16/F16/F32 checkpoint")
        try:
            return cls._from_text_config(text, config)
        except KeyError as e:
            raise ConversionError(f"config.json lacks {e.args[0]}, which a {arch} config must have") from e

    @classmethod
    def _from_text_config(cls, text: dict, config: dict) -> Qwen35Dims:
        n_layers = int(text["num_hidden_layers"])
        if text.get("num_experts") or text.get("num_local_experts"):
            raise ConversionError("mixture-of-experts Qwen3.5 variants are not supported (found num_experts)")
        if text.get("attention_bias"):
            raise ConversionError("Qwen3.5 variants with attention biases are not supported (attention_bias is true)")
        interval = int(text.get("full_attention_interval", 4))
        layer_types = text.get("layer_types") or [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)
        ]
        unknown = sorted(set(layer_types) - set(LAYER_KINDS))
        if unknown:
            raise ConversionError(f"unknown layer type {unknown[0]!r} in layer_types")
        if len(layer_types) != n_layers:
            raise ConversionError(f"layer_types has {len(layer_types)} entries for {n_layers} layers")
        kinds = tuple(LAYER_KINDS[t] for t in layer_types)
        k_dim, v_dim = int(text["linear_key_head_dim"]), int(text["linear_value_head_dim"])
        k_heads, v_heads = int(text["linear_num_key_heads"]), int(text["linear_num_value_heads"])
        if k_dim != v_dim:
            raise ConversionError(
                f"linear attention key head dim {k_dim} != value head dim {v_dim}; llama.cpp's qwen35 needs them equal"
            )
        if v_heads % k_heads:
            raise ConversionError(
                f"linear attention value heads ({v_heads}) are not a multiple of key heads ({k_heads})"
            )
        rope = _rope_parameters(text)
        if rope.get("rope_type", "default") != "default":
            raise ConversionError(f"rope_type {rope['rope_type']!r} is not supported (only 'default')")
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // int(text["num_attention_heads"]))
        rope_dim = int(head_dim * float(rope.get("partial_rotary_factor", 0.25)))
        sections = list(rope.get("mrope_section") or DEFAULT_MROPE_SECTION)
        if len(sections) > 4:
            raise ConversionError(f"mrope_section {sections} has more than four entries")
        sections += [0] * (4 - len(sections))
        tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
        return cls(
            vocab_size=int(text["vocab_size"]),
            hidden_size=int(text["hidden_size"]),
            intermediate_size=int(text["intermediate_size"]),
            n_layers=n_layers,
            n_heads=int(text["num_attention_heads"]),
            n_kv_heads=int(text["num_key_value_heads"]),
            head_dim=head_dim,
            rms_norm_eps=float(text["rms_norm_eps"]),
            context_length=int(text["max_position_embeddings"]),
            rope_theta=float(rope["rope_theta"]),
            rope_dim=rope_dim,
            rope_sections=tuple(int(s) for s in sections),  # type: ignore[arg-type]
            layer_kinds=kinds,
            full_attention_interval=interval,
            conv_kernel=int(text["linear_conv_kernel_dim"]),
            linear_k_heads=k_heads,
            linear_v_heads=v_heads,
            linear_k_head_dim=k_dim,
            linear_v_head_dim=v_dim,
            tied_embeddings=tied,
            mtp_layers=int(text.get("mtp_num_hidden_layers") or 0),
        )


def _rope_parameters(text: dict) -> dict:
    """transformers 5 keeps rope settings in `rope_parameters`; older configs at the top level."""
    rope = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
    for key in ("rope_theta", "partial_rotary_factor", "mrope_section"):
        if key not in rope and key in text:
            rope[key] = text[key]
    if "rope_type" not in rope and "type" in rope:
        rope["rope_type"] = rope["type"]
    return rope


@dataclass(frozen=True)
class TensorRule:
    """One row of the name table: HF name pattern -> GGUF tensor, transforms, storage."""

    pattern: str
    target: T
    suffix: str = ".weight"
    transforms: tuple[str, ...] = ()
    keep_f32: bool = False  # stored as F32 whatever the output type (llama.cpp reads these as F32)
    mtp: bool = False  # an MTP head tensor: its block is n_layers + the MTP layer index


_TEXT = r"model\.(?:language_model\.)?"
_BLOCK = _TEXT + r"layers\.(?P<bid>\d+)\."

TENSOR_RULES: tuple[TensorRule, ...] = (
    TensorRule(_TEXT + r"embed_tokens\.weight", T.TOKEN_EMBD),
    TensorRule(_TEXT + r"norm\.weight", T.OUTPUT_NORM, transforms=("plus_one",)),
    TensorRule(r"lm_head\.weight", T.OUTPUT),
    TensorRule(_BLOCK + r"input_layernorm\.weight", T.ATTN_NORM, transforms=("plus_one",)),
    TensorRule(_BLOCK + r"post_attention_layernorm\.weight", T.ATTN_POST_NORM, transforms=("plus_one",)),
    # full-attention layers (q_proj carries the query and a per-head output gate)
    TensorRule(_BLOCK + r"self_attn\.q_proj\.weight", T.ATTN_Q),
    TensorRule(_BLOCK + r"self_attn\.k_proj\.weight", T.ATTN_K),
    TensorRule(_BLOCK + r"self_attn\.v_proj\.weight", T.ATTN_V),
    TensorRule(_BLOCK + r"self_attn\.o_proj\.weight", T.ATTN_OUT),
    TensorRule(_BLOCK + r"self_attn\.q_norm\.weight", T.ATTN_Q_NORM, transforms=("plus_one",)),
    TensorRule(_BLOCK + r"self_attn\.k_norm\.weight", T.ATTN_K_NORM, transforms=("plus_one",)),
    # Gated DeltaNet layers
    TensorRule(_BLOCK + r"linear_attn\.in_proj_qkv\.weight", T.ATTN_QKV, transforms=("tile_qkv_v_rows",)),
    TensorRule(_BLOCK + r"linear_attn\.in_proj_z\.weight", T.ATTN_GATE, transforms=("tile_v_rows",)),
    TensorRule(_BLOCK + r"linear_attn\.in_proj_b\.weight", T.SSM_BETA, transforms=("tile_v_head_rows",)),
    TensorRule(_BLOCK + r"linear_attn\.in_proj_a\.weight", T.SSM_ALPHA, transforms=("tile_v_head_rows",)),
    TensorRule(
        _BLOCK + r"linear_attn\.conv1d\.weight",
        T.SSM_CONV1D,
        transforms=("squeeze_conv", "tile_qkv_v_rows"),
        keep_f32=True,
    ),
    TensorRule(_BLOCK + r"linear_attn\.A_log", T.SSM_A, suffix="", transforms=("neg_exp", "tile_v_head_rows")),
    TensorRule(_BLOCK + r"linear_attn\.dt_bias", T.SSM_DT, suffix=".bias", transforms=("tile_v_head_rows",)),
    TensorRule(_BLOCK + r"linear_attn\.norm\.weight", T.SSM_NORM),  # gated norm: applied as w, no +1
    TensorRule(_BLOCK + r"linear_attn\.out_proj\.weight", T.SSM_OUT, transforms=("tile_v_cols",)),
    # feed-forward
    TensorRule(_BLOCK + r"mlp\.gate_proj\.weight", T.FFN_GATE),
    TensorRule(_BLOCK + r"mlp\.up_proj\.weight", T.FFN_UP),
    TensorRule(_BLOCK + r"mlp\.down_proj\.weight", T.FFN_DOWN),
)

# The MTP head, as llama.cpp's converter maps it: the head's own tensors go to the first MTP
# block; its decoder layer is a full-attention block with the trunk's names.
_MTP = r"(?:model\.)?mtp\."
_MTP_BLOCK = _MTP + r"layers\.(?P<bid>\d+)\."
_MTP_LAYER_TENSORS = {
    r"input_layernorm\.weight": (T.ATTN_NORM, ("plus_one",)),
    r"post_attention_layernorm\.weight": (T.ATTN_POST_NORM, ("plus_one",)),
    r"self_attn\.q_proj\.weight": (T.ATTN_Q, ()),
    r"self_attn\.k_proj\.weight": (T.ATTN_K, ()),
    r"self_attn\.v_proj\.weight": (T.ATTN_V, ()),
    r"self_attn\.o_proj\.weight": (T.ATTN_OUT, ()),
    r"self_attn\.q_norm\.weight": (T.ATTN_Q_NORM, ("plus_one",)),
    r"self_attn\.k_norm\.weight": (T.ATTN_K_NORM, ("plus_one",)),
    r"mlp\.gate_proj\.weight": (T.FFN_GATE, ()),
    r"mlp\.up_proj\.weight": (T.FFN_UP, ()),
    r"mlp\.down_proj\.weight": (T.FFN_DOWN, ()),
}
MTP_RULES: tuple[TensorRule, ...] = (
    TensorRule(_MTP + r"fc\.weight", T.NEXTN_EH_PROJ, mtp=True),
    TensorRule(_MTP + r"pre_fc_norm_embedding\.weight", T.NEXTN_ENORM, transforms=("plus_one",), mtp=True),
    TensorRule(_MTP + r"pre_fc_norm_hidden\.weight", T.NEXTN_HNORM, transforms=("plus_one",), mtp=True),
    TensorRule(_MTP + r"norm\.weight", T.NEXTN_SHARED_HEAD_NORM, transforms=("plus_one",), mtp=True),
    *(
        TensorRule(_MTP_BLOCK + pattern, target, transforms=transforms, mtp=True)
        for pattern, (target, transforms) in _MTP_LAYER_TENSORS.items()
    ),
)

# Tensors that are not part of the text GGUF: label -> HF name pattern.
DROPPED_PARTS: dict[str, str] = {
    "vision": r"model\.visual\.",
    "mtp": r"(?:model\.)?mtp\.",
}

_COMPILED = [(re.compile(rule.pattern + r"$"), rule) for rule in TENSOR_RULES + MTP_RULES]


@dataclass(frozen=True)
class MappedTensor:
    hf_name: str
    gguf_name: str
    rule: TensorRule
    bid: int | None


def map_tensor_name(hf_name: str, n_layers: int = 0) -> MappedTensor | None:
    """The GGUF tensor an HF tensor becomes, or None when no rule matches.

    MTP tensors land in block `n_layers` + their MTP layer index (the trunk's layer count)."""
    for regex, rule in _COMPILED:
        match = regex.match(hf_name)
        if match:
            bid = int(match["bid"]) if "bid" in regex.groupindex else None
            if rule.mtp:
                bid = n_layers + (bid or 0)
            return MappedTensor(hf_name, gguf_name(rule.target, bid), rule, bid)
    return None


def mtp_layer_count(hf_names: list[str]) -> int:
    """MTP decoder layers present among the checkpoint's tensor names (`mtp.layers.N.*`)."""
    found = [int(m["bid"]) for n in hf_names if (m := re.match(_MTP_BLOCK, n))]
    return max(found) + 1 if found else 0


def _rule_for(target: T) -> TensorRule:
    for rule in TENSOR_RULES + MTP_RULES:
        if rule.target == target:
            return rule
    raise KeyError(f"no tensor rule for {target.name}")


def gguf_name(target: T, bid: int | None = None) -> str:
    """The GGUF name of tensor `target` (of block `bid`): gguf-py's base name plus the table's suffix."""
    return gguf.TENSOR_NAMES[target].format(bid=bid) + _rule_for(target).suffix


def tensor_pattern(target: T) -> str:
    """A regular expression matching tensor `target` in every block (e.g. for llama.cpp's type overrides)."""
    base = re.escape(gguf.TENSOR_NAMES[target]).replace(re.escape("{bid}"), r"\d+")
    return base + re.escape(_rule_for(target).suffix) + "$"


def dropped_part(hf_name: str, dims: Qwen35Dims) -> str | None:
    """Why an HF tensor is left out of the GGUF ("vision", "mtp", "tied lm_head"), or None.

    MTP tensors are dropped only when `dims` has no MTP layers (`--no-mtp`)."""
    for label, pattern in DROPPED_PARTS.items():
        if re.match(pattern, hf_name) and not (label == "mtp" and dims.mtp_layers):
            return label
    if hf_name == "lm_head.weight" and dims.tied_embeddings:
        return "tied lm_head"
    return None


def expected_shapes(dims: Qwen35Dims) -> dict[str, tuple[int, ...]]:
    """Every GGUF tensor the text model needs, in file order, with its shape (rows first, as in numpy)."""
    d = dims
    h, ffn = d.hidden_size, d.intermediate_size
    key_dim = d.linear_k_heads * d.linear_k_head_dim
    value_dim = d.linear_v_heads * d.linear_v_head_dim
    planned: list[tuple[T, int | None, tuple[int, ...]]] = [(T.TOKEN_EMBD, None, (d.vocab_size, h))]

    def every_block(bid: int) -> list[tuple[T, int | None, tuple[int, ...]]]:
        return [
            (T.ATTN_NORM, bid, (h,)),
            (T.ATTN_POST_NORM, bid, (h,)),
            (T.FFN_GATE, bid, (ffn, h)),
            (T.FFN_UP, bid, (ffn, h)),
            (T.FFN_DOWN, bid, (h, ffn)),
        ]

    def full_attention(bid: int) -> list[tuple[T, int | None, tuple[int, ...]]]:
        return [
            (T.ATTN_Q, bid, (2 * d.n_heads * d.head_dim, h)),
            (T.ATTN_K, bid, (d.n_kv_heads * d.head_dim, h)),
            (T.ATTN_V, bid, (d.n_kv_heads * d.head_dim, h)),
            (T.ATTN_OUT, bid, (h, d.n_heads * d.head_dim)),
            (T.ATTN_Q_NORM, bid, (d.head_dim,)),
            (T.ATTN_K_NORM, bid, (d.head_dim,)),
        ]

    for bid, kind in enumerate(d.layer_kinds):
        planned += every_block(bid)
        if kind == "full":
            planned += full_attention(bid)
        else:
            planned += [
                (T.ATTN_QKV, bid, (2 * key_dim + value_dim, h)),
                (T.ATTN_GATE, bid, (value_dim, h)),
                (T.SSM_BETA, bid, (d.linear_v_heads, h)),
                (T.SSM_ALPHA, bid, (d.linear_v_heads, h)),
                (T.SSM_CONV1D, bid, (2 * key_dim + value_dim, d.conv_kernel)),
                (T.SSM_A, bid, (d.linear_v_heads,)),
                (T.SSM_DT, bid, (d.linear_v_heads,)),
                (T.SSM_NORM, bid, (d.linear_v_head_dim,)),
                (T.SSM_OUT, bid, (h, value_dim)),
            ]
    for bid in range(d.n_layers, d.n_blocks):  # the MTP head: a full-attention block plus its own tensors
        planned += every_block(bid) + full_attention(bid)
        if bid == d.n_layers:
            planned += [
                (T.NEXTN_EH_PROJ, bid, (h, 2 * h)),
                (T.NEXTN_ENORM, bid, (h,)),
                (T.NEXTN_HNORM, bid, (h,)),
                (T.NEXTN_SHARED_HEAD_NORM, bid, (h,)),
            ]
    planned.append((T.OUTPUT_NORM, None, (h,)))
    if not d.tied_embeddings:
        planned.append((T.OUTPUT, None, (d.vocab_size, h)))
    return {gguf_name(target, bid): shape for target, bid, shape in planned}


def add_model_metadata(writer: gguf.GGUFWriter, dims: Qwen35Dims) -> None:
    """The `qwen35.*` hyper-parameters llama.cpp's loader reads."""
    d = dims
    writer.add_context_length(d.context_length)
    writer.add_embedding_length(d.hidden_size)
    writer.add_block_count(d.n_blocks)
    writer.add_feed_forward_length(d.intermediate_size)
    writer.add_head_count(d.n_heads)
    writer.add_head_count_kv(d.n_kv_heads)
    writer.add_key_length(d.head_dim)
    writer.add_value_length(d.head_dim)
    writer.add_rope_freq_base(d.rope_theta)
    writer.add_layer_norm_rms_eps(d.rms_norm_eps)
    writer.add_rope_dimension_count(d.rope_dim)
    writer.add_rope_dimension_sections(list(d.rope_sections))
    writer.add_ssm_conv_kernel(d.conv_kernel)
    writer.add_ssm_state_size(d.linear_k_head_dim)
    writer.add_ssm_group_count(d.linear_k_heads)
    writer.add_ssm_time_step_rank(d.linear_v_heads)
    writer.add_ssm_inner_size(d.linear_v_head_dim * d.linear_v_heads)
    writer.add_full_attention_interval(d.full_attention_interval)
    # the per-layer pattern itself, so layer_types that do not follow the interval still load;
    # MTP blocks are attention blocks
    writer.add_array(
        f"{ARCH_NAME}.attention.recurrent_layers", [kind == "linear" for kind in d.layer_kinds] + [False] * d.mtp_layers
    )
    if d.mtp_layers:
        writer.add_nextn_predict_layers(d.mtp_layers)
