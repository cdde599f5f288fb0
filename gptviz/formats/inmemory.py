"""A checkpoint folder held in memory: uploaded files that never touch the server's disk.

`MemoryPath` is a read-only, flat folder of named bytes that answers the few pathlib calls the
loaders make (`/`, name, parent, suffix, exists, is_file, is_dir, stat, iterdir, glob, open,
read_bytes, read_text), so every format loads from it unchanged: `gptviz.load(MemoryPath(files))`.
The readers that need a real file on disk (safetensors' safe_open, the tokenizers library's
from_file) ask `on_disk(path)` and read the bytes instead when it is False.

The folder prints as its label (e.g. "upload: ckpt.pt, meta.pkl") and a file in it as its bare
name, so a message about an upload names the files the person chose and no server path.
"""

from __future__ import annotations

import fnmatch
import io
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path


class MemoryPath:
    """The folder (name "") or one file of a read-only set of in-memory files."""

    def __init__(self, files: Mapping[str, bytes], name: str = "", label: str = "memory") -> None:
        for key in files:  # a flat folder: file names only, the way an upload names them
            if not key or "/" in key or "\0" in key or key in (".", ".."):
                raise ValueError(f"{key!r} is not a plain file name")
        self._files = dict(files)
        self._name = name
        self._label = label

    # --- naming ---------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def suffix(self) -> str:
        return Path(self._name).suffix if self._name else ""

    @property
    def parent(self) -> MemoryPath:
        return MemoryPath(self._files, "", self._label)

    def __truediv__(self, name: str) -> MemoryPath:
        # below a file, as for a Path, a name that exists nowhere ("ckpt.pt/config.json")
        return MemoryPath(self._files, f"{self._name}/{name}" if self._name else str(name), self._label)

    def __str__(self) -> str:
        return self._name or self._label

    def __repr__(self) -> str:
        return f"MemoryPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemoryPath) and other._files is self._files and other._name == self._name

    def __hash__(self) -> int:
        return hash((id(self._files), self._name))

    # --- what is there --------------------------------------------------------------------------
    def is_dir(self) -> bool:
        return not self._name

    def is_file(self) -> bool:
        return self._name in self._files

    def exists(self) -> bool:
        return self.is_dir() or self.is_file()

    def stat(self) -> os.stat_result:
        """Mode and size as os.stat gives them (a private regular file, or the folder)."""
        if self.is_dir():
            return os.stat_result((stat.S_IFDIR | 0o500, 0, 0, 1, 0, 0, 0, 0, 0, 0))
        if not self.is_file():
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return os.stat_result((stat.S_IFREG | 0o400, 0, 0, 1, 0, 0, len(self._files[self._name]), 0, 0, 0))

    def iterdir(self) -> Iterator[MemoryPath]:
        if not self.is_dir():
            raise NotADirectoryError(f"{self}: not a folder")
        return (self / name for name in sorted(self._files))

    def glob(self, pattern: str) -> Iterator[MemoryPath]:
        return (p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern))

    # --- reading --------------------------------------------------------------------------------
    def read_bytes(self) -> bytes:
        self.stat()  # FileNotFoundError for a name that is not there
        if self.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(self))
        return self._files[self._name]

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def open(self, mode: str = "rb") -> io.BytesIO:
        if mode != "rb":
            raise PermissionError(13, "read-only: in-memory files open only with 'rb'", str(self))
        return io.BytesIO(self.read_bytes())  # shares the bytes until written, which nothing does


def on_disk(path: object) -> bool:
    """Whether path names a file on this machine's disk (a str or Path), not one held in memory."""
    return isinstance(path, (str, os.PathLike))
