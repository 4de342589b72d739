"""Importance matrices: collected on the fixture, written and read in llama.cpp's two formats,
checked against the model, and handed to llama.cpp's quantizer."""

from __future__ import annotations

import ctypes
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import LlamaFileType

from edge_sql.cli import main
from edge_sql.convert.gguf_file import bf16_bits_to_f32, read_gguf
from edge_sql.convert.imatrix_file import Imatrix, ImatrixEntry, check_imatrix, read_imatrix, write_imatrix
from edge_sql.convert.quantize import quantize_gguf
from edge_sql.errors import ImatrixError

TEXT = (
    "SELECT c.FirstName, c.LastName, SUM(i.Total) AS spent FROM Customer c JOIN Invoice i "
    "ON i.CustomerId = c.CustomerId GROUP BY c.CustomerId ORDER BY spent DESC LIMIT 5;"
)
LAYER_INPUT = "blk.0.attn_qkv.weight"  # its input is the first block's attention norm of the embeddings


def _weights(model: Path, name: str) -> np.ndarray:
    """A float tensor of the GGUF `model` as float32 (rows first)."""
    entry = read_gguf(model, max_array=0).tensors[name]
    dtype = np.uint16 if entry.type.name == "BF16" else np.float32
    data = np.array(np.memmap(model, mode="r", offset=entry.offset, dtype=dtype, shape=entry.shape))
    return bf16_bits_to_f32(data) if dtype == np.uint16 else data


def _tensor_bytes(path: Path, name: str) -> bytes:
    entry = read_gguf(path, max_array=0).tensors[name]
    with open(path, "rb") as handle:
        handle.seek(entry.offset)
        return handle.read(entry.nbytes)


@pytest.fixture(scope="module")
def collected(tiny_gguf_bf16: Path) -> tuple[Imatrix, list[int]]:
    from edge_sql.runtime import Session
    from edge_sql.runtime.probes.imatrix import collect_imatrix

    with Session(tiny_gguf_bf16, n_ctx=256, n_threads=1) as session:
        tokens = session.tokenize(TEXT, special=False)
        imatrix, report = collect_imatrix(session, [tokens, tokens[:20]], datasets=["a query"])
    assert (report.sequences, report.tokens) == (2, len(tokens) + 20)
    assert report.graphs_stopped == 2  # one decode per sequence, each stopped before the output product
    return imatrix, tokens


def test_collected_sums_equal_a_numpy_recomputation_of_the_layer_input(collected, tiny_gguf_bf16: Path) -> None:
    """blk.0's attention projection reads RMSNorm(embedding rows) x attn_norm: recomputed from the
    GGUF's own weights for the same tokens, its squared inputs summed per column are the sums."""
    imatrix, tokens = collected
    info = read_gguf(tiny_gguf_bf16, max_array=0)
    eps = info.metadata["qwen35.attention.layer_norm_rms_epsilon"]
    rows = _weights(tiny_gguf_bf16, "token_embd.weight")[tokens + tokens[:20]].astype(np.float64)
    x = rows / np.sqrt((rows**2).mean(axis=1, keepdims=True) + eps) * _weights(tiny_gguf_bf16, "blk.0.attn_norm.weight")
    entry = imatrix.entries[LAYER_INPUT]
    assert entry.sums.shape == (1, 256)
    np.testing.assert_allclose(entry.sums[0], (x**2).sum(axis=0), rtol=1e-5)
    assert len(tokens) >= 16  # products of fewer rows are skipped, as llama.cpp does
    assert all(e.counts.tolist() == [len(tokens) + 20] for e in imatrix.entries.values())
    blocks = {
        name
        for name in info.tensors
        if name.startswith("blk.")
        and len(info.tensors[name].shape) == 2
        and not name.startswith(f"blk.{info.block_count - info.mtp_layers}.")
        and "conv1d" not in name
    }
    assert set(imatrix.entries) == blocks  # every block matrix, the MTP head (never run) none
    assert imatrix.model_file_type == LlamaFileType.MOSTLY_BF16
    assert "output.weight" not in imatrix.entries and "token_embd.weight" not in imatrix.entries


