"""Keep the server's memory small and its garbage collection cheap.

Give freed Traces back to the operating system:

glibc raises its mmap threshold each time a large block is freed (up to 32 MB), so after a few
evicted Traces, tensors of a few MB come from the heap, where freed space stays with the process:
the server's memory then grows past what the caches hold. A fixed threshold keeps every block of
1 MB or more in its own mapping, returned to the system the moment the cache drops it.

Collect garbage without walking the libraries: torch, plotly, pandas and Streamlit leave ~250,000
objects that live as long as the process, and a full collection walks them all (120 ms on the class
laptop, with the GIL held: a class of 30 waited for one another's collections). Streamlit's own
collection after every script run is off (`runner.postScriptGC` in .streamlit/config.toml and the
CLI's flags); once the first run has imported everything, those objects are frozen, so the
collections Python still makes by itself skip them. Objects freed by reference count (Traces,
figures) go as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

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


@functools.cache
def freeze_imports() -> None:
    """Once per process, after the first script run: what exists now is the libraries' and stays."""
    gc.collect()
    gc.freeze()
