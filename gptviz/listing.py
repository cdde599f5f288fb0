"""Bounded folder listings: every folder gptviz lists for a person (a run folder, the checkpoints
folder) is read entry by entry with os.scandir and the listing stops after MAX_LISTING_ENTRIES
entries or MAX_LISTING_SECONDS, whichever comes first. A listing that stopped early says so in a
note for the page: what it holds is then only part of the folder."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from . import limits
from .formats.safe import shown_name


@dataclass(frozen=True)
class Entry:
    """One name in a folder, with what scandir knows of it without a stat call on most file systems."""

    folder: Path
    name: str
    is_dir: bool
    is_file: bool

    @property
    def path(self) -> Path:
        return self.folder / self.name  # built when asked: most entries of a big folder never are


@dataclass(frozen=True)
class Listing:
    """The entries read (in the file system's order), whether that was all of them, and a note when not."""

    folder: Path
    entries: tuple[Entry, ...]
    complete: bool
    note: str = ""


def _kind(e: os.DirEntry) -> tuple[bool, bool]:
    try:
        return e.is_dir(), e.is_file()
    except OSError:  # a dangling link or a vanished entry: neither
        return False, False


def list_folder(folder: str | Path, max_entries: int | None = None, max_seconds: float | None = None) -> Listing:
    """At most max_entries entries of folder, read within about max_seconds (default: the bounds in
    gptviz.limits, looked up at each call). Raises OSError (or ValueError for a NUL byte in the
    name) when the folder cannot be opened."""
    folder = Path(folder)
    max_entries = limits.MAX_LISTING_ENTRIES if max_entries is None else max_entries
    max_seconds = limits.MAX_LISTING_SECONDS if max_seconds is None else max_seconds
    entries: list[Entry] = []
    deadline = time.monotonic() + max_seconds
    stopped = ""
    with os.scandir(folder) as it:
        for e in it:
            if len(entries) >= max_entries:
                stopped = f"{max_entries:,} entries"
                break
            if time.monotonic() > deadline:
                stopped = f"{max_seconds:g} s"
                break
            entries.append(Entry(folder, e.name, *_kind(e)))
    note = ""
    if stopped:  # which bound it met, and both bounds, so a person knows what to change
        note = (
            f"{shown_name(str(folder))}: only the first {len(entries):,} entries were read (it stopped at "
            f"{stopped}; gptviz reads at most {max_entries:,} entries or {max_seconds:g} s of a folder), so "
            "what is shown comes from part of it; keep checkpoints in a folder of their own"
        )
    return Listing(folder, tuple(entries), not stopped, note)
