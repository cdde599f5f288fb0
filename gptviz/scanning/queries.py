"""Pure queries over a Scan, as the Corpus page and a notebook ask them: the shipped samples and scans,
worst windows, a window's tokens and losses, a neuron's contexts, the neurons a token drives. No Streamlit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..formats.safe import user_path
from ..shipped import shipped_dir
from . import Scan

SAMPLES_ENV = "GPTVIZ_SAMPLES_DIR"  # another samples/ folder (read by shipped_dir): samples/<name>/, samples/scans/


def samples_dir() -> Path:
    return shipped_dir("samples")


def sample_corpora() -> list[str]:
    root = samples_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "scans" and any(p.glob("*.txt")))


def shipped_scan(source: str) -> Path | None:
    """The scan shipped for a shipped checkpoint (samples/scans/<name>), if there is one."""
    folder = samples_dir() / "scans" / source
    return folder if (folder / "summary.json").is_file() else None


def shipped_scans() -> list[Path]:
    """Every scan shipped under samples/scans/, by name."""
    try:
        return sorted(p for p in (samples_dir() / "scans").iterdir() if (p / "summary.json").is_file())
    except OSError:  # no scans folder: none shipped
        return []


def finished_scans(root: Path) -> list[Path]:
    """The scans the Corpus page ran under root (root/<job>/scan, jobs.py) that wrote their
    summary.json, newest first."""
    try:
        found = [p / "scan" for p in root.iterdir() if (p / "scan" / "summary.json").is_file()]
    except OSError:  # not made yet, or not readable: the page has run none here
        return []
    return sorted(found, key=lambda p: scan_version(p)[1], reverse=True)


def scan_version(folder: str | Path) -> tuple[str, float]:
    """(folder, the time of its summary.json): names one version of a scan (the dashboard caches by it)."""
    folder = user_path(folder)  # CheckpointError for a NUL byte
    try:
        stamp = (folder / "summary.json").stat().st_mtime
    except OSError:
        stamp = 0.0
    return str(folder), stamp


def token_texts(tok, ids) -> list[str]:
    """Token strings to print in one line: newline as ↵, tab as ⇥ (ids without a tokenizer)."""
    ids = [int(i) for i in ids]
    if tok is None:
        return [f"{i} " for i in ids]
    return [s.replace("\n", "↵").replace("\t", "⇥").replace("\r", "") for s in tok.token_strings(ids)]


def window_ids(scan: Scan, window: int) -> np.ndarray:
    row = scan.windows.loc[scan.windows["window"] == window]
    return np.asarray(row.iloc[0]["token_ids"], dtype=np.int64) if len(row) else np.zeros(0, np.int64)


def window_losses(scan: Scan, window: int, n: int) -> np.ndarray:
    """Loss of each token of the window (NaN at position 0, which nothing predicts)."""
    out = np.full(n, np.nan)
    rows = scan.tokens.loc[scan.tokens["window"] == window]
    pos = rows["position"].to_numpy()
    ok = (pos >= 0) & (pos < n)
    out[pos[ok]] = rows["loss"].to_numpy()[ok]
    return out


def short_length(scan: Scan) -> int:
    """Windows of fewer tokens than this are "short" (a document's tail): a quarter of the scan's window."""
    full = int(scan.summary.get("window") or scan.windows["n_tokens"].max() or 2)
    return max(2, full // 4)


def windows_by_loss(scan: Scan, display) -> pd.DataFrame:
    """Every window, the worst first, with its document's name, whether it is short (a document's
    tail, whose loss is a mean of few tokens) and the start of its text."""
    df = scan.windows.sort_values("loss", ascending=False)[["window", "doc", "start", "n_tokens", "loss"]]
    names = scan.summary.get("doc_names") or []
    df.insert(2, "document", [str(names[d]) if 0 <= d < len(names) else f"document {d}" for d in df["doc"]])
    df.insert(5, "short", df["n_tokens"] < short_length(scan))
    ids = scan.windows.set_index("window")["token_ids"]
    df["text"] = ["".join(display(list(ids[w])[:48])) for w in df["window"]]
    return df.reset_index(drop=True)


def neuron_contexts(scan: Scan, layer: int, neuron: int) -> pd.DataFrame:
    """A neuron's top-k rows (rank, value, window, position), rank 0 first."""
    n = scan.neurons
    return n.loc[(n["layer"] == layer) & (n["neuron"] == neuron)].sort_values("rank").reset_index(drop=True)


