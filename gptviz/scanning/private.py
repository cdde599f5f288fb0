"""Folders and files of gptviz's own in a temp folder that other local users share (the dashboard's scans).

Uploads never touch the disk (uploads.py), but a corpus scan runs as its own process and needs its
corpus and its output on disk. Where they go is made private to this user (0700 folders, 0600
files), and is never followed through a symlink: /tmp is writable by everyone, so a name there may
already be a link another user planted to a folder of theirs (or of ours)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import OutputError


def private_root(path: Path) -> Path:
    """path as a folder only this user can enter: made 0700 if it is not there; refused in one line
    if it is a symlink, not a folder, another user's, or open to others (not made by gptviz)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise OutputError(f"{path}: cannot be made ({e.strerror or e})") from None
    st = os.lstat(path)  # the name itself: a symlink is not followed
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(f"{path}: is a symbolic link; gptviz writes only into a folder of its own")
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{path}: is not a folder")
    if st.st_uid != os.getuid():
        raise OutputError(f"{path}: belongs to another user; set another folder")
    if st.st_mode & 0o077:
        raise OutputError(f"{path}: others can read or write it (mode {st.st_mode & 0o777:o}); make it 0700")
    return path


def private_folder(parent: Path, name: str) -> Path:
    """A new folder (0700) in a private root; FileExistsError if the name is taken."""
    folder = parent / name
    os.mkdir(folder, 0o700)
    return folder


def write_private(path: Path, data: bytes) -> Path:
    """A new file (0600) holding data; never through a symlink, never over a file already there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path
