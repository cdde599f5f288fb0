"""Reading untrusted files: JSON and pickles, each failure one sentence naming the file.

Pickles never run code here: a checkpoint goes through `torch.load(weights_only=True)`, which
rebuilds tensors and plain containers only, and a vocabulary pickle (nanoGPT's meta.pkl) through
`safe_unpickle`, which refuses every class or function a pickle names."""

from __future__ import annotations

import io
import json
import pickle
import re
import zipfile
from pathlib import Path

import torch

from ..errors import CheckpointError

MAX_META_BYTES = 64 * 2**20


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


class _Refused(pickle.UnpicklingError):
    """The pickle asks for something other than plain data."""


class _PlainUnpickler(pickle.Unpickler):
    """Rebuilds only what pickle encodes without naming a class: dict, list, tuple, str, bytes,
    int, float, bool, None. Any GLOBAL/STACK_GLOBAL (the way a pickle reaches a callable) fails."""

    def find_class(self, module, name):
        raise _Refused(f"it names {module}.{name}, and only plain data is accepted")

    def persistent_load(self, pid):
        raise _Refused("it refers to external objects, and only plain data is accepted")


def safe_unpickle(path: Path) -> object:
    """Unpickle plain data from path, or CheckpointError. Never imports or calls anything."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    if not data:
        raise CheckpointError(f"{path}: the file is empty")
    if len(data) > MAX_META_BYTES:
        raise CheckpointError(f"{path}: {len(data):,} bytes is too large for a vocabulary file")
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except _Refused as e:
        raise CheckpointError(f"{path}: refused to unpickle: {e}") from None
    except Exception as e:  # truncated or not a pickle: EOFError, ValueError, KeyError, ...
        raise CheckpointError(f"{path}: not a readable pickle ({type(e).__name__}: {e})") from None


def torch_load(path: Path) -> object:
    """torch.load with weights_only=True, every failure turned into one sentence naming the file."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    if size == 0:
        raise CheckpointError(f"{path}: the file is empty")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # weights_only refuses a pickle that names anything but tensors and plain containers
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
        what = f"it names {found.group(1)}" if found else "it holds objects other than tensors and plain data"
        raise CheckpointError(
            f"{path}: refused to load: {what}, which could run code; "
            "gptviz only loads tensors and plain data (torch.load weights_only=True)"
        ) from None
    except (RuntimeError, EOFError, ValueError, zipfile.BadZipFile, OSError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: not a readable PyTorch file, truncated or corrupt ({first})") from None
