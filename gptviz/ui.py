"""The one bridge between the library and Streamlit: cached loading and running, the shared
sidebar, the state in the URL, error display and downloads. Nothing else in gptviz imports Streamlit.

State: the choices (checkpoint, device, prompt, layer, head, position) live in st.session_state
under widget keys and are mirrored into st.query_params, so a view can be bookmarked. Tensors
never enter the session state: a page asks `view()` for the current View, whose bundle and Trace
come from process-wide caches.
"""

from __future__ import annotations

import contextvars
import hashlib
import io
import logging
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
import torch

import gptviz
from gptviz import analysis, figures
from gptviz.checkpoint import Bundle, LoadReport, finish, resolve_device
from gptviz.errors import GptvizError, PromptError, UnknownCharacterError

log = logging.getLogger("gptviz.ui")

CHECKPOINTS_ENV = "GPTVIZ_CHECKPOINTS_DIR"  # folder of shipped checkpoints (default: ./checkpoints)
DEFAULT_ENV = "GPTVIZ_DEFAULT_CHECKPOINT"  # name (in that folder), path, or "demo"
UPLOAD_LIMIT_ENV = "GPTVIZ_MAX_UPLOAD_MB"
DEFAULT_NAME = "shakespeare-char"
DEMO = "demo"  # a random-weight model built in memory: the fallback when nothing is shipped
LOCAL, UPLOAD = "local path…", "upload…"
PRESET_PROMPT = "First Citizen: Before we proceed any further, hear me speak."
DEVICES = ("cpu", "cuda", "mps")
PRESENTATION_ROOT_PX = 21  # Streamlit's default root font is 16 px
CHECKPOINT_HELP = (
    "gptviz: config.json + model.safetensors (+ tokenizer.json). nanoGPT: ckpt.pt (+ meta.pkl). "
    "Hugging Face GPT-2: config.json + model.safetensors or pytorch_model.bin + vocab.json + merges.txt "
    "(or tokenizer.json). Nothing is unpickled beyond plain tensors."
)
URL_KEYS = ("checkpoint", "device", "prompt", "layer", "head", "position")

# How many times the model really ran, per (checkpoint, device): tests read it to prove that
# widgets which only change the view never re-run the model.
RUN_CALLS: Counter = Counter()


# --- checkpoints ----------------------------------------------------------------------------
def checkpoints_dir() -> Path:
    return Path(os.environ.get(CHECKPOINTS_ENV) or Path(__file__).resolve().parents[1] / "checkpoints")


def shipped() -> list[str]:
    """Names of the checkpoints shipped in checkpoints_dir(), one folder each."""
    root = checkpoints_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and any(p.iterdir()))


def default_checkpoint() -> str:
    names = shipped()
    override = os.environ.get(DEFAULT_ENV)
    if override:
        return override
    if DEFAULT_NAME in names:
        return DEFAULT_NAME
    return names[0] if names else DEMO


def checkpoint_path(source: str) -> Path:
    """A shipped name -> its folder; anything else is a path as given."""
    return checkpoints_dir() / source if source in shipped() else Path(source).expanduser()


