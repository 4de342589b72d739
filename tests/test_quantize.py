"""Every quantization type and recipe makes a GGUF that loads, generates, and stays close to BF16."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edge_sql.cli import main
from edge_sql.convert.gguf_file import read_gguf
from edge_sql.convert.quantize import QUANT_TYPES, RECIPES, SENSITIVE_PATTERNS, QuantizeReport, quantize_gguf
from edge_sql.errors import ConversionError

PROMPT = "<|im_start|>user\nHow many customers live in Berlin?<|im_end|>\n<|im_start|>assistant\n<think>\n"

# storage type of the bulk of the 2-D block weights for each plain type (K-quant mixes use
# a higher type for some tensors, e.g. Q6_K for half the ffn_down in Q4_K_M)
MAIN_STORAGE = {
    "Q8_0": "Q8_0",
    "Q6_K": "Q6_K",
    "Q5_K_M": "Q5_K",
    "Q4_K_M": "Q4_K",
    "Q4_0": "Q4_0",
    "IQ4_XS": "IQ4_XS",
    "Q3_K_M": "Q3_K",
    "F16": "F16",
    "BF16": "BF16",
}
# relative RMS error of the logits against the BF16 GGUF's, per type (measured well below)
# Relative RMS error of the next-token logits against the BF16 GGUF's, per base type. Measured
# on the fixture: BF16 0, F16 0.015, Q8_0 0.036, Q6_K 0.14, Q5_K_M 0.19, IQ4_XS 0.41, Q4_0 0.45,
# Q4_K_M 0.50, Q3_K_M 0.56 (a random-weight model is far more sensitive than a trained one).
MAX_RELATIVE_ERROR = {"BF16": 1e-6, "F16": 0.05, "Q8_0": 0.1, "Q6_K": 0.3, "Q5_K_M": 0.4}
DEFAULT_MAX_RELATIVE_ERROR = 0.9


def _logits_and_greedy(path: Path, n_new: int = 4) -> tuple[np.ndarray, list[int]]:
    """Next-token logits after PROMPT, and a few greedy tokens, through edge-sql's runtime session
    (which keeps quantized weights out of llama.cpp's AMX buffers on builds where they crash)."""
    from edge_sql.runtime import SamplingParams, Session

    with Session(path, n_ctx=128, n_batch=128) as session:
        session.eval(session.tokenize(PROMPT))
        logits = session.logits()
        completion = session.generate(params=SamplingParams(greedy=True), max_tokens=n_new)
    return logits, list(completion.tokens)


@dataclass
class Quantized:
    path: Path
    report: QuantizeReport
    error: float  # relative RMS logit error against BF16
    generated: list[int]


@pytest.fixture(scope="module")
def quantized(tiny_gguf_bf16: Path, tmp_path_factory) -> Callable[[str], Quantized]:
    """Quantize the fixture once per type for the whole module (quantizing is the slow part)."""
    folder = tmp_path_factory.mktemp("quantized")
    bf16_logits = _logits_and_greedy(tiny_gguf_bf16)[0]
    done: dict[str, Quantized] = {}

    def get(qtype: str) -> Quantized:
        if qtype not in done:
            out = folder / f"tiny-{qtype}.gguf"
            report = quantize_gguf(tiny_gguf_bf16, out, qtype, n_threads=2)
            logits, generated = _logits_and_greedy(out)
            error = float(np.sqrt(np.mean((logits - bf16_logits) ** 2)) / np.sqrt(np.mean(bf16_logits**2)))
            print(f"{qtype}: {report.file_size / 1e6:.1f} MB, {report.seconds:.1f} s, relative logit error {error:.4f}")
            done[qtype] = Quantized(out, report, error, generated)
        return done[qtype]

    return get


def _is_sensitive(name: str) -> bool:
    return any(re.search(pattern, name) for pattern in SENSITIVE_PATTERNS)


@pytest.mark.parametrize("qtype", [*QUANT_TYPES, *RECIPES])
def test_quantized_file_loads_and_generates(qtype: str, quantized) -> None:
    q = quantized(qtype)
    assert q.report.file_size == q.path.stat().st_size > 0
    types = read_gguf(q.path).tensor_types()
    assert q.report.tensor_types == dict(Counter(types.values()))
    assert len(types) == 70  # 55 in the trunk, 15 in the MTP head (blk.4)
    recipe = RECIPES.get(qtype)
    base = recipe.base if recipe else qtype
    assert types["blk.0.ffn_gate.weight"] == MAIN_STORAGE[base]
    assert types["blk.0.attn_norm.weight"] == "F32"  # norms are never quantized
    assert types["blk.0.ssm_conv1d.weight"] == "F32"
    if recipe:
        sensitive = {name: storage for name, storage in types.items() if _is_sensitive(name)}
        assert len(sensitive) == 9  # ssm_out, attn_qkv, attn_gate in each of the 3 linear-attention layers
        assert set(sensitive.values()) == {"Q8_0"}
    mtp = {name: storage for name, storage in types.items() if name.startswith("blk.4.") and storage != "F32"}
    assert len(mtp) == 8  # eh_proj, attn_q/k/v/output, ffn_gate/up/down; its norms stay F32
    if recipe:
        assert set(mtp.values()) == {"Q8_0"}  # recipes keep the MTP head at Q8_0
    else:
        assert mtp["blk.4.ffn_gate.weight"] == MAIN_STORAGE[base]  # plain types: like any block
    assert len(q.generated) == 4 and all(0 <= t < 248320 for t in q.generated)
    assert q.error < MAX_RELATIVE_ERROR.get(base, DEFAULT_MAX_RELATIVE_ERROR)


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_recipe_beats_its_base_type(recipe: str, quantized) -> None:
    """Keeping the sensitive tensors at Q8_0 moves the logits closer to BF16 than plain base."""
    with_recipe, plain = quantized(recipe), quantized(RECIPES[recipe].base)
    assert with_recipe.error < plain.error
    assert with_recipe.report.file_size > plain.report.file_size
    plain_types = read_gguf(plain.path).tensor_types()
    assert {plain_types[n] for n in plain_types if _is_sensitive(n)} != {"Q8_0"}


def test_bad_inputs(tiny_gguf_bf16: Path, tmp_path: Path) -> None:
    not_gguf = tmp_path / "notes.txt"
    not_gguf.write_text("hello")
    out = tmp_path / "out.gguf"
    with pytest.raises(ConversionError, match="not a GGUF file"):
        quantize_gguf(not_gguf, out, "Q8_0")
    with pytest.raises(ConversionError, match="unknown quantization type 'Q9_9'"):
        quantize_gguf(tiny_gguf_bf16, out, "Q9_9")
    out.write_bytes(b"keep")
    with pytest.raises(ConversionError, match="already exists; use --force"):
        quantize_gguf(tiny_gguf_bf16, out, "Q8_0")
    assert out.read_bytes() == b"keep"
    quantize_gguf(tiny_gguf_bf16, out, "Q8_0", force=True)
    with pytest.raises(ConversionError, match=r"already quantized \(Q8_0\)"):
        quantize_gguf(out, tmp_path / "again.gguf", "Q4_K_M")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "out.gguf"]


def test_cli(tiny_gguf_bf16: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    help_text = runner.invoke(main, ["quantize", "--help"]).output
    for name in [*QUANT_TYPES, *RECIPES]:
        assert name in help_text
    out = tmp_path / "q.gguf"
    result = runner.invoke(main, ["quantize", str(tiny_gguf_bf16), "--type", "q8_0", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "Q8_0" in result.output and out.is_file()
    result = runner.invoke(main, ["quantize", str(tiny_gguf_bf16), "--type", "Q8_0", "-o", str(out)])
    assert result.exit_code == 1 and "--force" in result.output
