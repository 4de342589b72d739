"""The store index: which GGUF files the store holds, recorded in `<root>/index.json`."""

from __future__ import annotations

import builtins
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from edge_sql.convert.atomic import write_atomic
from edge_sql.errors import EdgeSqlError, ModelFileError
from edge_sql.store.home import store_root

INDEX_VERSION = 1
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class StoredModel:
    """One GGUF file in the store: a model name and variant, and where it came from."""

    name: str
    variant: str
    path: Path
    size: int
    created: str
    repo: str | None = None
    revision: str | None = None
    source: str | None = None
    sha256: str | None = None
    mtp_layers: int | None = None  # MTP head layers in the file (drafting needs >= 1); None: unknown
    imatrix: str | None = None  # the importance matrix file it was quantized with (None: without)

    @property
    def ref(self) -> str:
        """The `name:variant` string that `run` and `resolve_model` accept."""
        return f"{self.name}:{self.variant}"

    @property
    def exists(self) -> bool:
        """Whether the recorded file is still on disk."""
        return self.path.is_file()

    def to_json(self) -> dict:
        """A JSON-ready dict (path as a string)."""
        data = asdict(self)
        data["path"] = str(self.path)
        return data


def safe_name(text: str) -> str:
    """`text` reduced to characters that are safe in a file name (used for store names)."""
    cleaned = _SAFE_NAME.sub("-", text).strip("-.")
    if not cleaned:
        raise EdgeSqlError(f"cannot make a model name from {text!r}; pass --name")
    return cleaned


def file_sha256(path: Path, chunk_size: int = 1 << 22) -> str:
    """The SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def gguf_mtp_layers(path: Path) -> int | None:
    """The MTP layers a GGUF file's header declares, or None when it is not a readable GGUF."""
    from edge_sql.convert.gguf_file import read_gguf  # numpy and gguf: only when a file is read

    try:
        return read_gguf(path, max_array=0).mtp_layers
    except ModelFileError:
        return None


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


class ModelStore:
    """The models folder and its index; every change rewrites the index atomically."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (Path(root) if root is not None else store_root()).expanduser().resolve()

    @property
    def models_dir(self) -> Path:
        return self.root / "models"

    @property
    def index_path(self) -> Path:
        return self.root / "index.json"

    def model_path(self, name: str, variant: str, *, basename: str | None = None) -> Path:
        """Where the store keeps `name`'s `variant`: `models/<name>/<basename>-<variant>.gguf`."""
        return self.models_dir / safe_name(name) / f"{safe_name(basename or name)}-{safe_name(variant)}.gguf"

    # reading -----------------------------------------------------------------------------
    def list(self) -> builtins.list[StoredModel]:
        """Every recorded model, sorted by name then variant."""
        return sorted(self._read(), key=lambda m: (m.name.casefold(), m.variant.casefold()))

    def get(self, name: str, variant: str) -> StoredModel | None:
        """The entry for `name` and `variant` (both case-insensitive), if recorded."""
        return next(
            (
                m
                for m in self._read()
                if m.name.casefold() == name.casefold() and m.variant.casefold() == variant.casefold()
            ),
            None,
        )

    def variants(self, name: str) -> builtins.list[StoredModel]:
        """Every recorded variant of `name`."""
        return [m for m in self.list() if m.name.casefold() == name.casefold()]

    def find_by_repo(self, repo: str) -> builtins.list[StoredModel]:
        """Every recorded entry downloaded from repository `repo`."""
        return [m for m in self.list() if m.repo is not None and m.repo.casefold() == repo.casefold()]

    # writing -----------------------------------------------------------------------------
    def add(
        self,
        name: str,
        variant: str,
        path: Path,
        *,
        repo: str | None = None,
        revision: str | None = None,
        source: str | None = None,
        checksum: bool = True,
        imatrix: Path | None = None,
    ) -> StoredModel:
        """Records the GGUF file at `path` as `name:variant`, replacing an older entry of that pair."""
        path = Path(path).resolve()
        if not path.is_file():
            raise EdgeSqlError(f"cannot record {path}: no such file")
        entry = StoredModel(
            name=name,
            variant=variant,
            path=path,
            size=path.stat().st_size,
            created=_now(),
            repo=repo,
            revision=revision,
            source=source,
            sha256=file_sha256(path) if checksum else None,
            mtp_layers=gguf_mtp_layers(path),
            imatrix=str(Path(imatrix).resolve()) if imatrix is not None else None,
        )
        others = [
            m
            for m in self._read()
            if (m.name.casefold(), m.variant.casefold()) != (name.casefold(), variant.casefold())
        ]
        self._write([*others, entry])
        return entry

    def remove(self, name: str, variant: str, *, delete_file: bool = True) -> StoredModel:
        """Forgets `name:variant` and (by default) deletes its file when it lies inside the store."""
        entry = self.get(name, variant)
        if entry is None:
            raise EdgeSqlError(f"{name}:{variant} is not in the store at {self.root}")
        self._write([m for m in self._read() if m != entry])
        if delete_file and entry.path.is_relative_to(self.root):
            entry.path.unlink(missing_ok=True)
        return entry

    # the index file ----------------------------------------------------------------------
    def _read(self) -> builtins.list[StoredModel]:
        if not self.index_path.is_file():
            return []
        try:
            data = json.loads(self.index_path.read_text(encoding="utf-8"))
            records = data["models"]
        except (ValueError, KeyError, TypeError) as exc:
            raise EdgeSqlError(
                f"the store index {self.index_path} is damaged ({exc}); move it away and pull again"
            ) from exc
        return [self._from_record(r) for r in records]

    def _from_record(self, record: dict) -> StoredModel:
        fields = dict(record)
        path = Path(fields.pop("file"))
        fields["path"] = path if path.is_absolute() else self.root / path
        return StoredModel(**fields)

    def _to_record(self, entry: StoredModel) -> dict:
        record = entry.to_json()
        path = record.pop("path")
        inside = entry.path.is_relative_to(self.root)
        return {"file": entry.path.relative_to(self.root).as_posix() if inside else path, **record}

    def _write(self, entries: builtins.list[StoredModel]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        data = {"version": INDEX_VERSION, "models": [self._to_record(m) for m in entries]}
        write_atomic(self.index_path, (json.dumps(data, indent=2) + "\n").encode("utf-8"), durable=True)