def demo_bundle(device: str) -> Bundle:
    """A small random-weight model over printable ASCII, built in memory: every view works on it,
    none of its predictions mean anything."""
    chars = sorted({chr(c) for c in range(32, 127)} | {"\n", "\t"})
    config = gptviz.GPTConfig(vocab_size=len(chars), block_size=256, n_layer=4, n_head=4, n_embd=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = gptviz.GPT(config)
    report = LoadReport(path="(built in memory)", format="random weights (demo)", tokenizer="char")
    card = {"note": "random weights: no shipped checkpoint was found; the views work, the predictions mean nothing"}
    return Bundle(finish(model, report, torch.device(device)), gptviz.CharTokenizer(chars), report, card)


def version(source: str) -> str:
    """When the checkpoint's files last changed: part of every cache key, so a checkpoint
    rewritten in place (a training run saving as it goes) is loaded again, not served stale."""
    if source == DEMO:
        return ""
    path = checkpoint_path(source)
    try:
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        return ",".join(f"{p.name}:{p.stat().st_mtime_ns}" for p in files if p.exists())
    except OSError:  # unreadable: the loader will say so
        return ""


@st.cache_resource(max_entries=4, show_spinner="Loading the checkpoint…")
def load_bundle(source: str, device: str, version: str = "") -> Bundle:
    """One model per (checkpoint, device, version) per process, shared by every session: read-only."""
    if source == DEMO:
        return demo_bundle(device)
    return gptviz.load(checkpoint_path(source), device)


# A Trace is read-only (its arrays refuse writes), so one cached object can serve every session
# without the pickle round trip st.cache_data would pay on each rerun. It holds the activations
# (attention maps are rebuilt from q and k when a view asks), so a few entries stay small.
@st.cache_resource(max_entries=4, show_spinner="Running the model…")
def run_trace(source: str, device: str, ids: tuple[int, ...], version: str = "") -> gptviz.Trace:
    bundle = load_bundle(source, device, version)
    RUN_CALLS[(source, device)] += 1
    return gptviz.trace(bundle.model, list(ids), bundle.tokenizer)


@st.cache_resource(max_entries=4, show_spinner="Summarising every head…")
def layer_head_grid(source: str, device: str, ids: tuple[int, ...], version: str = ""):
    """The layer × head overview of one run, built once: it needs every layer's attention maps,
    which the Trace rebuilds from q and k on each request (seconds at T = 1024)."""
    t = run_trace(source, device, ids, version)
    return figures.layer_head_grid(analysis.layer_weights(t, l) for l in range(t.n_layer))


@st.cache_resource(max_entries=4, show_spinner=False)
def prompt_loss(source: str, device: str, ids: tuple[int, ...], version: str = "") -> pd.DataFrame:
    """The per-token loss of one run, built once: a pass over all T × V logits (0.4 s at T = 1024
    with GPT-2's vocabulary) that a temperature or top-k change must not repeat. Read-only."""
    t = run_trace(source, device, ids, version)
    return analysis.per_token_loss(t.tensor("logits"), t.token_ids)


def save_upload(files) -> str:
    """Write uploaded checkpoint files into a fresh temporary folder (named by their content, never
    beside the shipped ones) and return what to load: the folder, or the file if there is one."""
    limit = int(os.environ.get(UPLOAD_LIMIT_ENV, "200"))
    total = sum(f.size for f in files)
    if total > limit * 2**20:
        raise gptviz.CheckpointError(f"the upload is {total / 2**20:.0f} MB; the limit is {limit} MB ({UPLOAD_LIMIT_ENV})")
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.name):
        if not re.fullmatch(r"[\w.\-]+", f.name) or f.name.startswith("."):
            raise gptviz.CheckpointError(f"{f.name!r}: use plain file names (letters, digits, . _ -)")
        digest.update(f.name.encode() + b"\0" + f.getvalue())
    folder = Path(tempfile.gettempdir()) / "gptviz-uploads" / digest.hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        (folder / f.name).write_bytes(f.getvalue())
    return str(folder if len(files) > 1 else folder / files[0].name)


# --- devices --------------------------------------------------------------------------------
def device_status() -> dict[str, str]:
    """Each device -> "" if usable here, else the reason it is not."""
    mps = getattr(torch.backends, "mps", None)
    return {
        "cpu": "",
        "cuda": "" if torch.cuda.is_available() else "no CUDA GPU found here",
        "mps": "" if mps is not None and mps.is_available() else "no Apple Metal (MPS) device here",
    }


# --- the view -------------------------------------------------------------------------------
@dataclass
class View:
    """What every page reads: the choices, the loaded bundle and the Trace (None if not runnable)."""

    source: str
    device: str
    prompt: str
    bundle: Bundle | None = None
    trace: gptviz.Trace | None = None
    layer: int = 0
    head: int = 0
    position: int = 0
    presentation: bool = False
    ids: tuple[int, ...] = ()
    version: str = ""  # see version()

    @cached_property
    def labels(self) -> list[str]:
        """'index token' axis labels with visible whitespace, unique per position."""
        return figures.token_labels(self.display(self.trace.token_ids))

    def display(self, ids) -> list[str]:
        ids = [int(i) for i in ids]
        tok = self.bundle.tokenizer
        return tok.display(ids) if tok is not None else [str(i) for i in ids]


_current: contextvars.ContextVar[View | None] = contextvars.ContextVar("gptviz_view", default=None)


def view() -> View | None:
    """The View the sidebar built in this script run; None before the sidebar ran."""
    return _current.get()


def _read_url() -> None:
    """Copy the URL's choices into the session once, before any widget exists."""
    if st.session_state.get("_url_read"):
        return
    st.session_state["_url_read"] = True
    q = st.query_params
    source = q.get("checkpoint") or default_checkpoint()
    names = shipped()
    if source in names:
        st.session_state["ckpt_choice"] = source
    elif source == DEMO:
        st.session_state["ckpt_choice"] = DEMO
    elif source == "upload":
        st.session_state["ckpt_choice"] = UPLOAD
    else:
        st.session_state["ckpt_choice"], st.session_state["ckpt_path"] = LOCAL, source
    st.session_state["device"] = q.get("device", "cpu") if q.get("device", "cpu") in DEVICES else "cpu"
    st.session_state["prompt"] = q.get("prompt", PRESET_PROMPT)
    for key in ("layer", "head", "position"):
        if q.get(key, "").isdigit():
            st.session_state[key] = int(q[key])
    if "position" in st.session_state:
        st.session_state["_position_for"] = (source, st.session_state["prompt"])


