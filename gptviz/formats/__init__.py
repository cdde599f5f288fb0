"""Checkpoint formats. `load(path)` detects the format from the files; `save` writes gptviz's own.

Checkpoints are untrusted input: nothing here unpickles arbitrary objects (formats/safe.py).
Each format is a detector and a loader in FORMATS; the first whose detector accepts the path loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..devices import check_dtype, resolve_device
from ..errors import CheckpointError, GptvizError
from ..progress import ProgressFn
from .bundle import Bundle, LoadReport
from .hf_decoders import KNOWN, is_hf, load_hf_decoder, refuse_model_type
from .inmemory import MemoryPath
from .nanogpt import is_nanogpt, load_nanogpt
from .native import is_native, load_native, save
from .safe import read_json, user_path

Loader = Callable[[Path, torch.device, str, "ProgressFn | None"], Bundle]

# (name, does this path hold the format?, loader), tried in order
FORMATS: list[tuple[str, Callable[[Path], bool], Loader]] = [
    ("gptviz", is_native, load_native),
    ("hf", is_hf, lambda path, dev, dtype, progress: load_hf(path, dev, dtype, progress)),
    ("nanogpt", is_nanogpt, lambda path, dev, dtype, progress: load_nanogpt(path, dev, dtype, progress=progress)),
]


def load(
    path: str | Path | MemoryPath,
    device: str | torch.device | None = "cpu",
    dtype: str | torch.dtype = "auto",
    progress: ProgressFn | None = None,
) -> Bundle:
    """Load any supported checkpoint, detecting its format: a path, or a MemoryPath (files held in
    memory, e.g. an upload). dtype: what the model computes in, "float32", "bfloat16", "float16", or
    "auto": float32 (exact) unless that does not fit the device's free memory, then the weights' own
    half-precision dtype (report.notes says why). The model is built without storage and each weight
    filled once, converted as it is read: the peak is the model plus one tensor.
    progress: called after each weight is filled with the model's bytes filled so far (Progress.what
    "MB", or "kB" for a model under 16 MB), starting at 0 and ending at the total; a Cancelled it
    raises stops the load and passes through, and no model is returned.
    Raises CheckpointError naming the file (or DeviceError), never anything else: a checkpoint is
    untrusted input, and whatever it does wrong must reach the person as one sentence, not a traceback."""
    if not isinstance(path, (str, Path, MemoryPath)):
        raise CheckpointError(f"a checkpoint path must be text, got {type(path).__name__}")
    path = path if isinstance(path, MemoryPath) else user_path(path)
    dev = resolve_device(device)
    asked = check_dtype(dtype)
    try:
        return _load(path, dev, asked, progress)
    except GptvizError:
        raise
    except MemoryError:
        raise CheckpointError(f"{path}: not enough memory to load this checkpoint") from None
    except (OSError, ValueError) as e:  # a permission, a name the OS refuses, a NUL byte in the path
        reason = getattr(e, "strerror", None) or str(e).splitlines()[0][:200]
        raise CheckpointError(f"{path}: cannot be read ({reason})") from None
    except Exception as e:  # the last net: a bug of ours that a strange file reached
        first = str(e).splitlines()[0][:200] if str(e) else ""
        raise CheckpointError(
            f"{path}: could not be loaded: unexpected {type(e).__name__} ({first}); please report this"
        ) from None


def load_hf(path: Path, device: torch.device, dtype: str = "auto", progress: ProgressFn | None = None) -> Bundle:
    """A Hugging Face directory, by its config.json's model_type: one of the families in families.py."""
    kind = read_json(path / "config.json").get("model_type")
    if kind in KNOWN:
        return load_hf_decoder(path, device, dtype, progress)
    raise refuse_model_type(kind, path / "config.json")


def _load(path: Path, dev: torch.device, dtype: str, progress: ProgressFn | None) -> Bundle:
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    for _, detect, loader in FORMATS:
        if detect(path):
            return loader(path, dev, dtype, progress)
    raise CheckpointError(
        f"{path}: not a checkpoint gptviz recognises; expected a gptviz or Hugging Face "
        "decoder directory (config.json + weights) or a nanoGPT ckpt.pt"
    )


__all__ = ["FORMATS", "Bundle", "LoadReport", "MemoryPath", "load", "save"]