def test_products_of_one_input_get_its_squares_once_and_the_last_layer_sees_every_row(
    collected, tiny_gguf_bf16: Path
) -> None:
    """The gate and up projections read the same normed rows, so their sums are equal; the last
    block's feed-forward counts every token though the graph stopped before the output product."""
    imatrix, tokens = collected
    last = read_gguf(tiny_gguf_bf16, max_array=0)
    last_block = last.block_count - last.mtp_layers - 1
    for block in range(last_block + 1):
        gate, up = imatrix.entries[f"blk.{block}.ffn_gate.weight"], imatrix.entries[f"blk.{block}.ffn_up.weight"]
        np.testing.assert_array_equal(gate.sums, up.sums)
    down = imatrix.entries[f"blk.{last_block}.ffn_down.weight"]
    assert down.counts.tolist() == [len(tokens) + 20] and np.all(down.sums > 0)


def test_the_gguf_file_round_trips_in_llama_cpps_layout(collected, tmp_path: Path) -> None:
    import gguf

    imatrix, _ = collected
    path = tmp_path / "tiny.imatrix.gguf"
    write_imatrix(imatrix, path)
    back = read_imatrix(path)
    assert (back.datasets, back.chunk_size, back.model_file_type) == (["a query"], 2048, imatrix.model_file_type)
    for name, entry in imatrix.entries.items():
        np.testing.assert_array_equal(back.entries[name].sums, entry.sums.astype(np.float32))
        np.testing.assert_array_equal(back.entries[name].counts, entry.counts)
    reader = gguf.GGUFReader(path)  # gguf's own reader: the keys and tensors llama.cpp reads
    fields = reader.fields
    assert bytes(fields["general.type"].parts[-1]).decode() == "imatrix"
    assert "general.architecture" not in fields
    assert int(fields["imatrix.chunk_size"].parts[-1][0]) == 2048
    tensors = {t.name: t for t in reader.tensors}
    assert list(tensors[LAYER_INPUT + ".in_sum2"].shape) == [256, 1]  # ne0 = columns, ne1 = matrices
    assert list(tensors[LAYER_INPUT + ".counts"].shape) == [1, 1]


def _gguf_bytes(kv: list[tuple[str, int, bytes]], tensors: list[tuple[str, list[int], np.ndarray]]) -> bytes:
    """A GGUF v3 file packed by hand from its format description (keys: name, type, payload)."""

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text.encode())) + text.encode()

    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    head += b"".join(string(key) + struct.pack("<I", vtype) + payload for key, vtype, payload in kv)
    offset, data = 0, b""
    for name, dims, values in tensors:
        head += string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        head += struct.pack("<IQ", 0, offset)  # F32
        blob = values.astype("<f4").tobytes()
        blob += b"\0" * (-len(blob) % 32)
        data += blob
        offset += len(blob)
    return head + b"\0" * (-len(head) % 32) + data


def test_an_imatrix_gguf_as_llama_cpp_writes_it_loads(tmp_path: Path) -> None:
    strings = struct.pack("<IQ", 8, 1) + struct.pack("<Q", 8) + b"wiki.txt"  # array of 1 string
    kv = [
        ("general.type", 8, struct.pack("<Q", 7) + b"imatrix"),
        ("imatrix.datasets", 9, strings),
        ("imatrix.chunk_count", 4, struct.pack("<I", 3)),
        ("imatrix.chunk_size", 4, struct.pack("<I", 512)),
    ]
    sums = np.arange(8, dtype=np.float32).reshape(2, 4)  # two experts of four columns
    path = tmp_path / "llama.imatrix.gguf"
    path.write_bytes(
        _gguf_bytes(
            kv,
            [
                ("blk.0.ffn_up_exps.weight.in_sum2", [4, 2], sums),
                ("blk.0.ffn_up_exps.weight.counts", [1, 2], np.array([4.0, 0.0])),
            ],
        )
    )
    loaded = read_imatrix(path)
    assert (loaded.datasets, loaded.chunk_count, loaded.chunk_size) == (["wiki.txt"], 3, 512)
    values = loaded.normalized()["blk.0.ffn_up_exps.weight"]
    np.testing.assert_array_equal(values, [0.0, 0.25, 0.5, 0.75, 1, 1, 1, 1])  # an expert never used: ones


