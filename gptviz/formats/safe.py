"""Reading untrusted files: sized before they are read, each failure one sentence naming the file.

Pickles never run code here: a checkpoint goes through `torch.load(weights_only=True)`, which
rebuilds tensors and plain containers only, and a vocabulary pickle (nanoGPT's meta.pkl) through
`safe_unpickle`, which refuses every class or function a pickle names. Every file is sized with
`stat` first (limits.py), and a torch zip is checked for what it will unpack to before it is
unpacked, so a small file cannot make the process allocate gigabytes."""

from __future__ import annotations

import gc
import io
import json
import pickle
import re
import stat
import zipfile
from pathlib import Path

import torch

from ..errors import CheckpointError
from ..limits import (
    MAX_JSON_BYTES,
    MAX_META_BYTES,
    MAX_UNPACK_RATIO,
    MAX_UNPACKED_BYTES,
    UNPACK_ALLOWANCE,
)

# torch.save's older (pre-1.6, non-zip) format opens with a pickled magic number
LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
ZIP_MAGIC = b"PK\x03\x04"
# what torch's weights_only unpickler says when a pickle asks for a callable or class it refuses
# (a module torch blocks outright, os or posix, reads "unsupported GLOBAL posix.system whose module ...")
REFUSED = ("Unsupported global", "unsupported GLOBAL", "Trying to call reduce", "Unsupported class")


def user_path(path: str | Path) -> Path:
    """A path typed or linked by a person (a URL, a text box, the command line) as a Path, or
    CheckpointError in one line: the OS cannot name a file with a NUL byte, and every call on such
    a Path (stat, exists, open) would raise ValueError wherever it happened to be made first."""
    text = str(path)
    if "\0" in text:
        raise CheckpointError(f"{shown_name(text)}: a path cannot contain a NUL byte")
    return Path(text).expanduser()


