"""The `--ray [ADDRESS]` and `--ray-workers` options of `edge-sql bench` (and `--ray` of `eval`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from edge_sql.cluster.ray_support import AUTO

RAY_HELP = (
    "Run on a Ray cluster, from one of its machines: --ray alone for the cluster this machine "
    "joined with `ray start`, --ray HEAD_IP:6379 to name it, --ray local for a Ray runtime on this "
    "machine only. Needs the 'cluster' extra: pip install \"edge-sql[cluster]\"."
)


def ray_address_option(func: Callable[..., Any]) -> Callable[..., Any]:  # Any: click
    return click.option(
        "--ray", "ray_address", is_flag=False, flag_value=AUTO, default=None, metavar="[ADDRESS|local]", help=RAY_HELP
    )(func)


def ray_options(func: Callable[..., Any]) -> Callable[..., Any]:  # Any: click
    """--ray and --ray-workers (Ray actors per variant, each with --threads CPUs)."""
    func = click.option(
        "--ray-workers",
        type=click.IntRange(min=1),
        metavar="N",
        help="With --ray: workers per variant, each loading the variant once and "
        "using --threads CPUs (default 4). Default: as many as the cluster's CPUs allow.",
    )(func)
    return ray_address_option(func)
