"""Give back the resident pages of a memory-mapped model file.

llama.cpp maps the GGUF file read-only and shared. With repacked weights
(`use_extra_bufts`) it copies the matrices it repacks into its own buffer and never reads their
mapped originals again, yet the originals stay resident: about 590 MiB more on the 2B Q4_K_M
(`../shared/reference/measured-here.md`). `madvise(MADV_DONTNEED)` over the mapping drops every
resident page of it; the pages llama.cpp still reads (the embedding table, tensors it did not
repack) fault back in from the page cache when next touched, so nothing changes but memory.
Linux only (it reads /proc/self/maps); elsewhere these functions do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

MADV_DONTNEED = 4  # <sys/mman.h> on Linux


def file_mappings(path: str | Path) -> list[tuple[int, int]]:
    """(start, end) of each of this process's mappings of `path` (matched by device and inode)."""
    try:
        stat = os.stat(path)
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    ranges = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue
        address, _perms, _offset, device, inode = fields[:5]
        major, minor = (int(part, 16) for part in device.split(":"))
        if int(inode) == stat.st_ino and os.makedev(major, minor) == stat.st_dev:
            start, end = (int(part, 16) for part in address.split("-"))
            ranges.append((start, end))
    return ranges


def release_file_pages(path: str | Path) -> int:
    """Drop this process's resident pages of its mappings of `path`; the bytes advised.

    Safe for read-only shared file mappings: a later access reads the page again from the page
    cache (or the disk). Returns 0 where madvise or /proc is not available.
    """
    ranges = file_mappings(path)
    if not ranges:
        return 0
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    libc.madvise.restype = ctypes.c_int
    advised = 0
    for start, end in ranges:
        if libc.madvise(ctypes.c_void_p(start), end - start, MADV_DONTNEED) == 0:
            advised += end - start
    return advised