def _legacy_bytes(entries: list[tuple[str, int, list[float]]], trailer: bool = True) -> bytes:
    """llama.cpp's legacy .dat: count, then (name length, name, ncall, nval, values), then the
    chunk count and the dataset name."""
    out = struct.pack("<i", len(entries))
    for name, ncall, values in entries:
        out += struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", ncall, len(values))
        out += struct.pack(f"<{len(values)}f", *values)
    if trailer:
        out += struct.pack("<ii", 10, 8) + b"wiki.txt"
    return out


def test_a_legacy_dat_imatrix_loads(tmp_path: Path) -> None:
    path = tmp_path / "imatrix.dat"
    path.write_bytes(
        _legacy_bytes([("blk.0.attn_q.weight", 10, [5.0, 10.0, 20.0]), ("blk.1.ffn_down.weight", 0, [2.0])])
    )
    loaded = read_imatrix(path)
    assert loaded.legacy and loaded.datasets == ["wiki.txt"] and loaded.chunk_count == 10
    values = loaded.normalized()
    np.testing.assert_allclose(values["blk.0.attn_q.weight"], [0.5, 1.0, 2.0])  # value / ncall
    np.testing.assert_allclose(values["blk.1.ffn_down.weight"], [2.0])  # ncall 0: as stored
    path.write_bytes(_legacy_bytes([("blk.0.attn_q.weight", 1, [1.0])], trailer=False))
    assert read_imatrix(path).datasets == []


def test_truncated_and_foreign_files_are_refused_in_one_line(collected, tmp_path: Path, tiny_gguf_bf16: Path) -> None:
    imatrix, _ = collected
    whole = tmp_path / "whole.imatrix.gguf"
    write_imatrix(imatrix, whole)
    cut = tmp_path / "cut.imatrix.gguf"
    cut.write_bytes(whole.read_bytes()[:-100])
    with pytest.raises(ImatrixError, match="truncated"):
        read_imatrix(cut)
    legacy = tmp_path / "cut.dat"
    legacy.write_bytes(_legacy_bytes([("blk.0.attn_q.weight", 10, [5.0, 10.0, 20.0])])[:30])
    with pytest.raises(ImatrixError, match="truncated"):
        read_imatrix(legacy)
    with pytest.raises(ImatrixError, match="not an imatrix"):
        read_imatrix(tiny_gguf_bf16)
    text = tmp_path / "notes.txt"
    text.write_text("not an imatrix at all")
    with pytest.raises(ImatrixError, match="neither a GGUF nor a legacy"):
        read_imatrix(text)
    with pytest.raises(ImatrixError, match="not found"):
        read_imatrix(tmp_path / "missing.gguf")


def _one_entry(name: str, size: int, **info) -> Imatrix:
    return Imatrix({name: ImatrixEntry(np.ones((1, size)), np.array([4.0]))}, **info)


def test_an_imatrix_that_does_not_fit_the_model_is_refused(tiny_gguf_bf16: Path, tmp_path: Path) -> None:
    model = read_gguf(tiny_gguf_bf16, max_array=0)
    check_imatrix(_one_entry("blk.0.ffn_down.weight", 512), model)  # fits
    with pytest.raises(ImatrixError, match=r"has no weight blk.9.ffn_up.weight"):
        check_imatrix(_one_entry("blk.9.ffn_up.weight", 256), model)
    with pytest.raises(ImatrixError, match=r"blk.0.ffn_down.weight has 256 values, the model's weight needs 512"):
        check_imatrix(_one_entry("blk.0.ffn_down.weight", 256), model)
    quantized = tmp_path / "from-q4.imatrix.gguf"
    write_imatrix(_one_entry("blk.0.ffn_down.weight", 512, model_file_type=int(LlamaFileType.MOSTLY_Q4_K_M)), quantized)
    with pytest.raises(ImatrixError, match=r"collected on a quantized model \(Q4_K_M\)"):
        quantize_gguf(tiny_gguf_bf16, tmp_path / "out.gguf", "Q4_K_M", imatrix=quantized)
    assert not (tmp_path / "out.gguf").exists()


def test_collecting_on_a_quantized_model_is_refused(tiny_gguf_fast: Path) -> None:
    from edge_sql.runtime.probes.imatrix import unquantized_file_type

    with pytest.raises(ImatrixError, match="is quantized; collect the imatrix on its BF16/F16/F32 file"):
        unquantized_file_type(tiny_gguf_fast)


