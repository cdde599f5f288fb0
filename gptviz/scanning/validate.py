"""A scan folder's tables and summary held to the contract (docs/architecture.md, "The corpus scan") once read.

store.py checks that each file is a table of the right columns; this module checks what they hold:
integer columns of integers, ranges (no negative id, layer or position), window ids unique and every
row's window among them, no empty table, finite summary numbers, token ids below any vocabulary
gptviz reads. `against_model` then holds a scan to the model it is shown with. Each failure is one
ScanFolderError line naming the file, so a page never draws a wrong token from a stranger's folder.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..limits import MAX_CONFIG, MAX_DERIVED
from .store import ScanFolderError

INTEGER_COLUMNS = {
    "windows": ("window", "doc", "start", "n_tokens"),
    "tokens": ("window", "position", "token_id"),
    "neurons": ("layer", "neuron", "rank", "window", "position"),
    "heads": ("layer", "head"),
    "head_windows": ("window", "layer", "head"),
    "head_attention": ("window", "layer", "head", "induction_queries"),
    "features": ("feature", "rank", "window", "position", "sae"),  # with saes= only
    "feature_density": ("sae", "feature", "fires"),
    "transcoder_features": ("layer", "feature", "rank", "window", "position"),  # with transcoders= only
    "transcoder_density": ("layer", "feature", "fires"),
}
SAFE_ID = 2**53 - 1  # a page sends an id to the browser as a JavaScript number: exact only up to here
MOST = {  # the largest value an integer column may hold, whatever the model
    "window": SAFE_ID,
    "doc": SAFE_ID,
    "start": SAFE_ID,
    "feature": SAFE_ID,
    "sae": SAFE_ID,
    "fires": SAFE_ID,
    "induction_queries": SAFE_ID,
    "layer": MAX_CONFIG["n_layer"] - 1,
    "head": MAX_CONFIG["n_head"] - 1,
    "neuron": MAX_DERIVED["n_inner"] - 1,
    "position": MAX_CONFIG["block_size"] - 1,
    "token_id": MAX_CONFIG["vocab_size"] - 1,
    "n_tokens": MAX_CONFIG["block_size"],
}
MAX_SECONDS = 1e8  # three years: a larger time is not one a scan took
MAX_ENGINE = 64
MAX_TEXT = 4096  # characters of the summary's checkpoint and data names
MAX_DOC_NAMES = 1000  # a scan keeps the first 1,000 documents' names


def check(folder: Path, tables: dict[str, pd.DataFrame], summary: dict) -> None:
    """Hold a scan's tables and summary to the contract; ScanFolderError naming the file otherwise."""
    for name, df in tables.items():
        _integers(folder / f"{name}.parquet", df, INTEGER_COLUMNS[name])
    windows = tables["windows"]
    w_file = folder / "windows.parquet"
    if windows["window"].duplicated().any():
        first = int(windows.loc[windows["window"].duplicated(), "window"].iloc[0])
        raise ScanFolderError(f"{w_file}: window {first} appears twice; each window id names one window")
    lengths = _token_ids(w_file, windows)
    n_tokens = pd.Series(windows["n_tokens"].to_numpy(), index=windows["window"].to_numpy())
    if not np.array_equal(lengths, windows["n_tokens"].to_numpy()):
        raise ScanFolderError(f"{w_file}: n_tokens differs from the length of token_ids")
    _losses(w_file, windows["loss"])
    for name in ("tokens", "neurons", "head_windows", "head_attention", "features", "transcoder_features"):
        if name in tables:
            _rows_in_windows(folder / f"{name}.parquet", tables[name], n_tokens, first=1 if name == "tokens" else 0)
    _losses(folder / "tokens.parquet", tables["tokens"]["loss"])
    heads = tables["heads"]
    if heads.duplicated(["layer", "head"]).any():
        raise ScanFolderError(f"{folder / 'heads.parquet'}: a (layer, head) appears twice")
    for name in ("neurons", "features", "transcoder_features"):  # at most one row per window: a rank counts windows
        if name in tables:
            _ranks(folder / f"{name}.parquet", tables[name]["rank"], len(windows), summary.get("k"))
    _summary(folder / "summary.json", summary, len(windows))