def _write_url(v: View) -> None:
    wanted = {"checkpoint": "upload" if st.session_state.get("ckpt_choice") == UPLOAD else v.source, "prompt": v.prompt}
    if v.device != "cpu":
        wanted["device"] = v.device
    if v.trace is not None:
        wanted.update(layer=str(v.layer), head=str(v.head), position=str(v.position))
    if {k: st.query_params.get(k) for k in URL_KEYS if k in st.query_params} != wanted:
        st.query_params.from_dict(wanted)


def _pick_checkpoint() -> str | None:
    names = shipped()
    options = [*names, DEMO, LOCAL, UPLOAD]
    if st.session_state.get("ckpt_choice") not in options:
        st.session_state["ckpt_choice"] = default_checkpoint() if default_checkpoint() in options else LOCAL
    labels = {DEMO: "demo (random weights)", LOCAL: "a local path…", UPLOAD: "upload a checkpoint…"}
    choice = st.sidebar.selectbox("Checkpoint", options, key="ckpt_choice", format_func=lambda o: labels.get(o, f"{o} (shipped)"))
    if not names:
        st.sidebar.warning(f"No shipped checkpoint in {checkpoints_dir()}: train one (README) or pick a path. The demo model has random weights.")
    if choice == LOCAL:
        st.session_state.setdefault("ckpt_path", "")
        path = st.sidebar.text_input("Checkpoint path", key="ckpt_path", help=CHECKPOINT_HELP)
        return path.strip() or None
    if choice == UPLOAD:
        limit = int(os.environ.get(UPLOAD_LIMIT_ENV, "200"))
        files = st.sidebar.file_uploader(f"Checkpoint files (up to {limit} MB)", accept_multiple_files=True, key="ckpt_upload", max_upload_size=limit, help=CHECKPOINT_HELP)
        if not files:
            return None
        try:
            return save_upload(files)
        except GptvizError as e:
            st.error(f"Upload not used: {e}")
            return None
    return choice


def _pick_device() -> str:
    status = device_status()
    st.session_state.setdefault("device", "cpu")
    captions = ["always available" if not status[d] else f"not available: {status[d]}" for d in DEVICES]
    return st.sidebar.radio("Device", DEVICES, key="device", horizontal=False, captions=captions, format_func=str.upper)


def _offer(label: str, key: str, flag: str, prompt: str) -> None:
    def apply():
        st.session_state[flag] = prompt

    st.button(label, key=key, on_click=apply, type="primary")


def _encode(bundle: Bundle, prompt: str) -> list[int] | None:
    """The prompt as ids, or None after showing what is wrong and how to fix it."""
    block = bundle.model.config.block_size
    tok = bundle.tokenizer
    if tok is None:  # a checkpoint without a tokenizer: the prompt is token ids
        try:
            ids = [int(s) for s in re.split(r"[,\s]+", prompt.strip()) if s]
        except ValueError:
            st.error("This checkpoint has no tokenizer: type token ids separated by commas, e.g. 1, 2, 3")
            return None
        return ids[-block:] if st.session_state.get("fix_long") == prompt else ids
    drop = st.session_state.get("fix_unknown") == prompt
    keep_last = st.session_state.get("fix_long") == prompt
    try:
        ids = gptviz.encode_prompt(tok, prompt, block, unknown="drop" if drop else "error", keep_last=keep_last)
    except UnknownCharacterError as e:  # the library's message speaks to API users; say it for the page
        shown = ", ".join(repr(c) for c in e.chars)
        st.error(f"Prompt not run: the tokenizer does not know {len(e.chars)} character(s): {shown}. Remove them, or drop them here:")
        _offer(f"Drop the {len(e.chars)} unknown character(s) and run", "fix_unknown_btn", "fix_unknown", prompt)
        return None
    except PromptError as e:
        st.error(f"Prompt not run: {e}")
        if prompt and len(tok.encode(prompt, unknown="drop")) > block:
            _offer(f"Keep the last {block} tokens and run", "fix_long_btn", "fix_long", prompt)
        return None
    if drop:
        missing = sorted({c for c in prompt if not tok.encode(c, unknown="drop")})
        st.info(f"Dropped {len(missing)} unknown character(s): {', '.join(map(repr, missing))}")
    if keep_last and len(tok.encode(prompt, unknown="drop")) > block:
        st.info(f"The prompt was longer than the model's context: showing its last {block} tokens")
    return ids


