"""From a GGUF path and `SessionOptions` to a loaded model, its context and what was chosen.

The argument policy lives here (and in `SessionOptions.checked`): everything that can be
refused is refused before llama.cpp loads anything heavy, and each `None` option is resolved
once (GPU layers, threads, ubatch, whether the MTP head loads), so the context, the info line
and the prefix-state key all see the same choices.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import llama_cpp

from edge_sql.convert.gguf_file import GGUFFile, validate_gguf
from edge_sql.errors import EdgeSqlError
from edge_sql.runtime.llama.backend import buffer_sizes, default_threads, gpu_backend_name, init_backend, repack_is_safe
from edge_sql.runtime.llama.context import DecodeContext, create_context
from edge_sql.runtime.llama.shared_models import LoadedModel, acquire, release
from edge_sql.runtime.options import DEFAULT_UBATCH, SessionOptions, check_episodes_at_once, uses_mtp
from edge_sql.runtime.records import SessionInfo


class OpenedModel(NamedTuple):
    """What a session runs on: a reference to the shared model, a context on it (or one sequence
    of a batched one, runtime/batching/), and the info that describes both."""

    loaded: LoadedModel
    context: DecodeContext  # `open_model`'s: a `LlamaContext` of its own
    info: SessionInfo


def open_model(model_path: str | Path, options: SessionOptions, *, n_seq: int = 1) -> OpenedModel:
    """The shared model for `model_path`, a context on it made from the resolved `options`
    (`context.options`), and the info that describes both. ValueError / EdgeSqlError for
    options that cannot work, before loading; ModelFileError when llama.cpp fails. `n_seq`
    sequences of `options.n_ctx` tokens each (runtime/batching/sequences.py)."""
    options = options.checked()
    check_episodes_at_once(options.speculate, n_seq)
    gguf = validate_gguf(model_path)
    if options.speculate == "mtp" and not gguf.mtp_layers:
        raise EdgeSqlError(
            f"--speculate mtp: {gguf.path.name} has no MTP head (convert the checkpoint again "
            "without --no-mtp), use --speculate lookup"
        )
    init_backend(verbose=options.verbose)
    gpu = gpu_backend_name()
    options = _resolved(options, gguf, gpu)
    loaded = _load(gguf.path, options)
    context = None
    try:
        context = create_context(
            loaded,
            options,
            what=(
                f"a {options.n_ctx}-token context"
                + (f" x {n_seq} sequences" if n_seq > 1 else "")
                + f" for {gguf.path} (out of memory?)"
            ),
            n_outputs=(options.draft_max + 1) * n_seq,
            n_rs_seq=options.draft_max,
            perf=True,  # verify batches
            n_seq=n_seq,
        )
        model = loaded.model
        recurrent = llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model)
        if options.draft_max and recurrent and context.n_rs_seq < options.draft_max:
            raise EdgeSqlError(
                f"--speculate {options.speculate}: llama.cpp cannot roll back the recurrent state of "
                f"{gguf.architecture} models; use --speculate off"
            )
    except BaseException:
        if context is not None:
            context.close()
        release(loaded)
        raise
    # validate_gguf refuses a file without an architecture; _resolved made every choice
    assert gguf.architecture is not None
    assert options.n_gpu_layers is not None and options.n_threads is not None and options.n_ubatch is not None
    info = SessionInfo(
        model_path=gguf.path,
        architecture=gguf.architecture,
        model_bytes=gguf.file_size,
        backend=gpu if gpu and options.n_gpu_layers else "CPU",
        gpu_layers=options.n_gpu_layers,
        n_layers=llama_cpp.llama_model_n_layer(model),
        n_threads=options.n_threads,
        n_ctx=context.n_ctx,
        n_batch=options.n_batch,
        n_ubatch=options.n_ubatch,
        repack=options.repack,
        n_vocab=context.n_vocab,
        flash_attn=options.flash_attn_label,
        buffers={**buffer_sizes(loaded.load_log), **context.buffers},
        mapping_released=loaded.mapping_released,
        mtp_layers=llama_cpp.llama_model_n_layer_nextn(model) if options.mtp else 0,
        speculate=options.speculate,
        draft_max=options.draft_max,
        rollback=("kv+n_rs_seq" if recurrent else "kv") if options.draft_max else "",
        n_seq=n_seq,
        adapt_threads=context.threads.adaptive,
    )
    return OpenedModel(loaded, context, info)


def _resolved(options: SessionOptions, gguf: GGUFFile, gpu: str | None) -> SessionOptions:
    """`options` with every choice made: GPU layers (all when a GPU backend exists and for -1), threads
    (every usable CPU) and whether their count adapts to the load (with flash attention to match),
    ubatch (256, at most n_batch), and whether the MTP head loads."""
    n_layers = gguf.block_count or 0
    n_gpu_layers = options.n_gpu_layers
    if n_gpu_layers is None or n_gpu_layers < 0:  # -1: every layer, as llama.cpp's own tools take it
        n_gpu_layers = n_layers + 1 if gpu else 0
    if options.repack and not repack_is_safe():
        raise EdgeSqlError(
            "repacked weights crash with this llama.cpp build (AMX kernels); use repack=False or "
            "rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_AMX_INT8=OFF"
        )
    n_gpu_layers = max(0, min(n_gpu_layers, n_layers + 1)) if gpu else 0
    n_threads = options.n_threads or default_threads()
    adapt = options.adapt_threads and not n_gpu_layers and n_threads > 1
    flash_attn, adapt_threads = attention_for_threads(options.flash_attn, adapt)
    return replace(
        options,
        n_gpu_layers=n_gpu_layers,
        flash_attn=flash_attn,
        adapt_threads=adapt_threads,
        n_threads=n_threads,
        n_ubatch=min(options.n_ubatch or DEFAULT_UBATCH, options.n_batch),
        # the MTP head (an extra block only an MTP drafter's context runs; the main graph never
        # does) on request or to draft with: its weights stay in memory (36 MiB on the 2B Q4_K_M)
        mtp=(options.mtp or uses_mtp(options.speculate)) and gguf.mtp_layers > 0,
    )


def attention_for_threads(flash_attn: bool | None, adapt: bool) -> tuple[bool | None, bool]:
    """Flash attention and thread adaptation, resolved together: (flash_attn, adapt_threads).

    Why: ggml's CPU flash attention splits the KV cells of a one-token step across the threads
    once a step reads 512 cells or more (ops.cpp, `use_split_kv_path`; llama.cpp rounds the cells a
    step reads up to a multiple of 256, so from a sequence's 257th token on) and adds the parts
    up, so its sums depend on the thread count; without flash attention every output row is one
    thread's sum. A thread count that follows the machine's load (runtime/llama/threads.py) must
    not change the tokens, so an adapting context runs without flash attention ("auto" would
    turn it on for the CPU), and flash attention asked for by name keeps the count fixed.
    """
    if not adapt:
        return flash_attn, False
    if flash_attn:
        return True, False
    return False, True


def _load(path: Path, options: SessionOptions) -> LoadedModel:
    """The model for `options` (resolved), shared with other sessions of the file."""
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = options.n_gpu_layers
    params.use_extra_bufts = options.repack
    params.load_mtp = options.mtp
    return acquire(path, params)
