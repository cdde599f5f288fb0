"""The Corpus page's scan form: the corpus a new scan reads (a shipped sample, a path on this server, or an
upload, checked for size before it is read)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ..errors import GptvizError
from ..formats.safe import user_path
from ..scanning import jobs as scan_jobs
from ..scanning import queries
from .widgets import plain

SAMPLE = "shipped sample: "  # the prefix of a sample's entry in the form's Corpus select


def corpus_data(kind: str) -> Path | tuple[str, bytes] | None:
    """The corpus of the form's choice `kind` (drawing its path box or uploader): a path, an upload's (name,
    bytes), or None while there is none (an error shown, if it was refused)."""
    if kind.startswith(SAMPLE):
        return queries.samples_dir() / kind.removeprefix(SAMPLE)
    if kind == "a path on this server":
        typed = st.text_input("Corpus path (.txt, folder of .txt, .jsonl or .parquet)", key="corpus_path")
        try:
            return user_path(typed) if typed else None
        except GptvizError as e:  # a NUL byte: no file has that name
            st.error(plain(e))
            return None
    up = st.file_uploader("Corpus file", type=["txt", "jsonl"], key="corpus_upload")
    if up is None:
        return None
    if up.size > scan_jobs.MAX_UPLOAD_BYTES:
        st.error(f"That file is larger than {scan_jobs.MAX_UPLOAD_BYTES // 2**20} MB; give its path instead.")
        return None
    return up.name, up.getvalue()  # saved by start_scan, once it knows the scan can run
