"""Getting a file of the driver's machine onto a Ray node: model variants and databases.

On one machine, or on a cluster sharing a folder, the driver's path is already there and is
used as it is. Otherwise the file is streamed from a `FileServer` actor pinned to the driver's
node, in chunks through Ray's object store, and kept on the node:

- a model variant goes into the node's model store (`$EDGE_SQL_HOME` or the user data folder,
  as `models/<name>/<name>-<variant>.gguf`) and is recorded in its index, so the next bench on
  that node, or `edge-sql run NAME:VARIANT` there, finds it without copying again;
- any other file (a database) goes into `<store>/cluster-files/`.

A kept copy is reused when its size and the source's modification time match. Copies are
written under a lock through `convert/atomic.py` (a temporary file renamed into place, removed
if the copy fails), so two workers on one node copy once and none reads half a file.
"""

from __future__ import annotations

import fcntl
import hashlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_sql.convert.atomic import atomic_output

CHUNK_BYTES = 64 << 20


@dataclass(frozen=True)
class SourceFile:
    """A file on the driver's machine, as a node needs to know it to find or fetch a copy."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path | str) -> SourceFile:
        stat = Path(path).stat()
        return cls(str(path), stat.st_size, stat.st_mtime_ns)

    @property
    def revision(self) -> str:
        return f"{self.size}-{self.mtime_ns}"

    def present_here(self) -> bool:
        """Whether this node sees the very file (same machine or a shared folder)."""
        try:
            stat = Path(self.path).stat()
        except OSError:
            return False
        return stat.st_size == self.size and stat.st_mtime_ns == self.mtime_ns


def file_server_class() -> Any:  # Any: ray
    """The `FileServer` actor class (made on first use, so importing this module needs no Ray)."""
    import ray

    @ray.remote(num_cpus=0)
    class FileServer:
        """Serves chunks of the files it was given, and only those, from the driver's node."""

        def __init__(self, paths: list[str]) -> None:
            self.paths = {str(Path(p).resolve()) for p in paths}

        def read(self, path: str, offset: int, length: int) -> bytes:
            if str(Path(path).resolve()) not in self.paths:
                raise PermissionError(f"{path} is not served by this bench")
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(length)

    return FileServer


def start_file_server(paths: list[str]) -> tuple[Any, str]:  # Any: ray
    """A `FileServer` on the driver's node serving `paths`, and its actor name. Workers find it
    by name (`server_named`) only when they must copy: passing the handle itself as an actor's
    constructor argument would tie the actor's restarts to that argument's lifetime."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    name = f"edge-sql-files-{uuid.uuid4().hex[:12]}"
    here = ray.get_runtime_context().get_node_id()
    handle = (
        file_server_class()
        .options(name=name, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False))
        .remote(paths)
    )
    return handle, name


def server_named(name: str) -> Any:  # Any: ray
    import ray

    return ray.get_actor(name)


def copy_from_server(source: SourceFile, server: str, target: Path) -> Path:
    """Stream `source` from the file server named `server` into `target` (atomically, under a
    lock)."""
    import ray

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and target.stat().st_size == source.size:
            return target  # another worker on this node copied it meanwhile
        handle = server_named(server)
        with atomic_output(target) as part:
            with open(part, "wb") as out:
                for offset in range(0, source.size, CHUNK_BYTES):
                    out.write(ray.get(handle.read.remote(source.path, offset, CHUNK_BYTES)))
            if part.stat().st_size != source.size:
                raise OSError(f"copy of {source.path} is {part.stat().st_size} bytes, expected {source.size}")
    return target


def local_model(
    source: SourceFile, server: str, *, store_name: str, variant: str, store_root: Path | None = None
) -> tuple[Path, bool]:
    """The variant's file on this node, copied into its model store when missing.
    Returns the path and whether it was copied now."""
    from edge_sql.store.index import ModelStore

    if source.present_here():
        return Path(source.path), False
    store = ModelStore(store_root)
    entry = store.get(store_name, variant)
    if entry is not None and entry.exists and entry.size == source.size and entry.revision == source.revision:
        return entry.path, False
    target = copy_from_server(source, server, store.model_path(store_name, variant))
    store.add(
        store_name,
        variant,
        target,
        revision=source.revision,
        checksum=False,
        source=f"copied by edge-sql bench --ray from {source.path}",
    )
    return target, True


def cluster_files_dir(key: str, store_root: Path | None = None) -> Path:
    """`<store>/cluster-files/<digest of key>`: where this node keeps copies of driver files."""
    from edge_sql.store.home import store_root as default_root

    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(store_root or default_root()) / "cluster-files" / digest


def local_file(source: SourceFile, server: str, *, target: Path | None = None, store_root: Path | None = None) -> Path:
    """Any other file (a database) on this node: the driver's path, or a kept copy (at `target`,
    default `<store>/cluster-files/<digest>/<name>`)."""
    if source.present_here():
        return Path(source.path)
    target = target or cluster_files_dir(f"{source.path}\0{source.revision}", store_root) / Path(source.path).name
    if target.is_file() and target.stat().st_size == source.size:
        return target
    return copy_from_server(source, server, target)
