"""Checkpoint formats. `load(path)` detects the format from the files; `save` writes gptviz's own.

Checkpoints are untrusted input: nothing here unpickles arbitrary objects (formats/safe.py).
Each format is a detector and a loader in FORMATS; the first whose detector accepts the path loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..devices import resolve_device
from ..errors import CheckpointError
from .bundle import Bundle, LoadReport
from .hf_gpt2 import is_hf, load_hf_gpt2
from .nanogpt import is_nanogpt, load_nanogpt
from .native import is_native, load_native, save

# (name, does this path hold the format?, loader), tried in order
FORMATS: list[tuple[str, Callable[[Path], bool], Callable[[Path, torch.device], Bundle]]] = [
    ("gptviz", is_native, load_native),
    ("hf-gpt2", is_hf, load_hf_gpt2),
    ("nanogpt", is_nanogpt, load_nanogpt),
]


def load(path: str | Path, device: str | torch.device | None = "cpu") -> Bundle:
    """Load any supported checkpoint, detecting its format. Raises CheckpointError naming the file."""
    path = Path(path)
    dev = resolve_device(device)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    for _, detect, loader in FORMATS:
        if detect(path):
            return loader(path, dev)
    raise CheckpointError(
        f"{path}: not a checkpoint gptviz recognises; expected a gptviz or Hugging Face "
        "GPT-2 directory (config.json + weights) or a nanoGPT ckpt.pt"
    )


__all__ = ["FORMATS", "Bundle", "LoadReport", "load", "save"]
