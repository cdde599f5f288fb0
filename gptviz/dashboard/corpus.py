"""The Corpus page's logic: shipped samples and scans, a scan run as its own process, and the
slices of a scan the page shows (worst windows, a neuron's contexts, the neurons a token drives).

The dashboard never imports Ray (nor runs a scan in its own process): it starts
`python -m gptviz scan ... --progress-file F` and reads F and the folder the scan writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..errors import GptvizError
from ..figures import corpus as cfig
from ..formats.safe import user_path
from ..scanning import Scan, load_scan
from ..shipped import shipped_dir
from .caches import ModelKey, bundle_for, cached
from .private import private_folder, private_root, write_private

SAMPLES_ENV = "GPTVIZ_SAMPLES_DIR"  # shipped sample corpora (samples/<name>/) and scans (samples/scans/<checkpoint>/)
SCANS_ENV = "GPTVIZ_SCANS_DIR"  # where the page's own scans are written (default: a folder in the temp dir)
MAX_UPLOAD_BYTES = 64 * 2**20
MAX_RUNNING_SCANS = 2  # scans this server runs at once, for all sessions: each loads its model and takes a core
# the page's own folders (a scan each, an uploaded corpus each) kept on disk; a new one removes the oldest,
# so a neighbour uploading corpora again and again cannot fill the disk (at most 20 × 64 MB of uploads)
MAX_KEPT = 20
OWN_FOLDER = re.compile(r"(upload-)?[0-9a-f]{12}")  # the names private_folder is given below


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


def scans_root() -> Path:
    """Where the page's scans go: private to this user (0700), never through a symlink (private.py)."""
    return private_root(Path(os.environ.get(SCANS_ENV) or Path(tempfile.gettempdir()) / "gptviz-scans"))


def scan_version(folder: str | Path) -> tuple[str, float]:
    """(folder, the time of its summary.json): names one version of a scan in the caches below."""
    folder = user_path(folder)  # CheckpointError for a NUL byte
    try:
        stamp = (folder / "summary.json").stat().st_mtime
    except OSError:
        stamp = 0.0
    return str(folder), stamp


@cached(max_entries=4, show_spinner=False)
def scan_at(folder: str, stamp: float) -> Scan:
    """A scan folder, read once per version of its summary.json (scan_version names it; shared
    read-only by every session)."""
    return load_scan(folder)


# What the page shows of a scan version, worked out once for every session and view (read-only): on
# each view the page re-sorted every window, decoded each one's text and rebuilt two figures.
@cached(max_entries=4, show_spinner=False)
def max_token_id(folder: str, stamp: float) -> int:
    return max((max(ids) for ids in scan_at(folder, stamp).windows["token_ids"] if len(ids)), default=0)


@cached(max_entries=4, show_spinner=False)
def ranked_windows(folder: str, stamp: float, model: ModelKey) -> pd.DataFrame:
    """windows_by_loss, the text in the tokens of the sidebar's model."""
    tok = bundle_for(model).tokenizer
    return windows_by_loss(scan_at(folder, stamp), lambda ids: token_texts(tok, ids))


@cached(max_entries=16, show_spinner=False)
def loss_histogram(folder: str, stamp: float, window: int) -> go.Figure:
    windows = scan_at(folder, stamp).windows
    chosen = float(windows.set_index("window")["loss"].get(window, float("nan")))
    return cfig.window_loss_histogram(windows["loss"].to_numpy(), chosen)


@cached(max_entries=16, show_spinner=False)
def head_scores_figure(folder: str, stamp: float, score: str) -> go.Figure:
    scan = scan_at(folder, stamp)
    return cfig.head_score_distribution(head_distribution(scan, score), score)


def token_texts(tok, ids) -> list[str]:
    """Token strings to print in one line: newline as ↵, tab as ⇥ (ids without a tokenizer)."""
    ids = [int(i) for i in ids]
    if tok is None:
        return [f"{i} " for i in ids]
    return [s.replace("\n", "↵").replace("\t", "⇥").replace("\r", "") for s in tok.token_strings(ids)]


# --- a scan as its own process ---------------------------------------------------------------------
_JOBS: dict[str, subprocess.Popen] = {}  # job id -> the scan process this server started
_FOLDERS = threading.Lock()  # the scans folder's pruning, and a new folder with its scan process


@dataclass
class Job:
    id: str
    out: str  # the folder the scan writes
    progress: str  # the JSON file it reports progress in
    log: str  # its stderr (the one-line error, if it fails)


def running(job_id: str | None) -> bool:
    """Whether the scan of this job id still runs."""
    proc = _JOBS.get(job_id) if job_id else None
    return proc is not None and proc.poll() is None


def _live() -> list[subprocess.Popen]:
    """The scan processes of this server still running (a copy: another session may end one meanwhile)."""
    return [proc for proc in list(_JOBS.values()) if proc.poll() is None]


def check_room() -> None:
    """GptvizError when MAX_RUNNING_SCANS already run (a finished one no longer counts): start_scan asks
    before it saves an uploaded corpus, so a refused scan leaves nothing behind."""
    busy = len(_live())
    if busy >= MAX_RUNNING_SCANS:
        raise GptvizError(f"{busy} scans are running on this server already; start this one when one ends")


