"""Benchmark scripts, grouped in folders by what they measure, with their committed results.

Each script is a module run from the repository's root, `python -m benchmarks.<folder>.<script>`
(`python -m benchmarks.runtime.bench_runtime --help`), so it reaches the shared helpers
(`benchmarks.common`) and edge_sql by their package names, with nothing put on sys.path.
Benchmarks import nothing from tests/ but the fixture model's definition (tests/fixture_checkpoint.py,
tests/fixture_budget.py), which the GPU check and the scripts that run the trained fixture share.
"""