def shown_name(name: str | bytes, limit: int = 200) -> str:
    """A file name or path as printable text whatever its bytes: bytes that are not UTF-8 (a name
    from a folder listing holds them as lone surrogates) and control characters become backslash
    escapes, e.g. b'\\xff\\xfe' -> '\\xff\\xfe', a NUL -> '\\x00'."""
    if isinstance(name, bytes):
        raw = name
    else:
        try:
            raw = str(name).encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate no file name decodes to: show its code point
            raw = str(name).encode("utf-8", "backslashreplace")
    text = raw.decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() or c == " " else ascii(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def size_text(n: int) -> str:
    """Bytes for a message: 1.2 MB, 6.0 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_file(path: Path, limit: int | None, what: str) -> int:
    """The size of a regular, non-empty file no larger than limit, or CheckpointError saying which
    it is not. Nothing is read: a sparse 6 GB file is refused by its size alone."""
    try:
        st = path.stat()
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the name
        reason = getattr(e, "strerror", None) or str(e)
        raise CheckpointError(f"{path}: cannot be read ({reason}); check the {what} is there") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise CheckpointError(f"{path}: is {kind}; the {what} must be a file")
    if st.st_size == 0:
        raise CheckpointError(f"{path}: the file is empty")
    if limit is not None and st.st_size > limit:
        raise CheckpointError(
            f"{path}: {size_text(st.st_size)} is too large for a {what} (gptviz reads at most {size_text(limit)})"
        )
    return st.st_size


def read_bytes(path: Path, limit: int, what: str) -> bytes:
    """A file's bytes, sized first (check_file); a failed read is one sentence naming the file."""
    check_file(path, limit, what)
    try:
        with path.open("rb") as f:  # a Path, or a MemoryPath (an upload held in memory)
            data = f.read(limit + 1)  # the file may have grown since stat
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise CheckpointError(f"{path}: too large for a {what} (gptviz reads at most {size_text(limit)})")
    return data


def read_json(path: Path, what: str = "config file", limit: int = MAX_JSON_BYTES) -> dict:
    """A JSON object from a file of at most `limit` bytes, or CheckpointError naming the file."""
    data = read_bytes(path, limit, what)
    collecting = gc.isenabled()
    gc.disable()  # JSON builds no cycles; a list of a million small lists would otherwise set off collections
    try:  # that each walk every object made so far: 12 s, not 1 s, for a 1 MB GPT-Neo attention_types
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: [[[[...]]]] nested deep
        first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: not readable JSON ({first})") from None
    finally:
        if collecting:
            gc.enable()
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


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
    data = read_bytes(path, MAX_META_BYTES, "vocabulary file")
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except _Refused as e:
        raise CheckpointError(f"{path}: refused to unpickle: {e}") from None
    except Exception as e:  # truncated or not a pickle: EOFError, ValueError, KeyError, ...
        first = str(e).splitlines()[0][:200] if str(e) else ""
        raise CheckpointError(f"{path}: not a readable pickle ({type(e).__name__}: {first})") from None


def check_unpacked_size(path: Path, size: int) -> None:
    """Refuse a torch zip whose entries add up to far more than the file: a few MB of compressed
    zeros must not become gigabytes in memory. The sizes come from the zip's directory, and torch's
    reader allocates by those same sizes, so this is known before anything is unpacked."""
    corrupt = f"{path}: not a readable PyTorch file, truncated or corrupt"
    try:
        with path.open("rb") as f, zipfile.ZipFile(f) as z:
            total = sum(info.file_size for info in z.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise CheckpointError(f"{corrupt} (zip: {str(e)[:200]})") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    limit = min(MAX_UNPACK_RATIO * size + UNPACK_ALLOWANCE, MAX_UNPACKED_BYTES)
    if total > limit:
        raise CheckpointError(
            f"{path}: refused: it would unpack to {size_text(total)} from {size_text(size)} on disk, more than "
            f"gptviz allows ({size_text(limit)}); torch.save writes checkpoints that unpack to about their own size"
        )


def torch_load(path: Path, mmap: bool = False) -> object:
    """torch.load with weights_only=True, every failure turned into one sentence naming the file.
    "Could run code" is said only of a pickle that asks for a callable; anything else unreadable is
    corrupt or not a PyTorch file. mmap=True maps a zip checkpoint's tensors instead of reading them:
    what only needs the pickle's plain values (nanoGPT's iter_num) or the tensors' shapes then costs the
    pickle, not the weights (torch_load_mapped says when a file could not be mapped)."""
    return _torch_load(path, mmap)[0]


def torch_load_mapped(path: Path) -> tuple[object, bool]:
    """torch_load(path, mmap=True), and whether its tensors are mapped. False: they were read whole,
    as an upload (no file to map), the older non-zip format and a zip whose entries a re-zipping tool
    compressed are: then what it gave is the file's content, and reading it again would hold it twice."""
    return _torch_load(path, True)


def _torch_load(path: Path, mmap: bool) -> tuple[object, bool]:
    size = check_file(path, None, "checkpoint")
    corrupt = f"{path}: not a readable PyTorch file, truncated or corrupt"
    try:
        with path.open("rb") as f:
            head = f.read(len(LEGACY_MAGIC))
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    zipped = head.startswith(ZIP_MAGIC)
    if zipped:
        check_unpacked_size(path, size)
    elif head != LEGACY_MAGIC:  # the legacy format stores its tensors raw: memory is bounded by the size
        raise CheckpointError(f"{corrupt}: it is not the zip archive torch.save writes (nor its older format)")
    try:
        if mmap and zipped and isinstance(path, Path):  # mapping needs a real file; an upload is read whole
            try:
                return torch.load(path, map_location="cpu", weights_only=True, mmap=True), True
            except (RuntimeError, OSError):  # compressed entries, or a file system that cannot map: read below
                pass
        with path.open("rb") as f:  # a file object: the same call reads a Path or an in-memory upload
            return torch.load(f, map_location="cpu", weights_only=True), False
    except pickle.UnpicklingError as e:
        text = str(e)
        if not any(r in text for r in REFUSED):
            raise CheckpointError(f"{corrupt} ({_first_line(text)})") from None
        # weights_only refuses a pickle that names anything but tensors and plain containers
        found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", text)
        what = f"it names {found.group(1)}" if found else "it holds objects other than tensors and plain data"
        raise CheckpointError(
            f"{path}: refused to load: {what}, which could run code; "
            "gptviz only loads tensors and plain data (torch.load weights_only=True)"
        ) from None
    except MemoryError:
        raise CheckpointError(f"{path}: not enough memory to load this checkpoint") from None
    except Exception as e:  # RuntimeError, EOFError, IndexError, KeyError, ...: a damaged file
        raise CheckpointError(f"{corrupt} ({_first_line(str(e)) or type(e).__name__})") from None


def state_dict(obj: object, path: Path, what: str = "the file") -> dict[str, torch.Tensor]:
    """obj, checked to be a state dict: names to tensors (what torch_load returned may be anything)."""
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        raise CheckpointError(f"{path}: {what} is not a state dict of tensors")
    return obj


def shapes_of(state: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in state.items()}


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0][:200] if text else ""
