"""A scan on disk: windows, tokens, neurons, heads (and head_windows) .parquet plus summary.json.

A scan folder is untrusted input like a checkpoint (someone else's, or a stale one): every file is
sized before it is read, its columns are checked against the tables' own, and anything wrong is a
ScanFolderError of one line naming the file. Writing goes to a temporary folder beside `out` that
replaces the files only once all are written, so a failure leaves the previous scan as it was.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from ..analysis.heads import SCORES
from ..errors import GptvizError
from ..formats.safe import size_text
from ..limits import GiB, MiB
from .reduce import EXTRAS

# Each table's columns, in order (the contract's; head_windows is the per-window form of heads).
COLUMNS = {
    "windows": ("window", "doc", "start", "n_tokens", "loss", "token_ids"),
    "tokens": ("window", "position", "token_id", "loss"),
    "neurons": ("layer", "neuron", "rank", "value", "window", "position"),
    "heads": ("layer", "head", *SCORES),
    "head_windows": ("window", "layer", "head", *SCORES),
    "head_attention": ("window", "layer", "head", *EXTRAS, "induction_queries"),
    "features": ("feature", "rank", "value", "window", "position", "sae"),  # with saes=: optional
    "feature_density": ("sae", "feature", "fires", "density"),
    "transcoder_features": ("layer", "feature", "rank", "value", "window", "position"),  # with transcoders=
    "transcoder_density": ("layer", "feature", "fires", "density"),
}
REQUIRED = ("windows", "tokens", "neurons", "heads")
# histograms; HeadVis; with saes=; with transcoders= (older scans lack the later ones)
OPTIONAL = (
    "head_windows",
    "head_attention",
    "features",
    "feature_density",
    "transcoder_features",
    "transcoder_density",
)
SUMMARY_KEYS = ("docs", "windows", "tokens", "loss", "seconds", "engine")
TOGETHER = {
    "head_attention": "head_windows",
    "features": "feature_density",
    "feature_density": "features",
    "transcoder_features": "transcoder_density",
    "transcoder_density": "transcoder_features",
}
MAX_TABLE_BYTES = 4 * GiB  # a table file larger than this is refused before it is read
MAX_SUMMARY_BYTES = 1 * MiB
TABLE_EXPANSION = 64  # a table's rows, as numbers in memory, may take this many times its file ...
TABLE_ALLOWANCE = 64 * MiB  # ... plus this (the shipped scan's tables take at most 6x theirs)


class ScanFolderError(GptvizError, OSError):
    """A scan folder cannot be read or written; the message names the file."""


def estimate_bytes(
    tokens: int, windows: int, n_layer: int, n_neurons: int, n_head: int, k: int, n_features: int = 0
) -> int:
    """A generous upper bound of what write() puts on disk (uncompressed), from the corpus's sizes.
    n_features: the features of every SAE and transcoder read in the scan."""
    return (
        tokens * (8 + 8 + 8 + 4)  # tokens.parquet: window, position, token_id, loss
        + tokens * 8  # windows.parquet: token_ids
        + windows * 48  # windows.parquet: the other columns
        + n_layer * n_neurons * k * 32  # neurons.parquet
        + windows * n_layer * n_head * 112  # head_windows.parquet, head_attention.parquet
        + n_features * (k * 48 + 32)  # the feature tables: k contexts each, and its density
        + MiB  # summary, heads, Parquet's own metadata
    )


def check_space(out: Path, needed: int) -> None:
    """ScanFolderError when the disk under out has less free space than needed (checked before the
    model runs, so a corpus too large for the disk costs nothing)."""
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise ScanFolderError(
            f"{out}: the scan needs about {size_text(needed)} but the disk has {size_text(free)} free; "
            "choose another --out or a smaller corpus"
        )


def write(out: Path, tables: dict[str, pd.DataFrame], summary: dict) -> None:
    """Write every table and summary.json into out (made if missing), replacing a previous scan's."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ScanFolderError(f"{out}: is a file; a scan is written into a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".scan-", dir=out))
    except OSError as e:
        raise ScanFolderError(f"{out}: cannot be written ({e.strerror or e}); choose another --out") from None
    try:
        for name, df in tables.items():
            df.to_parquet(tmp / f"{name}.parquet", index=False)
        summary = {**summary, "tables": sorted(tables)}  # read() checks that each is there
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2))
        for f in tmp.iterdir():
            f.replace(out / f.name)
    except OSError as e:
        raise ScanFolderError(f"{out}: cannot be written ({e.strerror or e}); choose another --out") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _size(path: Path, limit: int) -> int:
    try:
        st = path.stat()
    except OSError:
        raise ScanFolderError(
            f"{path}: missing; a scan folder holds {', '.join(REQUIRED)} .parquet and summary.json"
        ) from None
    if not path.is_file():
        raise ScanFolderError(f"{path}: is not a file")
    if st.st_size > limit:
        raise ScanFolderError(f"{path}: {size_text(st.st_size)} is more than gptviz reads ({size_text(limit)})")
    return st.st_size


