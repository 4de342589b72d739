"""The tokenizer part of a GGUF: byte-level BPE tokens, types, merges, special ids, chat template.

Read from the checkpoint's `tokenizer.json`, `tokenizer_config.json` and, where transformers
stores it separately, `chat_template.jinja`. The token list is padded to the model's
vocabulary size with unused `[PAD<id>]` entries, as the real checkpoint's embedding is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import gguf

from edge_sql.convert.checkpoint import read_json
from edge_sql.errors import ConversionError

PRE_TOKENIZER = "qwen35"  # llama.cpp's name for Qwen3.5's pre-tokenizer regex
_LOOKS_CONTROL = re.compile(r"^<\|.*\|>$")  # <|im_start|>, <|fim_prefix|>, ...


@dataclass(frozen=True)
class TokenizerData:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    special_ids: dict[str, int]  # "eos", "pad", "bos" -> id (only those the checkpoint names)
    add_bos: bool
    chat_template: str | None


def read_tokenizer(folder: Path, vocab_size: int) -> TokenizerData:
    """Collect the tokenizer metadata from a checkpoint folder."""
    doc = read_json(folder / "tokenizer.json", what="the tokenizer")
    model = doc.get("model") or {}
    if model.get("type") != "BPE":
        raise ConversionError(f"tokenizer.json has a {model.get('type')} model; Qwen3.5 uses byte-level BPE")
    vocab: dict[str, int] = dict(model.get("vocab") or {})
    added = {t["content"]: t for t in doc.get("added_tokens", [])}
    for text, info in added.items():
        vocab[text] = int(info["id"])
    n_ids = max(vocab.values()) + 1
    if n_ids > vocab_size:
        raise ConversionError(f"the tokenizer has {n_ids} ids but the model's vocabulary is {vocab_size}")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [gguf.TokenType.UNUSED] * vocab_size
    for text, idx in vocab.items():
        tokens[idx] = text
        types[idx] = _token_type(text, added.get(text))
    config_path = folder / "tokenizer_config.json"
    config = read_json(config_path, what="the tokenizer config") if config_path.is_file() else {}
    return TokenizerData(
        tokens=tokens,
        token_types=[int(t) for t in types],
        merges=[_merge_text(m) for m in model.get("merges") or []],
        special_ids=_special_ids(config, vocab),
        add_bos=bool(config.get("add_bos_token", False)),
        chat_template=_chat_template(folder, config),
    )


def _token_type(text: str, added: dict | None) -> gguf.TokenType:
    if added is None:
        return gguf.TokenType.NORMAL
    if added.get("special") or _LOOKS_CONTROL.match(text):
        return gguf.TokenType.CONTROL
    return gguf.TokenType.USER_DEFINED


def _merge_text(merge: str | list[str]) -> str:
    """tokenizers writes merges as "a b" (older) or ["a", "b"] (newer); GGUF wants "a b"."""
    return merge if isinstance(merge, str) else " ".join(merge)


def _special_ids(config: dict, vocab: dict[str, int]) -> dict[str, int]:
    ids = {}
    for role in ("bos", "eos", "pad", "unk"):
        value = config.get(f"{role}_token")
        if isinstance(value, dict):  # older files store AddedToken dicts
            value = value.get("content")
        if value is None:
            continue
        if value not in vocab:
            raise ConversionError(f"tokenizer_config.json names {role}_token {value!r}, which is not in the vocabulary")
        ids[role] = vocab[value]
    return ids


def _chat_template(folder: Path, config: dict) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: keep the default one
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default")
    return template


def add_tokenizer_metadata(writer: gguf.GGUFWriter, data: TokenizerData) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(PRE_TOKENIZER)
    writer.add_token_list(data.tokens)
    writer.add_token_types(data.token_types)
    writer.add_token_merges(data.merges)
    adders = {
        "bos": writer.add_bos_token_id,
        "eos": writer.add_eos_token_id,
        "pad": writer.add_pad_token_id,
        "unk": writer.add_unk_token_id,
    }
    for role, idx in data.special_ids.items():
        adders[role](idx)
    writer.add_add_bos_token(data.add_bos)
    writer.add_add_eos_token(False)
    if data.chat_template:
        writer.add_chat_template(data.chat_template)