def _integers(file: Path, df: pd.DataFrame, columns: tuple[str, ...]) -> None:
    if df.empty:
        raise ScanFolderError(f"{file}: has no rows; a scan writes at least one")
    for c in columns:
        if not pd.api.types.is_integer_dtype(df[c]):  # a float or NaN where an id goes
            raise ScanFolderError(f"{file}: column {c} holds {df[c].dtype} values, not integers")
        low, high = int(df[c].min()), int(df[c].max())
        if low < 0:
            raise ScanFolderError(f"{file}: column {c} holds {low}; it is never negative")
        if c in MOST and high > MOST[c]:
            bound = "an id a page shows exactly (2**53 - 1)" if MOST[c] == SAFE_ID else "any model gptviz reads has"
            raise ScanFolderError(f"{file}: column {c} holds {high:,}, more than {bound}")


def _token_ids(file: Path, windows: pd.DataFrame) -> np.ndarray:
    """Each window's number of token ids, after checking every one is a list of integers in range."""
    lengths, lows, highs = [], [], []
    for ids in windows["token_ids"]:  # pyarrow gives each list as a NumPy array
        if not isinstance(ids, np.ndarray) or ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ScanFolderError(f"{file}: token_ids must be lists of integer ids (one holds {_kind(ids)})")
        arr = ids
        lengths.append(len(arr))
        if len(arr):
            lows.append(arr.min())
            highs.append(arr.max())
    if lows and min(lows) < 0:
        raise ScanFolderError(f"{file}: token_ids holds {int(min(lows))}; a token id is never negative")
    if highs and int(max(highs)) > MOST["token_id"]:
        raise ScanFolderError(
            f"{file}: token_ids holds {int(max(highs)):,}, outside any vocabulary gptviz reads "
            f"(at most {MAX_CONFIG['vocab_size']:,} tokens)"
        )
    return np.asarray(lengths, dtype=np.int64)


def _kind(ids: object) -> str:
    if not isinstance(ids, np.ndarray):
        return type(ids).__name__
    kinds = {"f": "floats", "U": "text", "O": "nested lists or text", "b": "booleans"}
    return kinds.get(ids.dtype.kind, str(ids.dtype))


def _losses(file: Path, loss: pd.Series) -> None:
    """A loss is a cross-entropy: never below 0 (NaN stays: a model that made NaN is shown as such)."""
    if not pd.api.types.is_float_dtype(loss) and not pd.api.types.is_integer_dtype(loss):
        raise ScanFolderError(f"{file}: column loss is not numbers")
    if (loss < 0).any():
        raise ScanFolderError(f"{file}: column loss holds {float(loss.min()):.3g}; a loss is never negative")


def _rows_in_windows(file: Path, df: pd.DataFrame, n_tokens: pd.Series, first: int) -> None:
    """Every row's window is one of windows.parquet, and its position inside that window."""
    lengths = n_tokens.reindex(df["window"].to_numpy())
    if lengths.isna().any():
        missing = int(df["window"].to_numpy()[lengths.isna().to_numpy()][0])
        raise ScanFolderError(f"{file}: names window {missing}, which windows.parquet does not hold")
    if "position" in df:
        pos = df["position"].to_numpy()
        if ((pos < first) | (pos >= lengths.to_numpy())).any():
            raise ScanFolderError(f"{file}: a position lies outside its window's tokens")


def _ranks(file: Path, rank: pd.Series, windows: int, k: object) -> None:
    """A rank orders one neuron's (or feature's) top-k contexts, one per window: below k and the windows."""
    most = min(windows, k) if isinstance(k, int) and not isinstance(k, bool) and k > 0 else windows
    high = int(rank.max())
    if high >= most:
        raise ScanFolderError(f"{file}: column rank holds {high:,}; a rank is below {most:,} (k, and the windows)")