def read_table(path: Path, name: str) -> pd.DataFrame:
    import pyarrow.parquet as pq

    size = _size(path, MAX_TABLE_BYTES)
    try:
        schema = pq.read_schema(path)
        rows = pq.read_metadata(path).num_rows
    except Exception as e:  # pyarrow's own error types for a file that is not Parquet
        raise ScanFolderError(f"{path}: not a Parquet file ({str(e).splitlines()[0][:160]})") from None
    # the rows it claims, as 8-byte numbers in memory, against its size: run-length encoding lets a few
    # hundred KB claim millions of rows, and the table would live in a cache every session shares
    held = rows * len(COLUMNS[name]) * 8
    if held > TABLE_EXPANSION * size + TABLE_ALLOWANCE:
        raise ScanFolderError(
            f"{path}: refused: its {rows:,} rows would take {size_text(held)} in memory from {size_text(size)} "
            f"on disk, more than gptviz allows ({TABLE_EXPANSION}x the file plus {size_text(TABLE_ALLOWANCE)}); "
            "a scan gptviz wrote takes a few times its size"
        )
    missing = [c for c in COLUMNS[name] if c not in schema.names]
    if missing:
        raise ScanFolderError(f"{path}: lacks the column(s) {', '.join(missing)}; is this a gptviz scan?")
    try:
        df = pq.read_table(path, columns=list(COLUMNS[name])).to_pandas()
    except Exception as e:
        raise ScanFolderError(f"{path}: cannot be read ({str(e).splitlines()[0][:160]})") from None
    if name != "windows":
        bad = [c for c in COLUMNS[name] if not pd.api.types.is_numeric_dtype(df[c])]
        if bad:
            raise ScanFolderError(f"{path}: column {bad[0]} is not numeric")
    return df


def read_summary(folder: Path) -> object:
    """A scan folder's summary.json as parsed, sized before it is read; ScanFolderError if it is missing,
    too large or not JSON. What it holds is the caller's to check."""
    summary_path = Path(folder) / "summary.json"
    _size(summary_path, MAX_SUMMARY_BYTES)
    try:
        return json.loads(summary_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError, OSError):
        raise ScanFolderError(f"{summary_path}: not readable JSON") from None


def read(folder: Path) -> tuple[dict[str, pd.DataFrame], dict]:
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ScanFolderError(f"{folder}: no such folder; give the folder a scan wrote (--out)")
    summary_path = folder / "summary.json"
    summary = read_summary(folder)
    if not isinstance(summary, dict) or any(k not in summary for k in SUMMARY_KEYS):
        raise ScanFolderError(f"{summary_path}: a scan summary has the keys {', '.join(SUMMARY_KEYS)}")
    numbers = ("docs", "windows", "tokens", "loss", "seconds")
    bad = [k for k in numbers if isinstance(summary[k], bool) or not isinstance(summary[k], (int, float))]
    if bad or not isinstance(summary["engine"], str):
        raise ScanFolderError(f"{summary_path}: {(bad or ['engine'])[0]} has a value of the wrong type")
    named = summary.get("tables")  # what the scan wrote (older scans do not say)
    for name in named if isinstance(named, list) else ():
        if name in COLUMNS and not (folder / f"{name}.parquet").exists():
            raise ScanFolderError(f"{folder / (name + '.parquet')}: missing, but summary.json says the scan wrote it")
    tables = {name: read_table(folder / f"{name}.parquet", name) for name in REQUIRED}
    for name in OPTIONAL:
        if (folder / f"{name}.parquet").exists():
            tables[name] = read_table(folder / f"{name}.parquet", name)
    for name, needs in TOGETHER.items():  # written together since the first scan that wrote either
        if name in tables and needs not in tables:
            raise ScanFolderError(f"{folder / (needs + '.parquet')}: missing, but {name}.parquet is there")
    return tables, summary
