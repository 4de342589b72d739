"""Bad input gives one clear ConversionError and leaves no output (or temporary) file behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from edge_sql.cli import main
from edge_sql.convert.hf_to_gguf import convert_checkpoint
from edge_sql.errors import ConversionError

INDEX = "model.safetensors.index.json"


def _linked_copy(src: Path, dst: Path, *, skip: tuple[str, ...] = ()) -> Path:
    """A checkpoint folder whose files are symlinks to `src`'s (cheap), minus `skip`."""
    dst.mkdir()
    for item in src.iterdir():
        if item.name not in skip and not item.name.startswith("."):
            os.symlink(item, dst / item.name)
    return dst


def _replace(folder: Path, name: str, text: str) -> None:
    (folder / name).unlink()
    (folder / name).write_text(text)


def _shard_of(folder: Path, tensor: str) -> str:
    return json.loads((folder / INDEX).read_text())["weight_map"][tensor]


def _convert_fails(src: Path, out_dir: Path, match: str, **kwargs) -> None:
    out_dir.mkdir(exist_ok=True)
    with pytest.raises(ConversionError, match=match) as info:
        convert_checkpoint(src, out_dir / "out.gguf", show_progress=False, **kwargs)
    assert "\n" not in str(info.value)
    assert list(out_dir.iterdir()) == [], "a failed conversion left files behind"


def test_missing_config(tiny_checkpoint: Path, tmp_path: Path) -> None:
    src = _linked_copy(tiny_checkpoint, tmp_path / "ckpt", skip=("config.json",))
    _convert_fails(src, tmp_path / "out", match=r"no config\.json")


def test_not_a_folder(tmp_path: Path) -> None:
    _convert_fails(tmp_path / "nowhere", tmp_path / "out", match="not a folder")


def test_unsupported_architecture(tiny_checkpoint: Path, tmp_path: Path) -> None:
    src = _linked_copy(tiny_checkpoint, tmp_path / "ckpt")
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    config["architectures"] = ["LlamaForCausalLM"]
    _replace(src, "config.json", json.dumps(config))
    _convert_fails(src, tmp_path / "out", match="unsupported architecture LlamaForCausalLM")


def test_unmappable_variant_is_named(tiny_checkpoint: Path, tmp_path: Path) -> None:
    src = _linked_copy(tiny_checkpoint, tmp_path / "ckpt")
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    config["text_config"]["linear_value_head_dim"] = 128
    _replace(src, "config.json", json.dumps(config))
    _convert_fails(src, tmp_path / "out", match="key head dim 64 != value head dim 128")


def test_unknown_tensor_is_named(tiny_checkpoint_sharded: Path, tmp_path: Path) -> None:
    src = _linked_copy(tiny_checkpoint_sharded, tmp_path / "ckpt")
    extra = "model.language_model.layers.0.linear_attn.extra_proj.weight"
    save_file({extra: torch.zeros(4, 256, dtype=torch.bfloat16)}, str(src / "extra.safetensors"))
    index = json.loads((tiny_checkpoint_sharded / INDEX).read_text())
    index["weight_map"][extra] = "extra.safetensors"
    _replace(src, INDEX, json.dumps(index))
    _convert_fails(src, tmp_path / "out", match=f"cannot map tensor {extra}")


def test_missing_shard(tiny_checkpoint_sharded: Path, tmp_path: Path) -> None:
    shard = "model-00002-of-00003.safetensors"
    src = _linked_copy(tiny_checkpoint_sharded, tmp_path / "ckpt", skip=(shard,))
    _convert_fails(src, tmp_path / "out", match=f"shard {shard} .* is missing")


def test_truncated_shard(tiny_checkpoint_sharded: Path, tmp_path: Path) -> None:
    shard = "model-00003-of-00003.safetensors"
    src = _linked_copy(tiny_checkpoint_sharded, tmp_path / "ckpt", skip=(shard,))
    data = (tiny_checkpoint_sharded / shard).read_bytes()
    (src / shard).write_bytes(data[: len(data) - 1000])
    _convert_fails(src, tmp_path / "out", match=f"{shard} is truncated")


def test_failure_while_writing_leaves_nothing(tiny_checkpoint_sharded: Path, tmp_path: Path) -> None:
    """A value F16 cannot hold, in a late tensor: the error comes mid-write; the part file goes."""
    late = "model.language_model.layers.3.mlp.down_proj.weight"
    shard = _shard_of(tiny_checkpoint_sharded, late)
    src = _linked_copy(tiny_checkpoint_sharded, tmp_path / "ckpt", skip=(shard,))
    tensors = load_file(str(tiny_checkpoint_sharded / shard))
    tensors[late] = tensors[late].clone()
    tensors[late][0, 0] = 1e6
    save_file(tensors, str(src / shard), metadata={"format": "pt"})
    _convert_fails(src, tmp_path / "out", match="beyond F16's range", outtype="f16")


def test_existing_output_needs_force(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "model.gguf"
    out.write_bytes(b"precious")
    with pytest.raises(ConversionError, match="already exists; use --force"):
        convert_checkpoint(tiny_checkpoint, out, show_progress=False)
    assert out.read_bytes() == b"precious"
    convert_checkpoint(tiny_checkpoint, out, show_progress=False, force=True)
    assert out.read_bytes()[:4] == b"GGUF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


def test_cli_reports_errors_in_one_line(tiny_checkpoint: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "x.gguf"
    result = runner.invoke(main, ["convert", str(tmp_path / "missing"), "-o", str(out)])
    assert result.exit_code == 1
    assert "neither a checkpoint folder nor a Hugging Face repository id" in result.output
    src = _linked_copy(tiny_checkpoint, tmp_path / "ckpt", skip=("config.json",))
    result = runner.invoke(main, ["convert", str(src), "-o", str(out)])
    assert result.exit_code == 1 and "config.json" in result.output
    assert not out.exists()


def test_cli_converts_and_refuses_to_overwrite(tiny_checkpoint: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "tiny.gguf"
    args = ["convert", str(tiny_checkpoint), "-o", str(out), "--outtype", "f16", "--no-progress"]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "MTP head: kept (1 layer); dropped tensors: 21 vision" in result.output
    assert runner.invoke(main, args).exit_code == 1
    no_mtp = runner.invoke(main, [*args, "--force", "--no-mtp"])
    assert no_mtp.exit_code == 0 and "MTP head: none; dropped tensors: 21 vision, 15 mtp" in no_mtp.output
    assert runner.invoke(main, [*args, "--force"]).exit_code == 0
