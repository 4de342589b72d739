"""The calibration cache: one file per (CPU, llama.cpp build, model file) under the store's `tuning/`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from edge_sql.convert.atomic import write_atomic
from edge_sql.runtime.state.identity import cpu_model, file_fingerprint, llama_build
from edge_sql.runtime.tuning.result import CACHE_VERSION, Calibration


def cache_key(model_path: str | Path) -> str:
    """What a calibration is valid for: this CPU, this llama.cpp build, this exact file (every
    thread count: a caller's fixed count is one of the candidates, not another calibration)."""
    text = json.dumps([cpu_model(), llama_build(), file_fingerprint(model_path), CACHE_VERSION])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def tuning_dir() -> Path:
    from edge_sql.store.home import store_root

    return store_root() / "tuning"


def cached_calibration(model_path: str | Path, folder: Path | None = None) -> Calibration | None:
    """The cached calibration for this file on this machine and build, or None."""
    path = (folder or tuning_dir()) / f"{cache_key(model_path)}.json"
    try:
        return Calibration.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_calibration(calibration: Calibration, folder: Path | None = None) -> Path:
    """Write the calibration (atomically: a partial file is never read, and two processes
    writing at once never share a temporary name) and drop older ones for the same file path."""
    folder = folder or tuning_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        try:
            if json.loads(old.read_text(encoding="utf-8")).get("model_path") == calibration.model_path:
                old.unlink()
        except (OSError, ValueError):
            continue
    path = folder / f"{calibration.key}.json"
    write_atomic(path, json.dumps(calibration.to_json(), indent=1).encode("utf-8"))
    return path
