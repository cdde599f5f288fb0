"""The local engine: batches of windows through the model in this process, one after another."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .corpus import Window
from .reduce import Accumulator, run_batch

# Tokens per batch: the logits of a batch are tokens x V floats (411 MB for GPT-2's 50,257 at 2,048
# tokens), the largest tensor of a scan, so the batch is sized in tokens, not windows.
BATCH_TOKENS = 2048


def batches(windows: Sequence[Window], batch_size: int) -> list[list[Window]]:
    """Consecutive groups of batch_size windows, sorted by length first so that a batch pads little
    (only a document's last window is shorter than the rest)."""
    ordered = sorted(windows, key=lambda w: (-len(w.ids), w.window))
    return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]


def default_batch_size(window: int) -> int:
    return max(1, BATCH_TOKENS // window)


def run_local(
    model,
    windows: Sequence[Window],
    k: int,
    batch_size: int,
    progress: Callable[[int], None] | None = None,
    features=None,
) -> Accumulator:
    acc = Accumulator(k)
    for group in batches(windows, batch_size):
        acc.add(run_batch(model, [w.window for w in group], [w.ids for w in group], k, features))
        if features is not None:
            features.add([w.window for w in group])
        if progress is not None:
            progress(len(group))
    return acc