def _choose_view(v: View) -> None:
    """Layer, head and position in the sidebar, clamped to this model and prompt."""
    L, H = v.trace.n_layer, v.trace["blocks.0.attn.q"].shape[0]
    T = v.trace.n_tokens
    for key, n in (("layer", L), ("head", H)):
        if not 0 <= st.session_state.get(key, 0) < n:
            st.session_state[key] = 0
        st.session_state.setdefault(key, 0)
    if st.session_state.get("_position_for") != (v.source, v.prompt) or not 0 <= st.session_state.get("position", -1) < T:
        st.session_state["position"] = T - 1  # a new prompt starts at its last token: the next-token view
        st.session_state["_position_for"] = (v.source, v.prompt)
    st.sidebar.subheader("View")
    v.layer = st.sidebar.radio("Layer", list(range(L)), key="layer", horizontal=True)
    v.head = st.sidebar.radio("Head", list(range(H)), key="head", horizontal=True)
    if T > 1:
        labels = v.labels
        v.position = st.sidebar.select_slider("Position (query token)", options=list(range(T)), key="position", format_func=lambda i: labels[i])
    else:
        v.position = 0


def sidebar() -> View:
    """Draw the shared sidebar, load and run what it asks for, and return the View for the pages.
    Every expected failure is shown as a message in the page; the View then has no Trace."""
    _read_url()
    st.sidebar.header("gptviz")
    source = _pick_checkpoint()
    device = _pick_device()
    with st.sidebar.form("prompt_form", border=False):
        st.text_input("Prompt", key="prompt", help="Press Enter or Run to run the model on it")
        st.form_submit_button("Run", key="run_btn", type="primary")
    presentation = st.sidebar.toggle("Presentation mode (larger fonts)", key="presentation")
    if presentation:  # Streamlit sizes its text in rem: a larger root font scales the whole page
        st.html(f"<style>html {{ font-size: {PRESENTATION_ROOT_PX}px; }}</style>")
    v = View(source=source or "", device=device, prompt=st.session_state.get("prompt", ""), presentation=presentation)
    _current.set(v)
    if source is None:
        st.info("Choose a checkpoint in the sidebar: a local path, or upload its files.")
        return v
    if device_status()[device]:
        try:
            resolve_device(device)
        except GptvizError as e:
            st.error(f"Device not available: {e}. Showing results on CPU.")
        v.device = "cpu"
    try:
        v.version = version(source)
        v.bundle = load_bundle(source, v.device, v.version)
    except GptvizError as e:
        st.error(f"Checkpoint not loaded: {e}")
        return v
    ids = _encode(v.bundle, v.prompt)
    if ids is None:
        return v
    try:
        v.ids = tuple(ids)
        v.trace = run_trace(source, v.device, v.ids, v.version)
    except GptvizError as e:
        st.error(f"Prompt not run: {e}")
        return v
    _choose_view(v)
    _write_url(v)
    return v


def require_trace() -> View | None:
    """The current View if it has a Trace; otherwise say why there is nothing to show."""
    v = view()
    if v is None or v.trace is None:
        st.info("Nothing to show yet: fix the message above, or choose a checkpoint and a prompt in the sidebar.")
        return None
    return v


# --- output helpers -------------------------------------------------------------------------
CHART_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def chart(fig, key: str, **kwargs):
    """Draw a figure with the presentation setting applied; PNG download from the Plotly toolbar."""
    v = view()
    fig = figures.presentation(fig, bool(v and v.presentation))
    return st.plotly_chart(fig, key=key, width="stretch", config=CHART_CONFIG, **kwargs)


def download(label: str, data: Callable[[], pd.DataFrame | dict[str, np.ndarray]], file_name: str, key: str) -> None:
    """A download button for the numbers behind a figure: a DataFrame as CSV, arrays as .npz.
    data is called only when the button is pressed."""

    def payload() -> bytes:
        d = data()
        if isinstance(d, pd.DataFrame):
            return d.to_csv(index=False).encode()
        buf = io.BytesIO()
        np.savez_compressed(buf, **{k: np.asarray(a) for k, a in d.items()})
        return buf.getvalue()

    mime = "text/csv" if file_name.endswith(".csv") else "application/octet-stream"
    st.download_button(f"⬇ {label}", payload, file_name=file_name, mime=mime, key=key, on_click="ignore")


def guard(page: Callable[[], None]) -> None:
    """Run a page; an unexpected error is logged on the server and shown as a message, never as a
    traceback in the browser."""
    try:
        page()
    except Exception as e:  # the last line of defence: expected failures are handled before this
        log.exception("page failed")
        st.error(f"Internal error while drawing this page ({type(e).__name__}: {e}). The server log has the details.")
