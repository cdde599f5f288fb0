"""Give freed Traces back to the operating system.

glibc raises its mmap threshold each time a large block is freed (up to 32 MB), so after a few
evicted Traces, tensors of a few MB come from the heap, where freed space stays with the process:
the server's memory then grows past what the caches hold. A fixed threshold keeps every block of
1 MB or more in its own mapping, returned to the system the moment the cache drops it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_MMAP_THRESHOLD = -3  # mallopt parameter number, from glibc's malloc.h
THRESHOLD_BYTES = 1 << 20


@functools.cache
def fix_mmap_threshold() -> bool:
    """Set a fixed mmap threshold once per process; False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES))
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl, Windows): nothing to do
        return False
