#!/usr/bin/env bash
# CUDA offload checked and measured on a GPU machine that has no network, in one command.
#
#   python benchmarks/gpu_pack.py --build-cuda      # first, on a machine with PyPI: fills .gpu/
#   benchmarks/gpu_check.sh OUT_DIR [benchmarks.gpu.check options]   # then, on the GPU machine
#
# It installs the wheels gpu_pack.py carried into a private folder (nothing of the machine's own
# Python changes), takes llama-cpp-python with CUDA from the wheel built ahead from the same
# source, or builds it there from that source with the flags users use, installs edge-sql
# itself without dependencies (the machine's numpy, torch, transformers, click... serve), and
# runs benchmarks/gpu/check.py, which writes OUT_DIR/gpu-check.json. Exit status: that script's.
# EDGE_SQL_GPU_CHECK_CPU=1 rehearses it all on a machine without a GPU (PYTHON=a Python that
# already has llama-cpp-python; nothing is built).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: benchmarks/gpu_check.sh OUT_DIR [benchmarks.gpu.check options]}
shift
PACK=${EDGE_SQL_GPU_PACK:-.gpu}
SITE=${EDGE_SQL_GPU_SITE:-/tmp/edge-sql-gpu-site}
PY=${PYTHON:-python3}
# the build flags users are told to use for a Hopper GPU (README, "GPU offload")
CUDA_CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90"
mkdir -p "$OUT_DIR" "$SITE"
START=$(date +%s)
log() { echo "[gpu_check.sh +$(( $(date +%s) - START )) s] $*" >&2; }
pip_site() { "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$@"; }

# cuBLAS and the CUDA runtime for llama.cpp's CUDA backend: the toolkit's folders, then the
# nvidia-* packages PyTorch brings (the machine's image has cuBLAS only there)
LIBS=$("$PY" - <<'EOF'
import glob, os, site, sys
dirs = [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib") if os.path.isdir(d)]
for base in [*site.getsitepackages(), *sys.path]:
    dirs += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib")))
print(":".join(dict.fromkeys(d for d in dirs if glob.glob(os.path.join(d, "lib*.so*")))))
EOF
)
export LD_LIBRARY_PATH="${LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

log "carried wheels: $(ls "$PACK"/wheels | tr '\n' ' ')"
pip_site "$PACK"/wheels/*.whl

has_cuda() { "$PY" -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)" 2>"$OUT_DIR/llama-import.log"; }
HOW=none
if [ "${EDGE_SQL_GPU_CHECK_CPU:-0}" = 1 ]; then
    # a rehearsal on a machine without a GPU: the llama-cpp-python this Python already has
    "$PY" -c "import llama_cpp" && HOW=cpu-rehearsal
elif compgen -G "$PACK/cuda/llama_cpp_python-*.whl" >/dev/null; then
    pip_site "$PACK"/cuda/llama_cpp_python-*.whl
    if has_cuda; then HOW=prebuilt; else log "the prebuilt wheel did not load with CUDA: $(tail -3 "$OUT_DIR/llama-import.log")"; fi
fi
if [ "$HOW" = none ]; then
    log "building llama-cpp-python 0.3.36 with CMAKE_ARGS=\"$CUDA_CMAKE_ARGS\" on $(nproc) cores"
    CMAKE_ARGS="$CUDA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        pip_site --no-build-isolation "$PACK"/src/llama_cpp_python-0.3.36.tar.gz 2>&1 | tail -5 >&2
    has_cuda || { log "llama-cpp-python has no GPU backend: $(tail -3 "$OUT_DIR/llama-import.log")"; exit 1; }
    HOW=built-here
fi
log "llama-cpp-python with CUDA: $HOW"
echo "$HOW" >"$OUT_DIR/llama-cpp-python.txt"

if ! pip_site --no-build-isolation . 2>"$OUT_DIR/edge-sql-install.log"; then
    # the image's setuptools may predate pyproject's metadata (SPDX license: setuptools >= 77):
    # the same files, laid out as setuptools would (convert/ is edge_sql.convert), with a record
    # of the version the converter writes into each GGUF
    log "pip could not build edge-sql ($(tail -1 "$OUT_DIR/edge-sql-install.log")); copying it instead"
    VERSION=$("$PY" -c "import re; print(re.search(r'__version__ = \"([^\"]+)\"', open('edge_sql/__init__.py').read())[1])")
    rm -rf "$SITE/edge_sql" "$SITE"/edge_sql-*.dist-info
    cp -r edge_sql "$SITE/edge_sql" && cp -r convert "$SITE/edge_sql/convert"
    mkdir -p "$SITE/edge_sql-$VERSION.dist-info"
    printf 'Metadata-Version: 2.1\nName: edge-sql\nVersion: %s\n' "$VERSION" >"$SITE/edge_sql-$VERSION.dist-info/METADATA"
fi
log "edge-sql installed; running benchmarks/gpu/check.py"
REQUIRE=--require-gpu
[ "$HOW" = cpu-rehearsal ] && REQUIRE=
# the check and its children run as modules of this tree (`benchmarks`, and `tests` for the
# fixture's builder), found after the installed packages; PYTHONSAFEPATH: `-m` puts no working
# directory in front, so `edge_sql` is the one installed above (with edge_sql.convert), not the source
PYTHONPATH="$PYTHONPATH:$PWD" PYTHONSAFEPATH=1 "$PY" -m benchmarks.gpu.check "$OUT_DIR" $REQUIRE --llama-source "$HOW" "$@"
