"""Where a checkpoint comes from: a folder shipped with the project, a local path, an upload, or
the demo model built in memory. A source is a string: a shipped name, "demo", or a path."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from ..errors import CheckpointError

CHECKPOINTS_ENV = "GPTVIZ_CHECKPOINTS_DIR"  # folder of shipped checkpoints (default: ./checkpoints)
DEFAULT_ENV = "GPTVIZ_DEFAULT_CHECKPOINT"  # name (in that folder), path, or "demo"
UPLOAD_LIMIT_ENV = "GPTVIZ_MAX_UPLOAD_MB"
DEFAULT_NAME = "shakespeare-char"
DEMO = "demo"  # a random-weight model built in memory: the fallback when nothing is shipped
CHECKPOINT_HELP = (
    "gptviz: config.json + model.safetensors (+ tokenizer.json). nanoGPT: ckpt.pt (+ meta.pkl). "
    "Hugging Face GPT-2: config.json + model.safetensors or pytorch_model.bin + vocab.json + merges.txt "
    "(or tokenizer.json). Nothing is unpickled beyond plain tensors."
)


def checkpoints_dir() -> Path:
    """The shipped checkpoints: $GPTVIZ_CHECKPOINTS_DIR, else checkpoints/ of the source checkout,
    else ./checkpoints (an installed package carries none)."""
    if os.environ.get(CHECKPOINTS_ENV):
        return Path(os.environ[CHECKPOINTS_ENV])
    checkout = Path(__file__).resolve().parents[2] / "checkpoints"
    return checkout if checkout.is_dir() else Path.cwd() / "checkpoints"


def shipped() -> list[str]:
    """Names of the checkpoints shipped in checkpoints_dir(), one folder each."""
    root = checkpoints_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and any(p.iterdir()))


def default_checkpoint() -> str:
    override = os.environ.get(DEFAULT_ENV)
    if override:
        return override
    names = shipped()
    if DEFAULT_NAME in names:
        return DEFAULT_NAME
    return names[0] if names else DEMO


def checkpoint_path(source: str) -> Path:
    """A shipped name -> its folder; anything else is a path as given."""
    return checkpoints_dir() / source if source in shipped() else Path(source).expanduser()


def version(source: str) -> str:
    """When the checkpoint's files last changed: part of every cache key, so a checkpoint
    rewritten in place (a training run saving as it goes) is loaded again, not served stale."""
    if source == DEMO:
        return ""
    path = checkpoint_path(source)
    try:
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        return ",".join(f"{p.name}:{p.stat().st_mtime_ns}" for p in files if p.exists())
    except OSError:  # unreadable: the loader will say so
        return ""


def upload_limit_mb() -> int:
    return int(os.environ.get(UPLOAD_LIMIT_ENV, "200"))


def save_upload(files) -> str:
    """Write uploaded checkpoint files into a fresh temporary folder (named by their content, never
    beside the shipped ones) and return what to load: the folder, or the file if there is one."""
    limit = upload_limit_mb()
    total = sum(f.size for f in files)
    if total > limit * 2**20:
        raise CheckpointError(f"the upload is {total / 2**20:.0f} MB; the limit is {limit} MB ({UPLOAD_LIMIT_ENV})")
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.name):
        if not re.fullmatch(r"[\w.\-]+", f.name) or f.name.startswith("."):
            raise CheckpointError(f"{f.name!r}: use plain file names (letters, digits, . _ -)")
        digest.update(f.name.encode() + b"\0" + f.getvalue())
    folder = Path(tempfile.gettempdir()) / "gptviz-uploads" / digest.hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        (folder / f.name).write_bytes(f.getvalue())
    return str(folder if len(files) > 1 else folder / files[0].name)