def _top_rows(table: pd.DataFrame, column: str, label: int, feature: int) -> pd.DataFrame:
    rows = table.loc[(table[column] == label) & (table["feature"] == feature)]
    return rows[["rank", "value", "window", "position"]].sort_values("rank").reset_index(drop=True)


def feature_contexts(scan: Scan, feature: int, sae: int = 0) -> pd.DataFrame:
    """An SAE feature's top-k rows (rank, value, window, position), rank 0 first: of saes[sae] in a scan
    made with saes=."""
    return _top_rows(scan.features, "sae", sae, feature)


def transcoder_contexts(scan: Scan, layer: int, feature: int) -> pd.DataFrame:
    """A transcoder feature's top-k rows (rank, value, window, position), rank 0 first, in a scan made
    with transcoders= (its layer's transcoder): empty where it never fired, or the scan did not read that layer."""
    return _top_rows(scan.transcoder_features, "layer", layer, feature)


def transcoder_density(scan: Scan, layer: int, feature: int) -> float | None:
    """The share of the scan's tokens on which a transcoder feature fires; None when the scan has no such feature."""
    d = scan.transcoder_density
    row = d.loc[(d["layer"] == layer) & (d["feature"] == feature), "density"]
    return float(row.iloc[0]) if len(row) else None


def scans_of_transcoders(fingerprint: str, folders) -> list[Path]:
    """The scan folders among `folders` made with the transcoder set of this fingerprint
    (TranscoderSet.fingerprint, which the scan's summary records), in the order given. Only each
    summary.json is read (sized first); a folder that is not a scan, or unreadable, is passed over."""
    from .store import ScanFolderError, read_summary

    found = []
    for folder in folders:
        try:
            summary = read_summary(Path(folder))
        except ScanFolderError:
            continue
        record = summary.get("transcoders") if isinstance(summary, dict) else None
        if isinstance(record, dict) and record.get("fingerprint") == fingerprint:
            found.append(Path(folder))
    return found


def context(scan: Scan, window: int, position: int) -> tuple[list[int], int]:
    """The context of a position: its whole window (ids; what the model read, and what followed) and
    where the position falls in it."""
    return window_ids(scan, window).tolist(), position


def neurons_for_token(scan: Scan, token_id: int, top: int = 50) -> pd.DataFrame:
    """The neurons whose strongest contexts peak on this token: how many of their top-k do, and the
    largest such value; strongest first."""
    w, n = scan.windows, scan.neurons
    lengths = w["n_tokens"].to_numpy()
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    flat = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in w["token_ids"]]) if len(w) else np.zeros(0)
    row = pd.Series(np.arange(len(w)), index=w["window"].to_numpy()).reindex(n["window"].to_numpy()).to_numpy()
    pos = n["position"].to_numpy()
    known = ~np.isnan(row)
    r = np.where(known, row, 0).astype(np.int64)
    ok = known & (pos >= 0) & (pos < lengths[r])
    hit = np.zeros(len(n), dtype=bool)
    hit[ok] = flat[offsets[r[ok]] + pos[ok]] == token_id
    on = n.loc[hit]
    if on.empty:
        return pd.DataFrame(columns=["layer", "neuron", "contexts_on_token", "max_value"])
    g = on.groupby(["layer", "neuron"]).agg(contexts_on_token=("rank", "size"), max_value=("value", "max"))
    return g.reset_index().sort_values(["contexts_on_token", "max_value"], ascending=False).head(top)


def head_distribution(scan: Scan, score: str) -> pd.DataFrame:
    """Per-window values of one head score, columns layer, head, value (for the distribution figure)."""
    hw = scan.head_windows
    return hw[["layer", "head", score]].rename(columns={score: "value"})
