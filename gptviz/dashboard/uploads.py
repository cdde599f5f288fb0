"""Uploaded checkpoints: each belongs to one browser session.

An upload is written once, into a folder private to its session
(<tempdir>/gptviz-uploads/<server pid>-<session id>-<random>/<content hash>/), and is named in the page by
its file names, never by that path. Its cache key is its content hash, so a rerun (a head click)
neither rewrites it nor reloads the model. The session's folder is deleted when the session ends:
a weakref finalizer on the SessionUploads object kept in st.session_state (it runs when Streamlit
drops the session), plus a sweep on every rerun that deletes the folders of sessions the server no
longer has, of server processes that are gone, and of anything older than a day.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import CheckpointError

UPLOAD_PREFIX = "upload:"  # a source "upload:<hash>" is the session's upload with that content
STALE_SECONDS = 24 * 3600  # a folder this old is deleted whoever owns it
_DONE = ".complete"  # written last: a folder without it is a half-written upload
_LIVE: weakref.WeakValueDictionary[str, SessionUploads] = weakref.WeakValueDictionary()


class UploadedFile(Protocol):
    name: str
    size: int

    def getvalue(self) -> bytes: ...


def upload_root() -> Path:
    """Where every session's upload folder lives."""
    return Path(tempfile.gettempdir()) / "gptviz-uploads"


def is_upload(source: str) -> bool:
    return source.startswith(UPLOAD_PREFIX)


@dataclass(frozen=True)
class Upload:
    """One saved upload: its content hash, its file names, and what to load (folder or file)."""

    digest: str
    names: tuple[str, ...]
    path: Path

    @property
    def source(self) -> str:
        return UPLOAD_PREFIX + self.digest

    @property
    def label(self) -> str:
        """How the page names it: 'upload: ckpt.pt, meta.pkl'."""
        return "upload: " + ", ".join(self.names)


def _digest(files: Sequence[UploadedFile]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.name):
        h.update(f.name.encode() + b"\0" + str(f.size).encode() + b"\0" + f.getvalue())
    return h.hexdigest()[:32]


def check_names(files: Sequence[UploadedFile], limit_mb: int, limit_env: str) -> None:
    """Refuse an upload over the size limit or with a file name that is not a plain name."""
    total = sum(f.size for f in files)
    if total > limit_mb * 2**20:
        raise CheckpointError(f"the upload is {total / 2**20:.0f} MB; the limit is {limit_mb} MB ({limit_env})")
    names = [f.name for f in files]
    for name in names:
        if not re.fullmatch(r"[\w.\-]{1,100}", name, re.ASCII) or name.startswith("."):
            raise CheckpointError(f"{name[:60]!r}: use plain file names (letters, digits, . _ -)")
    if len(set(names)) != len(names):
        raise CheckpointError("two uploaded files have the same name")


class SessionUploads:
    """The uploads of one browser session, kept in its st.session_state. Its folder is deleted
    when this object is collected (the session ended) or close() is called."""

    def __init__(self, session_id: str | None = None):
        sid = re.sub(r"[^\w-]", "", session_id or "") or uuid.uuid4().hex
        self.session_id = sid
        # a suffix of its own: an object of the same session made later (or AppTest's one session id
        # for every app) must not share a folder that this one's finalizer will delete
        self.folder = upload_root() / f"{os.getpid()}-{sid}-{uuid.uuid4().hex[:12]}"
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.folder), True)
        self._last: tuple[tuple, Upload] | None = None  # (the files' identity, what they were saved as)
        _LIVE[self.folder.name] = self

    def save(self, files: Sequence[UploadedFile], limit_mb: int, limit_env: str) -> Upload:
        """Write the files once into this session's folder, named by their content; return the Upload.
        The same files (same upload ids, or the same content) are not hashed or written again, and
        an earlier upload of this session is deleted so copies never pile up."""
        check_names(files, limit_mb, limit_env)
        ident = tuple(sorted((getattr(f, "file_id", None) or id(f), f.name, f.size) for f in files))
        if self._last and self._last[0] == ident and self.current(self._last[1].source):
            return self._last[1]
        digest = _digest(files)
        dest = self.folder / digest
        if not (dest / _DONE).is_file():
            part = self.folder / f".part-{uuid.uuid4().hex}"
            part.mkdir(parents=True)
            for f in files:
                (part / f.name).write_bytes(f.getvalue())
            (part / _DONE).write_bytes(b"")
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(part, dest)
        for old in self.folder.iterdir():  # one upload per session: the one in use
            if old.name != digest:
                shutil.rmtree(old, ignore_errors=True)
        names = tuple(sorted(f.name for f in files))
        upload = Upload(digest, names, dest if len(files) > 1 else dest / files[0].name)
        self._last = (ident, upload)
        return upload

    def current(self, source: str) -> Upload | None:
        """The Upload a source names, if it is this session's and still on disk."""
        if self._last and self._last[1].source == source and (self.folder / self._last[1].digest / _DONE).is_file():
            return self._last[1]
        return None

    def close(self) -> None:
        """Delete the session's folder now."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


def find(source: str) -> Upload | None:
    """The live Upload a source "upload:<hash>" names, in any session of this server: the same
    hash is the same content, so whichever session's copy is used, the model is the same."""
    for owner in list(_LIVE.values()):
        upload = owner.current(source)
        if upload is not None:
            return upload
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def sweep(is_active: Callable[[str], bool] | None = None, now: float | None = None) -> list[Path]:
    """Delete upload folders whose session is gone: of this server, sessions no longer alive here
    (no SessionUploads object, or is_active(session id) is False); of another server process, ones
    whose process has exited; and any folder older than STALE_SECONDS. Returns what it deleted."""
    root = upload_root()
    now = time.time() if now is None else now
    gone = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return gone
    for folder in entries:
        pid = folder.name.partition("-")[0]
        try:
            old = now - folder.stat().st_mtime > STALE_SECONDS
        except OSError:
            continue
        if not pid.isascii() or not pid.isdigit():
            dead = old
        elif int(pid) != os.getpid():
            dead = old or not _pid_alive(int(pid))
        else:
            owner = _LIVE.get(folder.name)
            dead = owner is None or (is_active is not None and not is_active(owner.session_id))
        if dead:
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone
