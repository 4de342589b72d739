"""The fixture GGUFs load in llama.cpp and generate (the other suites build on them)."""

from __future__ import annotations

from pathlib import Path

from llama_cpp import Llama


def _greedy(path: Path, prompt: str, n: int = 8) -> list[int]:
    llm = Llama(model_path=str(path), n_ctx=256, n_threads=2, n_batch=64, verbose=False)
    tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    out = []
    for token in llm.generate(tokens, temp=0.0, top_k=1):
        out.append(token)
        if len(out) == n:
            break
    return out


def test_tiny_gguf_loads_and_generates(tiny_gguf: Path, tiny_gguf_f32: Path) -> None:
    prompt = "<|im_start|>user\nList the tables.<|im_end|>\n<|im_start|>assistant\n"
    bf16 = _greedy(tiny_gguf, prompt)
    f32 = _greedy(tiny_gguf_f32, prompt)
    assert len(bf16) == 8 and all(0 <= t < 248320 for t in bf16)
    assert bf16[:2] == f32[:2]  # same model in two storage types: the first steps agree