def _summary(file: Path, summary: dict, windows: int) -> None:
    for key in ("docs", "windows", "tokens"):
        value = summary[key]
        if not isinstance(value, int) or value < 0:  # store.read refused bools and non-numbers already
            raise ScanFolderError(f"{file}: {key} must be a whole number of at least 0, got {str(value)[:40]}")
    for key, high in (("loss", math.inf), ("seconds", MAX_SECONDS)):
        value = float(summary[key])
        if not math.isfinite(value) or not 0 <= value <= high:
            raise ScanFolderError(f"{file}: {key} is {str(summary[key])[:40]}, not a number a scan gives")
    if summary["windows"] != windows:
        raise ScanFolderError(f"{file}: says {summary['windows']:,} windows but windows.parquet holds {windows:,}")
    if len(summary["engine"]) > MAX_ENGINE:  # shown as it is written (escaped): a name, not a page
        raise ScanFolderError(f"{file}: engine is {len(summary['engine']):,} characters; a scan writes local or ray")
    for key in ("checkpoint", "data"):
        value = summary.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_TEXT):
            raise ScanFolderError(f"{file}: {key} must be a path of at most {MAX_TEXT} characters")
    for key, high in (("window", MOST["n_tokens"]), ("k", SAFE_ID)):  # optional: older scans lack them
        value = summary.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high):
            raise ScanFolderError(f"{file}: {key} must be a whole number in [1, {high:,}], got {str(value)[:40]}")
    for key, most in (("doc_names", MAX_DOC_NAMES), ("saes", MAX_DOC_NAMES), ("tables", 64)):
        value = summary.get(key)
        if value is not None and (
            not isinstance(value, list)
            or len(value) > most
            or not all(isinstance(v, str) and len(v) <= MAX_TEXT for v in value)
        ):
            raise ScanFolderError(f"{file}: {key} must be a list of at most {most:,} names")
    if summary.get("transcoders") is not None:
        _transcoder_record(file, summary["transcoders"])


def _transcoder_record(file: Path, record: object) -> None:
    """The summary's `transcoders` (scanning.transcoder_record): which set the scan read, named well enough
    for a page to find it again."""
    texts = ("path", "name", "fingerprint")
    ok = isinstance(record, dict) and all(
        record.get(key) is None or (isinstance(record.get(key), str) and len(record[key]) <= MAX_TEXT) for key in texts
    )
    layers = record.get("layers") if isinstance(record, dict) else None
    if not ok or not isinstance(layers, list) or len(layers) > MOST["layer"] + 1:
        raise ScanFolderError(f"{file}: transcoders must say the set's path, name, fingerprint and layers")
    if not all(isinstance(l, int) and not isinstance(l, bool) and 0 <= l <= MOST["layer"] for l in layers):
        raise ScanFolderError(f"{file}: transcoders' layers must be layer numbers")


def against_model(scan, config, max_id: int) -> str | None:
    """Why a checked scan cannot be shown with this model (its ids, layers or heads are not the
    model's), or None. max_id: the scan's largest token id (the page caches it)."""
    if max_id >= config.vocab_size:
        return f"This scan holds token id {max_id}, outside this checkpoint's vocabulary: open it with its own model."
    layers, heads = int(scan.heads["layer"].max()) + 1, int(scan.heads["head"].max()) + 1
    layers = max(layers, int(scan.neurons["layer"].max()) + 1)
    if layers > config.n_layer or heads > config.n_head:
        return (
            f"This scan has {layers} layers and {heads} heads but this checkpoint {config.n_layer} and "
            f"{config.n_head}: open it with its own model."
        )
    neuron = int(scan.neurons["neuron"].max())
    if neuron >= config.mlp_dim:
        return (
            f"This scan holds neuron {neuron:,}, but this checkpoint's MLPs have {config.mlp_dim:,} "
            f"(0 … {config.mlp_dim - 1:,}): open it with its own model."
        )
    return None
