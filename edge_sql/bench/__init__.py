"""The benchmark harness behind `edge-sql bench`: speed, fidelity and accuracy of each variant."""

from edge_sql.bench.config import BenchConfig
from edge_sql.bench.runner import BenchOutcome, run_bench
from edge_sql.bench.variants import BenchSetupError, Variant, default_variant_names, parse_variant_names

__all__ = [
    "BenchConfig",
    "BenchOutcome",
    "BenchSetupError",
    "Variant",
    "default_variant_names",
    "parse_variant_names",
    "run_bench",
]
