"""A corpus for a scan: documents read from a path or a list, tokenized, cut into windows.

Each document becomes consecutive windows of `window` tokens (the last may be shorter; a window of
one token predicts nothing and is dropped), so every token of the corpus is in exactly one window
(but for such a dropped last token). Bad data is a ScanDataError of one line naming the file and,
where it helps, the line: nothing is run or written before the whole corpus has been read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import limits
from ..errors import CheckpointError, GptvizError, UnknownCharacterError
from ..formats.safe import read_bytes
from ..listing import list_folder

TEXT_SUFFIXES = (".txt",)


class ScanDataError(GptvizError, ValueError):
    """The corpus cannot be read or tokenized; the message names the file and what to change."""


@dataclass
class Window:
    window: int  # index over the whole corpus, in reading order
    doc: int
    start: int  # position of the window's first token in its document
    ids: np.ndarray  # [n_tokens] int64


@dataclass
class Corpus:
    docs: int
    windows: list[Window]
    names: list[str]  # one per document: where it came from, for messages and the page

    @property
    def tokens(self) -> int:
        return sum(len(w.ids) for w in self.windows)


def _decode(path: Path, data: bytes) -> str:
    if b"\x00" in data[:65536]:
        raise ScanDataError(f"{path}: looks binary (it holds NUL bytes); a corpus is UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ScanDataError(
            f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}); save it as UTF-8"
        ) from None


def _read(path: Path) -> bytes:
    """A corpus file's bytes, sized before they are read: a regular file (not a device such as
    /dev/zero, which never ends) of at most MAX_CORPUS_FILE_BYTES; an empty file is an empty document."""
    try:
        if path.is_file() and path.stat().st_size == 0:
            return b""
        return read_bytes(path, limits.MAX_CORPUS_FILE_BYTES, "corpus file")
    except CheckpointError as e:
        raise ScanDataError(str(e)) from None
    except (OSError, ValueError) as e:
        raise ScanDataError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None


def _jsonl(path: Path) -> Iterator[tuple[str, str]]:
    text = _decode(path, _read(path))
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            raise ScanDataError(f"{path}: line {n} is not JSON; a .jsonl file has one JSON object per line") from None
        if not isinstance(row, dict) or "text" not in row:
            raise ScanDataError(f'{path}: line {n} has no "text" field; every line needs one')
        if not isinstance(row["text"], str):
            raise ScanDataError(f'{path}: line {n}: "text" is a {type(row["text"]).__name__}, not a string')
        yield f"{path.name}:{n}", row["text"]


def _parquet(path: Path) -> Iterator[tuple[str, str]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own types for a file that is not Parquet
        raise ScanDataError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0][:200]})") from None
    if "text" not in pf.schema_arrow.names:
        raise ScanDataError(f'{path}: has no "text" column (it has {", ".join(pf.schema_arrow.names[:8])})')
    row = 0
    for batch in pf.iter_batches(columns=["text"], batch_size=4096):
        for value in batch.column(0).to_pylist():
            row += 1
            if not isinstance(value, str):
                raise ScanDataError(f'{path}: row {row}: "text" is {type(value).__name__}, not a string')
            yield f"{path.name}:{row}", value


def documents(data) -> Iterator[tuple[str, str | Sequence[int] | np.ndarray]]:
    """(name, text or token ids) for every document of `data` (see gptviz.scan)."""
    if isinstance(data, (str, Path)):
        path = Path(data).expanduser()
        if not path.exists():
            raise ScanDataError(f"{path}: no such file or folder")
        if path.is_dir():
            listing = list_folder(path)  # bounded in entries and time, as every folder gptviz lists
            if not listing.complete:
                raise ScanDataError(
                    f"{path}: holds more than gptviz reads of a folder ({limits.MAX_LISTING_ENTRIES:,} entries or "
                    f"{limits.MAX_LISTING_SECONDS:g} s); scan a folder of fewer files"
                )
            files = sorted(
                e.path for e in listing.entries if e.is_file and Path(e.name).suffix.lower() in TEXT_SUFFIXES
            )
            if not files:
                raise ScanDataError(f"{path}: the folder holds no .txt files")
            for f in files:
                yield f.name, _decode(f, _read(f))
        elif path.suffix.lower() == ".jsonl":
            yield from _jsonl(path)
        elif path.suffix.lower() == ".parquet":
            yield from _parquet(path)
        elif path.suffix.lower() in TEXT_SUFFIXES:
            yield path.name, _decode(path, _read(path))
        else:  # the contract's kinds only: a page's path box must not read /etc/passwd or a secrets file
            raise ScanDataError(f"{path}: a corpus is a .txt, .jsonl or .parquet file, or a folder of .txt files")
        return
    if isinstance(data, np.ndarray) and data.ndim == 2:
        data = list(data)
    if not isinstance(data, (list, tuple)):
        raise ScanDataError(
            f"data must be a path, a list of strings or a list of token-id lists, got {type(data).__name__}"
        )
    for i, doc in enumerate(data):
        if not isinstance(doc, (str, list, tuple, np.ndarray)):
            raise ScanDataError(f"document {i}: expected a string or a list of token ids, got {type(doc).__name__}")
        yield f"document {i}", doc


def where(text: str, char: str) -> str:
    """'line L, column C' of the first occurrence of char in text."""
    at = text.index(char)
    line = text.count("\n", 0, at) + 1
    return f"line {line}, column {at - (text.rfind(chr(10), 0, at) + 1) + 1}"


def tokenize(name: str, doc, tokenizer, vocab_size: int) -> np.ndarray:
    if isinstance(doc, str):
        if tokenizer is None:
            raise ScanDataError(f"{name}: is text, but the model has no tokenizer; give token ids instead")
        try:
            ids = tokenizer.encode(doc)
        except UnknownCharacterError as e:
            shown = ", ".join(f"{c!r} ({where(doc, c)})" for c in e.chars[:3])
            more = f" and {len(e.chars) - 3} more" if len(e.chars) > 3 else ""
            raise ScanDataError(
                f"{name}: the tokenizer cannot encode {len(e.chars)} character(s): {shown}{more}; remove them"
            ) from None
        return np.asarray(ids, dtype=np.int64)
    try:
        ids = np.asarray(doc)
    except (ValueError, TypeError):
        raise ScanDataError(f"{name}: token ids must be a flat list of integers") from None
    if ids.size and (ids.ndim != 1 or ids.dtype.kind not in "iu"):
        raise ScanDataError(f"{name}: token ids must be a flat list of integers")
    ids = ids.astype(np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise ScanDataError(f"{name}: token id {bad} is outside the vocabulary [0, {vocab_size - 1}]")
    return ids


def cut(ids: np.ndarray, window: int) -> Iterator[tuple[int, np.ndarray]]:
    """(start, ids) of each window of one document; a 1-token window (nothing to predict) is dropped."""
    for start in range(0, len(ids), window):
        piece = ids[start : start + window]
        if len(piece) > 1:
            yield start, piece


def read_corpus(data, tokenizer, window: int, vocab_size: int) -> Corpus:
    """Every document of data, tokenized and cut into windows; ScanDataError on bad data."""
    windows: list[Window] = []
    names: list[str] = []
    for doc, (name, content) in enumerate(documents(data)):
        names.append(name)
        ids = tokenize(name, content, tokenizer, vocab_size)
        for start, piece in cut(ids, window):
            windows.append(Window(len(windows), doc, start, piece))
    if not windows:
        raise ScanDataError("the corpus has no window of two or more tokens: nothing to predict")
    return Corpus(len(names), windows, names)
