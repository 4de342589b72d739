"""How many episodes at once a variant's worker runs (`bench --parallel auto|N`, `--vote K`).

`auto` (None) is the calibrated default of the variant's settings (`Settings.parallel`: the
most sequences that fit the memory budget), 1 when the settings were not calibrated (--no-tune,
a GPU) or speculation is on (MTP needs a context per episode, which the batched engine does not
have; lookup's recurrent snapshots make steps of several sequences slower than one).
An explicit N wins. A vote runs its K episodes at once: max(N, K). What is asked is checked
against the calibration (`check_parallel`), before the worker loads anything.
"""

from __future__ import annotations

from edge_sql.api.agent_settings import AgentSettings
from edge_sql.errors import BenchSetupError
from edge_sql.runtime.options import check_episodes_at_once, episodes_at_once
from edge_sql.runtime.tuning import check_parallel
from edge_sql.runtime.tuning.settings import Settings


def resolve_parallel(
    requested: int | None, settings: Settings, episodes: AgentSettings | None = None, *, vote: int | None = None
) -> int:
    """The sessions a variant's worker opens for episodes of `episodes` (its speculation) under
    the llama.cpp `settings` (see the module docstring); raises BenchSetupError when the
    speculation runs one episode per context, EdgeSqlError when they do not fit the budget."""
    speculate = episodes.speculate if episodes is not None else "off"
    if requested is None:  # lookup too: its recurrent snapshots make steps of several sequences
        # slower than one (benchmarks/results/parallel.md: 0.69-0.81x on the 2B shape)
        n = 1 if speculate != "off" else settings.parallel or 1
    else:
        n = requested
    n = episodes_at_once(n, vote)
    check_episodes_at_once(speculate, n, asked=", from --parallel or --vote", error=BenchSetupError)
    check_parallel(settings, n)  # EdgeSqlError with the calibration's figures
    return n