def _ggml_quantize(weights: np.ndarray, storage: int, importance: np.ndarray | None, nbytes: int) -> bytes:
    """ggml's own quantizer for one tensor, weighted by `importance` (per column)."""
    from llama_cpp._ggml import libggml

    libggml.ggml_quantize_chunk.argtypes = [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
    ]
    libggml.ggml_quantize_chunk.restype = ctypes.c_size_t
    weights = np.ascontiguousarray(weights, dtype=np.float32)
    out = np.zeros(nbytes, dtype=np.uint8)
    libggml.ggml_quantize_init(storage)
    libggml.ggml_quantize_chunk(
        storage,
        weights.ctypes.data,
        out.ctypes.data,
        0,
        weights.shape[0],
        weights.shape[1],
        None if importance is None else importance.ctypes.data,
    )
    return out.tobytes()


def test_the_quantizer_receives_the_matrix(collected, tiny_gguf_bf16: Path, tmp_path: Path) -> None:
    """With the matrix, a tensor's bytes differ from those made without it, and equal ggml's own
    quantization of the weights weighted by the matrix read back from the file (sum / count)."""
    imatrix, _ = collected
    path = tmp_path / "tiny.imatrix.gguf"
    write_imatrix(imatrix, path)
    plain = quantize_gguf(tiny_gguf_bf16, tmp_path / "plain.gguf", "Q4_K_M", n_threads=1)
    weighted = quantize_gguf(tiny_gguf_bf16, tmp_path / "weighted.gguf", "Q4_K_M", n_threads=1, imatrix=path)
    assert weighted.imatrix == path and "imatrix tiny.imatrix.gguf" in weighted.summary()
    entry = read_gguf(weighted.output, max_array=0).tensors[LAYER_INPUT]
    ours, theirs = _tensor_bytes(weighted.output, LAYER_INPUT), _tensor_bytes(plain.output, LAYER_INPUT)
    assert ours != theirs
    weights = _weights(tiny_gguf_bf16, LAYER_INPUT)
    importance = read_imatrix(path).normalized()[LAYER_INPUT]
    np.testing.assert_allclose(
        importance, imatrix.entries[LAYER_INPUT].sums[0] / imatrix.entries[LAYER_INPUT].counts[0], rtol=1e-6
    )
    assert ours == _ggml_quantize(weights, int(entry.type), importance, entry.nbytes)
    assert theirs == _ggml_quantize(weights, int(entry.type), None, entry.nbytes)
    header = read_gguf(weighted.output).metadata
    assert header["quantize.imatrix.file"] == str(path)
    assert header["quantize.imatrix.dataset"] == "a query"
    assert header["quantize.imatrix.entries_count"] == len(imatrix.entries)


