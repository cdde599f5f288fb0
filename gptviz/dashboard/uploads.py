"""Uploaded checkpoints: each belongs to one browser session, and none ever touches the disk.

An upload's bytes stay in memory, in a SessionUploads object kept in the session's own
st.session_state, and every loader reads them from there (formats.MemoryPath): there is no
folder in the temp directory, nothing to sweep, and nothing another session or another local
user can name. When Streamlit drops the session, its state goes and the bytes with it.

The page and the caches name an upload by its content hash ("upload:<hash>"), never by a path.
A model key for an upload also carries the session's own secret token (ModelKey.owner), so a
cached model or Trace of one session's upload is out of reach of a key that another session can
build: typing "upload:<hash>" anywhere (a URL, Compare's checkpoint B) opens nothing.
"""

from __future__ import annotations

import hashlib
import io
import re
import secrets
import weakref
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from ..errors import CheckpointError
from ..formats import MemoryPath
from . import keys

UPLOAD_PREFIX = "upload:"  # a source "upload:<hash>" is the session's upload with that content
# owner token -> the session's uploads, held weakly: a closed session's object (and its bytes) is
# freed by the collector, and the token (never shown, never in a URL) is the only way in
_OWNERS: weakref.WeakValueDictionary[str, SessionUploads] = weakref.WeakValueDictionary()


class UploadedFile(Protocol):
    name: str
    size: int

    def getvalue(self) -> bytes: ...


def is_upload(source: str) -> bool:
    return source.startswith(UPLOAD_PREFIX)


@dataclass(frozen=True)
class Upload:
    """One upload held in memory: its content hash, its file names and their bytes."""

    digest: str
    names: tuple[str, ...]
    files: dict[str, bytes] = field(repr=False, compare=False)

    @property
    def source(self) -> str:
        return UPLOAD_PREFIX + self.digest

    @property
    def label(self) -> str:
        """How the page names it: 'upload: ckpt.pt, meta.pkl'."""
        return "upload: " + ", ".join(self.names)

    @property
    def path(self) -> MemoryPath:
        """What to load: the folder of files, or the one file when a single file was uploaded."""
        folder = MemoryPath(self.files, label=self.label)
        return folder / self.names[0] if len(self.names) == 1 else folder

    @cached_property
    def nbytes(self) -> int:
        """What the upload counts against the class's limit: its files unpacked (unpacked_size)."""
        return sum(unpacked_size(name, len(data), data) for name, data in self.files.items())


def _digest(files: Sequence[UploadedFile]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.name):
        h.update(f.name.encode() + b"\0" + str(f.size).encode() + b"\0" + f.getvalue())
    return h.hexdigest()[:32]


ZIPPED = (".npz", ".pt", ".pth", ".bin", ".zip")  # names of files that are zips: an .npz, a torch checkpoint


def unpacked_size(name: str, size: int, data) -> int:
    """What a file of `size` bytes takes once a loader reads it: for a zip (an .npz, a torch
    checkpoint) what its directory says the members unpack to, never less than the file, so a 1 MB
    .npz of compressed zeros counts as the gigabytes it claims. data: the bytes or a seekable file;
    only the directory is read."""
    if not name.endswith(ZIPPED):
        return size
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    try:
        with zipfile.ZipFile(source) as z:
            total = sum(info.file_size for info in z.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError):
        return size  # not a zip: its loader says so in one line
    finally:
        source.seek(0)
    return max(size, total)


def upload_bytes(files: Sequence[UploadedFile]) -> int:
    """What an upload counts against the limits: each file's unpacked size."""
    return sum(unpacked_size(f.name, f.size, f if hasattr(f, "seek") else f.getvalue()) for f in files)


def check_names(files: Sequence[UploadedFile], limit_mb: int, limit_env: str) -> None:
    """Refuse an upload over the size limit (counted unpacked) or with a file name that is not a plain name."""
    total = upload_bytes(files)
    if total > limit_mb * 2**20:
        packed = sum(f.size for f in files)
        how = f" ({packed / 2**20:.0f} MB as sent)" if total > packed else ""
        raise CheckpointError(
            f"the upload is {total / 2**20:.0f} MB once unpacked{how}; the limit is {limit_mb} MB ({limit_env})"
        )
    names = [f.name for f in files]
    for name in names:
        if not re.fullmatch(r"[\w.\-]{1,100}", name, re.ASCII) or name.startswith("."):
            raise CheckpointError(f"{name[:60]!r}: use plain file names (letters, digits, . _ -)")
    if len(set(names)) != len(names):
        raise CheckpointError("two uploaded files have the same name")


