"""Importing Ray (an optional extra) and connecting to a cluster or a local Ray runtime."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType

from edge_sql.errors import EdgeSqlError, RayUnavailableError

INSTALL_HINT = 'pip install "edge-sql[cluster]"  (or: pip install "ray>=2.60")'
LOCAL = "local"  # `--ray local`: start a Ray runtime on this machine
AUTO = "auto"  # `--ray` alone: the running cluster this machine belongs to (RAY_ADDRESS or `ray start`)


def require_ray() -> ModuleType:
    """The `ray` module, or an error that says how to install it."""
    try:
        import ray
    except ImportError:
        raise RayUnavailableError(f"--ray needs Ray, which is not installed; install it with: {INSTALL_HINT}") from None
    return ray


def connect(address: str, *, log: Callable[[str], None] = lambda _msg: None) -> ModuleType:
    """Join the cluster at `address` ("auto": the one this machine belongs to; "local": a new
    Ray runtime on this machine). A Ray already initialised in this process is used as it is."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    if address == LOCAL:
        ray.init(include_dashboard=False, logging_level="WARNING")
    else:
        try:
            ray.init(address=address, logging_level="WARNING")
        except ConnectionError as exc:
            raise EdgeSqlError(
                f"no Ray cluster at {address!r} ({exc}); start one with `ray start --head` on this machine "
                "(and `ray start --address HEAD_IP:6379` on the others), or use --ray local"
            ) from None
    resources = ray.cluster_resources()
    log(f"Ray: {len(ray.nodes())} node(s), {resources.get('CPU', 0):.0f} CPUs")
    return ray


def assigned_cpus(default: int = 1) -> int:
    """How many CPUs Ray gave the calling task or actor: its llama.cpp thread count."""
    import ray

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    return max(1, round(cpus)) if cpus else default


def largest_node_cpus() -> int:
    """The CPU count of the cluster's biggest live node (an actor cannot ask for more)."""
    import ray

    return max((int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")), default=1)


def error_text(exc: BaseException) -> str:
    """One line saying why a Ray task or actor failed: the last line of Ray's message, which is
    the original exception (`ModelFileError: ...`) or the system's reason (e.g. killed by OOM)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(exc).__name__