def test_cli_collects_from_a_text_file_and_quantizes_with_it(tiny_gguf_bf16: Path, tmp_path: Path) -> None:
    text = tmp_path / "calibration.txt"
    text.write_text(TEXT * 4, encoding="utf-8")
    out = tmp_path / "cli.imatrix.gguf"
    runner = CliRunner()
    result = runner.invoke(
        main, ["imatrix", str(tiny_gguf_bf16), "--calibration", str(text), "-o", str(out), "--threads", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "31 weights" in result.output and "(calibration.txt)" in result.output
    assert read_imatrix(out).datasets == ["calibration.txt"]
    again = runner.invoke(main, ["imatrix", str(tiny_gguf_bf16), "--calibration", str(text), "-o", str(out)])
    assert again.exit_code == 1 and "already exists; use --force" in again.output
    quantized = tmp_path / "cli-IQ4_XS.gguf"
    result = runner.invoke(
        main,
        [
            "quantize",
            str(tiny_gguf_bf16),
            "-t",
            "iq4_xs",
            "--imatrix",
            str(out),
            "-o",
            str(quantized),
            "--threads",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert read_gguf(quantized).metadata["quantize.imatrix.file"] == str(out)
    bad = runner.invoke(
        main, ["quantize", str(tiny_gguf_bf16), "-t", "Q4_K_M", "--imatrix", str(text), "-o", str(tmp_path / "x.gguf")]
    )
    assert bad.exit_code == 1 and bad.output.count("\n") == 1 and "neither a GGUF nor a legacy" in bad.output


def test_pull_quantizes_k_quants_with_the_imatrix_it_is_handed_and_records_it(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from edge_sql.evaluation.task_imatrix import make_imatrix
    from edge_sql.store import ModelStore, pull_model

    text = tmp_path / "calibration.txt"
    text.write_text(TEXT * 2, encoding="utf-8")
    made: list[Path] = []

    def imatrix(bf16: Path) -> Path:
        made.append(make_imatrix(bf16, tmp_path / "pulled.imatrix.gguf", calibration=text, n_threads=1).output)
        return made[-1]

    store = ModelStore(tmp_path / "store")
    weighted = pull_model(str(tiny_checkpoint), quant="Q4_K_M", name="tiny", store=store, imatrix=imatrix).model
    assert made == [tmp_path / "pulled.imatrix.gguf"]
    assert weighted.imatrix == str(made[0])
    assert store.get("tiny", "Q4_K_M").imatrix == str(made[0])  # in the index, not only the returned entry
    assert store.get("tiny", "BF16").imatrix is None
    assert read_gguf(weighted.path).metadata["quantize.imatrix.file"] == str(made[0])
    plain = pull_model(str(tiny_checkpoint), quant="Q8_0", name="tiny", store=store, imatrix=imatrix).model
    assert plain.imatrix is None and len(made) == 1  # Q8_0 is not steered by an imatrix: none made


def test_pull_uses_the_task_imatrix_by_default_for_k_quants(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """`pull --quant Q4_K_M` collects the task imatrix on the BF16 file (kept beside it) and
    records it; `--no-imatrix` quantizes without one."""
    from edge_sql.evaluation.imatrix_text import task_calibration
    from edge_sql.store import ModelStore

    runner = CliRunner(env={"EDGE_SQL_HOME": str(tmp_path / "home")})
    result = runner.invoke(main, ["pull", str(tiny_checkpoint), "--quant", "Q4_K_M", "--name", "tiny"])
    assert result.exit_code == 0, result.output
    store = ModelStore(tmp_path / "home")
    bf16, weighted = store.get("tiny", "BF16"), store.get("tiny", "Q4_K_M")
    kept = Path(bf16.path).with_name(Path(bf16.path).stem + ".task.imatrix.gguf")
    assert weighted.imatrix == str(kept) and read_imatrix(kept).datasets == [task_calibration().name]
    plain = runner.invoke(main, ["pull", str(tiny_checkpoint), "--quant", "Q3_K_M", "--name", "tiny", "--no-imatrix"])
    assert plain.exit_code == 0, plain.output
    assert store.get("tiny", "Q3_K_M").imatrix is None


def test_bench_variant_names_with_imatrix(tmp_path: Path) -> None:
    from edge_sql.bench.variants import IMATRIX_VARIANTS, parse_variant_names
    from edge_sql.errors import BenchSetupError

    assert parse_variant_names("q4_k_m-imatrix,IQ4_XS-IMATRIX, Q3_K_M-imatrix,Q4_K_M") == [
        "BF16",
        *IMATRIX_VARIANTS,
        "Q4_K_M",
    ]
    with pytest.raises(BenchSetupError, match="Q8_0 is not steered by an importance matrix"):
        parse_variant_names("Q8_0-imatrix")


def test_the_bench_takes_a_store_file_only_when_its_imatrix_matches_the_name(
    collected, tiny_gguf_bf16: Path, tmp_path: Path
) -> None:
    from edge_sql.bench.variants import made_with_imatrix, prepare_variants

    imatrix, _ = collected
    matrix = tmp_path / "m.imatrix.gguf"
    write_imatrix(imatrix, matrix)
    stored = quantize_gguf(
        tiny_gguf_bf16, tmp_path / "stored-Q4_K_M.gguf", "Q4_K_M", n_threads=1, imatrix=matrix
    ).output
    variants = prepare_variants(
        tiny_gguf_bf16,
        ["BF16", "Q4_K_M-imatrix", "Q4_K_M"],
        cache_dir=tmp_path / "cache",
        from_store={"Q4_K_M": stored}.get,
        n_threads=1,
    )
    paths = {v.name: v.path for v in variants}
    assert paths["Q4_K_M-imatrix"] == stored  # the store's file was made with one
    assert paths["Q4_K_M"] == tmp_path / "cache" / "tiny-bf16-Q4_K_M.gguf"  # made here, without
    assert made_with_imatrix(stored) and not made_with_imatrix(paths["Q4_K_M"])


def test_the_task_calibration_is_agent_transcripts_with_real_tool_outputs() -> None:
    from edge_sql.agent.prompt import load_prompt
    from edge_sql.evaluation import load_bundled
    from edge_sql.evaluation.imatrix_text import QUESTIONS_PER_DATABASE, task_calibration
    from edge_sql.evaluation.sqale_published import load_episodes
    from edge_sql.tools import ReadOnlyDatabase, Toolbox

    prompt = load_prompt()
    calibration = task_calibration(prompt)
    episodes = load_episodes()
    assert len(calibration.transcripts) == len(episodes) + 2 * QUESTIONS_PER_DATABASE
    assert calibration.max_tokens == 2048 and "first 2,048 tokens" in calibration.name
    assert calibration.cut([list(range(3000)), [1, 2]]) == [list(range(2048)), [1, 2]]
    texts = ["".join(text for text, _ in pieces) for pieces in calibration.transcripts]
    chat = prompt.chat
    for text, pieces in zip(texts, calibration.transcripts):
        assert text.startswith(chat.open_turn("system") + prompt.system_text(max_rounds=6))
        # only the template's framing is parsed for special tokens, never data
        assert all(chat.turn_end not in piece for piece, special in pieces if not special)
    for ep, text in zip(episodes, texts):  # every published output, replayed
        assert ep["question"] in text
        for round_ in ep["rounds"]:
            assert round_["think"].strip() in text
            for call in round_["calls"]:
                assert (call["out"] or "") in text
    assert "\n".join(episodes[0]["tables"]) in texts[0]  # list_tables: the published table list
    forced = next(r for r in episodes[2]["rounds"] if r.get("forced"))
    assert texts[2].endswith(chat.think_end + chat.after_think + forced["calls"][0]["args"] + chat.turn_end)
    chinook = [q for q in load_bundled() if q.db_id == "chinook"]
    first = chinook[0]
    text = texts[len(episodes)]
    with ReadOnlyDatabase(first.db_path) as db:  # the tools' own answers for the first Chinook question
        tools = Toolbox(db)
        assert tools.call("run_query", {"sql": first.gold_sql}).output in text
        assert tools.call("describe_table", {"table_name": "Track"}).output in text
        assert tools.call("list_tables", {}).output in text
    assert text.endswith('{"tool": "submit_sql", "args": {"sql": ' + json.dumps(first.gold_sql) + "}}" + chat.turn_end)


def test_expert_inputs_are_summed_per_expert_as_llama_cpp_walks_them() -> None:
    """MUL_MAT_ID: token t's slot k reads input row k % n_x and adds to expert ids[t, k]."""
    from edge_sql.runtime.probes.imatrix import add_expert_rows

    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 1, 8)).astype(np.float32)  # 5 tokens, one shared input row, 8 columns
    ids = np.array([[0, 2], [2, 3], [0, 1], [3, 3], [1, 0]], dtype=np.int32)  # two experts per token
    sums, counts = np.zeros((4, 8)), np.zeros(4)
    add_expert_rows(sums, counts, x, ids)
    want_sums, want_counts = np.zeros((4, 8)), np.zeros(4)
    for token in range(5):
        for slot in range(2):
            want_sums[ids[token, slot]] += x[token, slot % 1].astype(np.float64) ** 2
            want_counts[ids[token, slot]] += 1
    np.testing.assert_allclose(sums, want_sums)
    np.testing.assert_array_equal(counts, want_counts)


def test_a_current_task_imatrix_beside_the_model_is_reused(collected, tiny_gguf_bf16: Path, tmp_path: Path) -> None:
    """`quantize --imatrix auto`, pull and the bench take the task imatrix kept beside the model
    when it is newer than the model and was made from today's calibration."""
    from dataclasses import replace

    from edge_sql.evaluation.imatrix_text import task_calibration
    from edge_sql.evaluation.task_imatrix import task_imatrix_for, task_imatrix_path

    imatrix, _ = collected
    kept = task_imatrix_path(tiny_gguf_bf16, tmp_path)
    assert kept == tmp_path / "tiny-bf16.task.imatrix.gguf"
    write_imatrix(replace(imatrix, datasets=[task_calibration().name]), kept)
    made = kept.stat().st_mtime_ns
    assert task_imatrix_for(tiny_gguf_bf16, folder=tmp_path) == kept
    assert kept.stat().st_mtime_ns == made  # not collected again