class SessionUploads:
    """The upload of one browser session, kept in its st.session_state: one at a time, in memory."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)  # names this session's uploads in the model caches
        self._last: tuple[tuple, Upload] | None = None  # (the files' identity, the upload)
        _OWNERS[self.token] = self

    def save(self, files: Sequence[UploadedFile], limit_mb: int, limit_env: str, total: int | None = None) -> Upload:
        """Keep the files' bytes as this session's upload and return it. The same files (same
        upload ids) are not hashed again; a new upload replaces the last one, so at most one upload
        per session is held. total: what all sessions' uploads may hold together (a class server);
        over it the upload is refused and this session's last one dropped."""
        check_names(files, limit_mb, limit_env)
        if total is not None and held_bytes(but=self) + upload_bytes(files) > total:
            self.close()
            raise CheckpointError(
                f"this server holds {held_bytes() / 2**20:.0f} MB of uploads already, its limit for the whole "
                f"class is {total / 2**20:.0f} MB; pick a shipped checkpoint"
            )
        ident = tuple(sorted((getattr(f, "file_id", None) or id(f), f.name, f.size) for f in files))
        if self._last and self._last[0] == ident:
            return self._last[1]
        digest = _digest(files)
        if self._last and self._last[1].digest == digest:
            upload = self._last[1]
        else:
            data = {f.name: f.getvalue() for f in files}
            upload = Upload(digest, tuple(sorted(data)), data)
        self._last = (ident, upload)
        return upload

    def current(self, source: str) -> Upload | None:
        """The Upload a source names, if it is this session's current one."""
        if self._last and self._last[1].source == source:
            return self._last[1]
        return None

    def held(self) -> Upload | None:
        """The upload this session holds, if any."""
        return self._last[1] if self._last else None

    def close(self) -> None:
        """Drop the upload now (its bytes go once no cached model load is reading them)."""
        self._last = None


def session_owner(key: str) -> SessionUploads:
    """The upload owner kept in this browser session's state under `key` (made on first use): its
    bytes go when the session does. The checkpoint and the SAE each have their own, so one upload
    does not replace the other."""
    import streamlit as st  # this module's records are also read outside a script run (caches.py)

    owner = st.session_state.get(key)
    if not isinstance(owner, SessionUploads):
        owner = st.session_state[key] = SessionUploads()
    return owner


UPLOADERS = ("ckpt_upload", "sae_upload")  # the sidebar's file_uploader keys: the checkpoint's, the SAE's


def carry_over() -> None:
    """Before st.switch_page, which empties every file_uploader: each uploader's files stay in use on the
    next page (carried_over) until the person changes that uploader's files (forget_carried)."""
    import streamlit as st

    st.session_state[keys.UPLOADS_CARRIED] = set(UPLOADERS)


def carried_over(uploader: str, owner: SessionUploads) -> Upload | None:
    """The upload an empty uploader held before a page switch emptied it (carry_over); None if the
    person has changed its files since, or it held none."""
    import streamlit as st

    return owner.held() if uploader in st.session_state.get(keys.UPLOADS_CARRIED, ()) else None


def carried_note(upload: Upload) -> str:
    """What the sidebar says under an uploader a page switch emptied on the server (the browser may still
    list its files) whose upload is still in use."""
    return f"In use: {', '.join(upload.names)}, uploaded on the page before."


def forget_carried(uploader: str) -> None:
    """The uploader's on_change: files added or removed by hand are what it holds from now on."""
    import streamlit as st

    st.session_state.get(keys.UPLOADS_CARRIED, set()).discard(uploader)


def held_bytes(but: SessionUploads | None = None) -> int:
    """The bytes every live session's upload holds (but one's own, when it replaces it)."""
    return sum(o._last[1].nbytes for o in list(_OWNERS.values()) if o is not but and o._last)


def owned(token: str, source: str) -> Upload | None:
    """The upload a source names in the session whose token this is; None for any other session,
    a session that has ended, or a token that was never handed out."""
    owner = _OWNERS.get(token) if token else None
    return owner.current(source) if owner is not None else None
