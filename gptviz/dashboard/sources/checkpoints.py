"""Where a checkpoint comes from: a folder shipped with the project, a local path, an upload, or
the demo model built in memory. A source is a string: a shipped name, "demo", a path, or
"upload:<content hash>" (see uploads.py: an upload lives in its session's memory).

Every path a person gives (the URL, a text box) enters through checkpoint_path and is checked
there (formats.safe.user_path); every name read from a folder is data, shown through shown_name."""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import CheckpointError
from ...formats.safe import read_json, shown_name
from ...listing import list_folder
from ...shipped import shipped_dir
from .classmode import DEFAULT_ENV, allowed_path
from .uploads import UPLOAD_PREFIX, is_upload

CHECKPOINTS_ENV = "GPTVIZ_CHECKPOINTS_DIR"  # folder of shipped checkpoints (default: ./checkpoints)
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
__all__ = ["DEFAULT_ENV", "UPLOAD_PREFIX", "is_upload"]  # DEFAULT_ENV: a name in that folder, a path, or "demo"


def checkpoints_dir() -> Path:
    """The shipped checkpoints: $GPTVIZ_CHECKPOINTS_DIR, else the checkout's or the installed package's."""
    return shipped_dir("checkpoints")


def readable(name: str) -> bool:
    """Whether a file name can be shown, put in a URL and typed back: valid UTF-8 (a listing gives
    other bytes as lone surrogates) without control characters."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return name.isprintable()


# (folder, its stat) -> (names, unreadable names, note): asked many times per rerun, the folder rarely changes
_SHIPPED: dict[tuple[str, int, int], tuple[list[str], list[str], str]] = {}


def _shipped_listing() -> tuple[list[str], list[str], str]:
    root = checkpoints_dir()
    try:
        st = root.stat()
    except (OSError, ValueError):
        return [], [], ""
    key = (str(root), st.st_mtime_ns, st.st_ino)
    if key not in _SHIPPED:
        try:
            listing = list_folder(root)
        except (OSError, ValueError):  # not a folder, or unreadable: nothing shipped
            return [], [], ""
        names = []
        for e in listing.entries:
            if e.is_dir and not e.name.startswith("."):
                try:
                    with os.scandir(e.path) as inside:
                        if next(inside, None) is not None:  # an empty folder is no checkpoint
                            names.append(e.name)
                except OSError:
                    continue
        shown = sorted(n for n in names if readable(n))
        unreadable = sorted(shown_name(n) for n in names if not readable(n))
        _SHIPPED.clear()  # one checkpoints folder per process: keep only its latest state
        _SHIPPED[key] = (shown, unreadable, listing.note)
    return _SHIPPED[key]


def listing() -> tuple[list[str], list[str]]:
    """The checkpoint folders in checkpoints_dir() (sorted names), and the names of the folders
    left out because their name is not readable text, as shown_name shows them."""
    names, unreadable, _ = _shipped_listing()
    return list(names), list(unreadable)


def shipped() -> list[str]:
    """Names of the checkpoints shipped in checkpoints_dir(), one folder each (readable names only;
    a bounded listing, read again only when the folder changes)."""
    return list(_shipped_listing()[0])


def shipped_note() -> str:
    """The note to show when the listing of checkpoints_dir() stopped early, else ""."""
    return _shipped_listing()[2]


def default_checkpoint() -> str:
    override = os.environ.get(DEFAULT_ENV)
    if override:
        return override
    names = shipped()
    if DEFAULT_NAME in names:
        return DEFAULT_NAME
    return names[0] if names else DEMO


def checkpoint_path(source: str) -> Path:
    """A shipped name -> its folder; anything else is a path as given, or CheckpointError in one
    line for one no file can have (a NUL byte) or one a class server does not open (classmode.py)."""
    if source in shipped():
        return checkpoints_dir() / source
    return allowed_path(source)


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
    return path_version(path)


def path_version(path: Path) -> str:
    """version() of a checkpoint by its path: the folder's own time and the files a loader reads."""
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
    """The upload size limit in MB ($GPTVIZ_MAX_UPLOAD_MB, default 200; 0 turns checkpoint and corpus
    uploads off)."""
    raw = os.environ.get(UPLOAD_LIMIT_ENV, "200").strip()
    return int(raw) if raw.isascii() and raw.isdigit() else 200
