"""Where a checkpoint comes from: a folder shipped with the project, a local path, an upload, or
the demo model built in memory. A source is a string: a shipped name, "demo", a path, or
"upload:<content hash>" (see uploads.py for where an upload lives)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import CheckpointError
from ..formats.safe import read_json
from .uploads import UPLOAD_PREFIX, is_upload, upload_root

CHECKPOINTS_ENV = "GPTVIZ_CHECKPOINTS_DIR"  # folder of shipped checkpoints (default: ./checkpoints)
DEFAULT_ENV = "GPTVIZ_DEFAULT_CHECKPOINT"  # name (in that folder), path, or "demo"
UPLOAD_LIMIT_ENV = "GPTVIZ_MAX_UPLOAD_MB"
DEFAULT_NAME = "shakespeare-char"
DEMO = "demo"  # a random-weight model built in memory: the fallback when nothing is shipped
CHECKPOINT_HELP = (
    "gptviz: config.json + model.safetensors (+ tokenizer.json). nanoGPT: ckpt.pt (+ meta.pkl or "
    "tokenizer.json; GPT-2's BPE for GPT-2's vocabulary). "
    "Hugging Face GPT-2: config.json + model.safetensors or pytorch_model.bin + vocab.json + merges.txt "
    "(or tokenizer.json). Nothing is unpickled beyond plain tensors."
)
# The files a loader reads: the version stamp looks at these (and the folder itself), never at every
# file, so a folder of 100,000 files costs a dozen stat calls per rerun.
LOADER_FILES = (
    "config.json",
    "model.safetensors",
    "pytorch_model.bin",
    "ckpt.pt",
    "meta.pkl",
    "tokenizer.json",
    "vocab.json",
    "merges.txt",
)
__all__ = ["UPLOAD_PREFIX", "is_upload"]


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
    """A shipped name -> its folder; anything else is a path as given. A path inside the upload
    folder is refused: an upload belongs to the session that made it, and its server path must not
    open it for anyone else (the owning session loads it by its content hash, never by path)."""
    if source in shipped():
        return checkpoints_dir() / source
    path = Path(source).expanduser()
    try:
        inside = upload_root().resolve() in [path.resolve(), *path.resolve().parents]
    except (OSError, RuntimeError):  # a symlink loop or an unreadable path: the loader will say so
        inside = False
    if inside:
        raise CheckpointError(
            "that path is inside gptviz's upload folder, which is private to each session: upload the files instead"
        )
    return path


def version(source: str) -> str:
    """When the checkpoint's files last changed: part of every cache key, so a checkpoint
    rewritten in place (a training run saving as it goes) is loaded again, not served stale.
    Cheap on purpose: the folder's own time (a file added, removed or renamed into place) and the
    files a loader reads; an upload's version is its content hash."""
    if source == DEMO or is_upload(source):
        return ""
    try:
        path = checkpoint_path(source)
    except CheckpointError:
        return ""
    stamps = []
    try:
        if path.is_dir():
            stamps.append(f".:{path.stat().st_mtime_ns}")
            candidates = [path / name for name in LOADER_FILES]
        else:
            # a nanoGPT file reads its tokenizer from beside it
            candidates = [path, *(path.parent / n for n in ("meta.pkl", "tokenizer.json", "vocab.json", "merges.txt"))]
        for p in candidates:
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            stamps.append(f"{p.name}:{st.st_mtime_ns}:{st.st_size}")
    except OSError:  # unreadable: the loader will say so
        return ""
    return ",".join(stamps)


def preset_prompt(source: str) -> str | None:
    """The prompt a shipped checkpoint opens on when its model card names one (`preset_prompt`):
    a model trained on other text than Shakespeare needs a prompt in its own vocabulary."""
    if source not in shipped():
        return None
    try:
        card = read_json(checkpoints_dir() / source / "config.json").get("card")
    except CheckpointError:  # the loader will say what is wrong with the file
        return None
    prompt = card.get("preset_prompt") if isinstance(card, dict) else None
    return prompt if isinstance(prompt, str) and prompt else None


def upload_limit_mb() -> int:
    """The upload size limit in MB ($GPTVIZ_MAX_UPLOAD_MB, default 200)."""
    raw = os.environ.get(UPLOAD_LIMIT_ENV, "200").strip()
    return int(raw) if raw.isascii() and raw.isdigit() else 200
