"""Names a package exports but imports only on first use (PEP 562): one `__getattr__` for every
package that does so (the package itself, agent, api, checks, runtime, store).

Why: `edge-sql --help`, `config` and a verified answer must start without llama.cpp, the
episode loop or the Agent, yet `from edge_sql.agent import Budget` and `edge_sql.Agent` must
work as plain imports. A leaf module: it imports nothing from edge_sql (the names are strings).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:  # Any: lazy
    """The `__getattr__` of `package`: `exports[name]` is the module that defines `name`, imported
    on first use and kept in the package's namespace, so later lookups cost nothing."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:  # Any: lazy
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
