"""The Corpus page's scan form: the corpus a new scan reads (a shipped sample, a path on this server, or an
upload, checked for size before it is read), and the running scan's progress bar with its Cancel button."""

from __future__ import annotations

import time
from pathlib import Path

import streamlit as st

from ...errors import GptvizError
from ...progress import Progress
from ...scanning import jobs as scan_jobs
from ...scanning import queries
from .. import keys
from ..progress import describe
from ..sources.classmode import CORPUS_MB, allowed_path, class_mode
from ..widgets import plain

SAMPLE = "shipped sample: "  # the prefix of a sample's entry in the form's Corpus select


def corpus_data(kind: str) -> Path | tuple[str, bytes] | None:
    """The corpus of the form's choice `kind` (drawing its path box or uploader): a path, an upload's (name,
    bytes), or None while there is none (an error shown, if it was refused)."""
    if kind.startswith(SAMPLE):
        return queries.samples_dir() / kind.removeprefix(SAMPLE)
    if kind == "a path on this server":
        typed = st.text_input("Corpus path (.txt, folder of .txt, .jsonl or .parquet)", key="corpus_path")
        try:
            return allowed_path(typed) if typed else None
        except GptvizError as e:  # a NUL byte, or a class server's closed disk
            st.error(plain(e))
            return None
    limit = upload_bytes()
    up = st.file_uploader("Corpus file", type=["txt", "jsonl"], key="corpus_upload", max_upload_size=limit // 2**20)
    if up is None:
        return None
    if up.size > limit:
        st.error(f"That file is larger than {limit // 2**20} MB; give its path instead.")
        return None
    return up.name, up.getvalue()  # saved by start_scan, once it knows the scan can run


def upload_bytes() -> int:
    """The largest corpus the page takes as an upload: smaller on a class server, whose scans the
    whole room shares (classmode.CORPUS_MB)."""
    return CORPUS_MB * 2**20 if class_mode() else scan_jobs.MAX_UPLOAD_BYTES


def scan_folder(folder: str) -> Path:
    """A scan folder typed or opened on the page: on a class server only one inside its data roots or
    the page's own scans (classmode.allowed_path), else CheckpointError in one line."""
    return allowed_path(folder, extra=(scan_jobs.scans_path(),))


JOB, STARTED, CANCELLED = "corpus_job", "corpus_job_started", "corpus_cancelled"


def _cancel() -> None:
    """The Cancel button: stop the scan's process (its folder is left half written; it is never opened)."""
    raw = st.session_state.pop(JOB, None)
    if raw:
        scan_jobs.stop_scan(scan_jobs.Job(**raw))
        st.session_state[CANCELLED] = True


@st.fragment(run_every=1.0)
def running_scan() -> None:
    """The running scan's progress bar with the time left and a Cancel button, refreshed every second
    until the scan ends; then the page runs again and opens it (or says why it failed)."""
    raw = st.session_state.get(JOB)
    if not raw:
        return
    job = scan_jobs.Job(**raw)
    state = scan_jobs.job_state(job)
    if state["state"] == "running":
        started = st.session_state.setdefault(STARTED, {}).setdefault(job.id, time.monotonic())
        total, done = state.get("total") or 0, state.get("done") or 0
        if total:
            text = "Scanning: " + describe(Progress("windows", done, total, time.monotonic() - started))
        else:
            text = "Starting the scan: loading the model, reading the corpus"
        st.progress(done / total if total else 0.0, text=text)
        st.button("Cancel", key="corpus_cancel", on_click=_cancel)
        return
    st.session_state.pop(JOB)
    if state["state"] == "error":
        st.session_state["corpus_error"] = state.get("message", "the scan failed")
    else:  # shown as an opened folder: the widgets take it before they are drawn, in the next run
        st.session_state[keys.CORPUS_DONE] = job.out
    st.rerun(scope="app")