def start_scan(checkpoint: Path, data: Path | tuple[str, bytes], window: int, k: int, device: str = "cpu") -> Job:
    """Start `python -m gptviz scan` for this checkpoint and corpus (a path, or an upload's (name,
    bytes), saved first); return at once. GptvizError when MAX_RUNNING_SCANS already run (check_room),
    and then nothing is saved."""
    # room checked, upload saved, folders pruned, made and the scan registered at once: another
    # session's prune or upload cannot come in between and remove this scan's corpus
    with _FOLDERS:
        check_room()
        if isinstance(data, tuple):
            data = _save_upload(*data)
        return _start(checkpoint, data, window, k, device)


def _start(checkpoint: Path, data: Path, window: int, k: int, device: str) -> Job:
    job_id = uuid.uuid4().hex[:12]
    folder = private_folder(prune(scans_root(), using=data), job_id)
    job = Job(job_id, str(folder / "scan"), str(folder / "progress.json"), str(folder / "scan.log"))
    # --flag=value: a path that starts with "-" stays a value, never a flag
    cmd = [sys.executable, "-m", "gptviz", "scan", f"--checkpoint={checkpoint}", f"--data={data}"]
    cmd += [f"--out={job.out}", "--window", str(window), "--k", str(k), "--device", device]
    cmd += ["--progress-file", job.progress]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")])
        ),
    }
    with open(job.log, "w") as log:
        _JOBS[job_id] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
    return job


def prune(root: Path, keep: int | None = None, using: Path | None = None) -> Path:
    """Make room for one more of the page's folders in root: remove the oldest (by last change) beyond
    keep - 1 (MAX_KEPT), never one a running scan reads or writes, nor the one holding `using` (the
    corpus of the scan about to start). Only names private_folder gave are touched; root is private
    (0700), so nobody else put them there. Callers hold _FOLDERS. Returns root."""
    keep = MAX_KEPT if keep is None else keep
    try:
        names = [p for p in root.iterdir() if OWN_FOLDER.fullmatch(p.name)]
    except OSError:  # the folder cannot be listed: making the new one says why
        return root
    ages = {}
    for p in names:
        with contextlib.suppress(OSError):  # gone meanwhile, or not a folder of ours after all
            st = p.lstat()
            if stat.S_ISDIR(st.st_mode):
                ages[p] = st.st_mtime
    in_use = [str(arg) for proc in _live() for arg in proc.args]
    in_use += [str(using)] if using is not None else []
    for old in sorted(ages, key=ages.get, reverse=True)[max(keep - 1, 0) :]:
        if not any(f"{old}{os.sep}" in arg for arg in in_use):
            shutil.rmtree(old, ignore_errors=True)
    return root


def save_upload(name: str, data: bytes) -> Path:
    """An uploaded corpus file, kept under a name of ours (only its suffix is the user's)."""
    with _FOLDERS:
        return _save_upload(name, data)


def _save_upload(name: str, data: bytes) -> Path:
    suffix = ".jsonl" if name.lower().endswith(".jsonl") else ".txt"
    folder = private_folder(prune(scans_root()), f"upload-{uuid.uuid4().hex[:12]}")
    return write_private(folder / f"corpus{suffix}", data)


def job_state(job: Job) -> dict:
    """{"state": "running" | "done" | "error", "done", "total", "message"} of a started scan."""
    try:
        state = json.loads(Path(job.progress).read_text())
    except (OSError, ValueError):
        state = {"state": "running", "done": 0, "total": 0}
    proc = _JOBS.get(job.id)
    code = proc.poll() if proc is not None else (0 if state.get("state") == "done" else 1)
    if code is None:  # an error is final only once the process is gone: until then it still holds a core
        return {**state, "state": "running"}
    _JOBS.pop(job.id, None)
    if code == 0 and Path(job.out, "summary.json").is_file():
        return {**state, "state": "done"}
    try:
        lines = [line for line in Path(job.log).read_text().splitlines() if line.startswith("error:")]
    except OSError:
        lines = []
    message = lines[-1].removeprefix("error: ") if lines else state.get("message") or f"the scan exited with {code}"
    return {**state, "state": "error", "message": message}


def stop_scan(job: Job) -> None:
    proc = _JOBS.pop(job.id, None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# --- slices of a scan ------------------------------------------------------------------------------
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


def take_neuron_pick(state, scan: Scan, tok) -> None:
    """Open the neuron of the row clicked in the token's neuron table (its selection, from the last
    run): set the layer and neuron boxes before they are drawn. A selection is taken once."""
    sel = state.get("corpus_token_neurons")
    rows = list(
        getattr(getattr(sel, "selection", None), "rows", None) or (sel or {}).get("selection", {}).get("rows", [])
    )
    token = state.get("corpus_token") or ""
    if not rows or (token, rows[0]) == state.get("_corpus_pick_taken"):
        return
    tid = tok.encode(token, unknown="drop") if tok is not None else []
    found = neurons_for_token(scan, tid[0]) if len(tid) == 1 else pd.DataFrame()
    if rows[0] < len(found):
        row = found.iloc[rows[0]]
        state["corpus_layer"], state["corpus_neuron"] = int(row["layer"]), int(row["neuron"])
    state["_corpus_pick_taken"] = (token, rows[0])


def head_distribution(scan: Scan, score: str) -> pd.DataFrame:
    """Per-window values of one head score, columns layer, head, value (for the distribution figure)."""
    hw = scan.head_windows
    return hw[["layer", "head", score]].rename(columns={score: "value"})
