"""CPU threads for the commands that run a model: OpenMP's passive wait, and `--threads`.

Imported by gptviz/__init__.py before anything loads torch: OpenMP reads OMP_WAIT_POLICY once, when
torch loads it. With the default (active) wait, a thread that has finished its share of an operation
spins for the next one; on a laptop whose other core is busy the spinning thread and the busy program
take turns, and every operation waits for the slower one: a corpus scan of 330k tokens took 758 s
that way and 52 s with one thread (docs/scanning.md). Sleeping instead costs nothing measurable on an idle
machine (see app.py). A value the user set stands.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def use_threads(threads: int | None) -> int:
    """Set torch's intra-op threads when given (a positive number); None or 0 keeps torch's default
    (one per physical core), which, with the passive wait, is within a few per cent of the best
    setting on a busy 2-core machine (docs/scanning.md, "Speed on a busy laptop"). Returns the threads in use."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()
