"""The GPU check's parts (benchmarks/gpu_check.sh runs `check` on the GPU machine; benchmarks/gpu_pack.py prepares what it installs)."""
