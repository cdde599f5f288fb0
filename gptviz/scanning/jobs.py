"""A corpus scan run as its own process: starting it, its state, stopping it, and the folders it writes
(pruned so a neighbour starting scans again and again cannot fill the disk). No Streamlit: the dashboard's
Corpus page and a notebook use the same functions.

The dashboard never imports Ray (nor runs a scan in its own process): it starts
`gptviz scan ... --progress-file F` and reads F and the folder the scan writes.
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

from ..errors import GptvizError
from .private import private_folder, private_root, write_private

SCANS_ENV = "GPTVIZ_SCANS_DIR"  # where the page's own scans are written (default: a folder in the temp dir)
MAX_UPLOAD_BYTES = 64 * 2**20
MAX_RUNNING_SCANS = 2  # scans this server runs at once, for all sessions: each loads its model and takes a core
# the page's own folders (a scan each, an uploaded corpus each) kept on disk; a new one removes the oldest,
# so a neighbour uploading corpora again and again cannot fill the disk (at most 20 × 64 MB of uploads)
MAX_KEPT = 20
OWN_FOLDER = re.compile(r"(upload-)?[0-9a-f]{12}")  # the names private_folder is given below


def scans_path() -> Path:
    """Where the page's scans go (scans_root makes and checks it)."""
    return Path(os.environ.get(SCANS_ENV) or Path(tempfile.gettempdir()) / "gptviz-scans")


def scans_root() -> Path:
    """Where the page's scans go: private to this user (0700), never through a symlink (scanning/private.py)."""
    return private_root(scans_path())


_JOBS: dict[str, subprocess.Popen] = {}  # job id -> the scan process this server started
_FOLDERS = threading.Lock()  # the scans folder's pruning, and a new folder with its scan process
_CLIENTS: dict[str, str] = {}  # job id -> the client (its address) that started it


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


def check_room(client: str = "") -> None:
    """GptvizError when MAX_RUNNING_SCANS already run (a finished one no longer counts), or when this
    client (an address; "" for none) already runs one: start_scan asks before it saves an uploaded
    corpus, so a refused scan leaves nothing behind."""
    busy = len(_live())
    if busy >= MAX_RUNNING_SCANS:
        raise GptvizError(f"{busy} scans are running on this server already; start this one when one ends")
    if client and any(c == client and running(i) for i, c in list(_CLIENTS.items())):
        raise GptvizError("a scan from this computer is still running on this class server; wait for it to end")


def start_scan(
    checkpoint: Path,
    data: Path | tuple[str, bytes],
    window: int,
    k: int,
    device: str = "cpu",
    client: str = "",
    transcoders: str | Path | None = None,
) -> Job:
    """Start `gptviz scan` for this checkpoint and corpus (a path, or an upload's (name,
    bytes), saved first), reading a transcoder set's features too when `transcoders` names its folder;
    return at once. GptvizError when MAX_RUNNING_SCANS already run, or this
    client runs one (check_room; a class server passes the address), and then nothing is saved."""
    # room checked, upload saved, folders pruned, made and the scan registered at once: another
    # session's prune or upload cannot come in between and remove this scan's corpus
    with _FOLDERS:
        check_room(client)
        if isinstance(data, tuple):
            data = _save_upload(*data)
        job = _start(checkpoint, data, window, k, device, transcoders)
        for old in [i for i in list(_CLIENTS) if not running(i)]:  # ended scans: their clients may start anew
            _CLIENTS.pop(old, None)
        _CLIENTS[job.id] = client
        return job


def _start(
    checkpoint: Path, data: Path, window: int, k: int, device: str, transcoders: str | Path | None = None
) -> Job:
    job_id = uuid.uuid4().hex[:12]
    folder = private_folder(prune(scans_root(), using=data), job_id)
    job = Job(job_id, str(folder / "scan"), str(folder / "progress.json"), str(folder / "scan.log"))
    # --flag=value: a path that starts with "-" stays a value, never a flag
    cmd = [sys.executable, "-m", "gptviz", "scan", f"--checkpoint={checkpoint}", f"--data={data}"]
    cmd += [f"--out={job.out}", "--window", str(window), "--k", str(k), "--device", device]
    cmd += ["--progress-file", job.progress] + ([f"--transcoders={transcoders}"] if transcoders else [])
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
    ages: dict[Path, float] = {}
    for p in names:
        with contextlib.suppress(OSError):  # gone meanwhile, or not a folder of ours after all
            st = p.lstat()
            if stat.S_ISDIR(st.st_mode):
                ages[p] = st.st_mtime
    in_use = [str(arg) for proc in _live() for arg in (proc.args if isinstance(proc.args, list) else [proc.args])]
    in_use += [str(using)] if using is not None else []
    for old in sorted(ages, key=ages.__getitem__, reverse=True)[max(keep - 1, 0) :]:
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
