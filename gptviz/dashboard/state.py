"""The View every page reads, and the choices mirrored into the URL.

The choices (checkpoint, device, prompt, layer, head, position) live in st.session_state under
widget keys and are mirrored into st.query_params, so a view can be bookmarked and shared.
Tensors never enter the session state: the View's bundle and Trace come from the process-wide
caches (caches.py), named by its RunKey.
"""

from __future__ import annotations

import contextvars
import re
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import NoReturn

import streamlit as st

from .. import figures
from ..devices import COMPUTE_DTYPES, DEVICES
from ..formats import Bundle
from ..record import Trace
from ..steering_spec import SteeringSpec, SteeringSpecError
from . import keys, uploads
from .caches import ModelKey, RunKey, SAEKey
from .sources import DEMO, default_checkpoint, preset_prompt, shipped

PRESET_PROMPT = "First Citizen: Before we proceed any further, hear me speak."
URL_KEYS = (
    "checkpoint",
    "upload",
    "device",
    "dtype",
    "sae",
    "steer",
    "prompt",
    "keep_last",
    "drop_unknown",
    "layer",
    "head",
    "position",
    "present",
)
KEPT_KEYS = ("lesson", "slide", "step", "block", "teach")  # the classroom's own keys: write_url leaves them as they are
URL_INT = re.compile(r"[0-9]{1,6}")  # ASCII digits only: "²" passes str.isdigit but not int()


class Pick(Enum):
    """Checkpoint choices besides the shipped folders (which are picked by name)."""

    DEMO = "demo (random weights)"
    PATH = "a local path…"
    UPLOAD = "upload a checkpoint…"


@dataclass
class View:
    """What every page reads: the choices, the loaded bundle and the Trace (None if not runnable)."""

    source: str
    device: str
    prompt: str
    bundle: Bundle | None = None
    trace: Trace | None = None
    key: RunKey | None = None  # names the run in the caches, set together with trace
    model_key: ModelKey | None = None  # names the loaded bundle in the caches, set together with bundle
    layer: int = 0
    head: int = 0
    position: int = 0
    presentation: bool = False
    label: str = ""  # how the page names the source: an upload by its file names, never its server path
    dtype: str = "auto"  # what the model computes in (gptviz.load's dtype)
    sae: SAEKey | None = None  # the SAE the sidebar picked (saes.py), loaded by the pages that read it
    sae_label: str = ""  # how the page names it: a shipped SAE's name, a path, an upload's file names
    sae_url: str = ""  # what ?sae= says ("" for the checkpoint's default SAE)
    cancelled: bool = False  # the load or the first run was cancelled: its bar's place says so

    @property
    def source_label(self) -> str:
        return self.label or self.source

    @cached_property
    def labels(self) -> list[str]:
        """'index token' axis labels with visible whitespace, unique per position: Plotly text, for figures."""
        return figures.token_labels(self.display(self._token_ids()))

    @cached_property
    def texts(self) -> list[str]:
        """The same 'index token' labels as a person reads them: for widgets, sentences, tables, files."""
        return figures.position_labels(self.display(self._token_ids()))

    def _token_ids(self):
        if self.trace is None:  # the sidebar builds a View without a Trace when the model cannot run
            raise RuntimeError("this View has no Trace: its tokens have no labels")
        return self.trace.token_ids

    def display(self, ids) -> list[str]:
        ids = [int(i) for i in ids]
        tok = self.bundle.tokenizer if self.bundle is not None else None
        return tok.display(ids) if tok is not None else [str(i) for i in ids]


_current: contextvars.ContextVar[View | None] = contextvars.ContextVar("gptviz_view", default=None)


def view() -> View | None:
    """The View the sidebar built in this script run; None before the sidebar ran."""
    return _current.get()


def set_view(v: View | None) -> None:
    """Make v the current View; None at the end of a script run, so an idle session holds no Trace."""
    _current.set(v)


def _url_choices() -> dict[str, str]:
    return {k: st.query_params[k] for k in URL_KEYS if k in st.query_params}


def read_url() -> None:
    """Copy the URL's choices into the session before any widget exists: on a session's first run,
    and again when a link gptviz made (same tab, so the same session) brought other choices. A URL
    the session wrote itself, or one with none of its keys (a page switch), changes nothing."""
    # st.switch_page drops every widget's state, the sidebar's too: a page that switches leaves here
    # what they held and what it chose (the Heads page opening a head in Attention)
    st.session_state.update(st.session_state.pop(keys.SWITCH_CHOICES, {}))
    here = _url_choices()
    if st.session_state.get(keys.URL_READ) and (not here or here == st.session_state.get(keys.URL_WRITTEN)):
        return
    st.session_state[keys.URL_READ] = True
    q = st.query_params
    source = q.get("checkpoint") or default_checkpoint()
    if source in shipped():
        st.session_state["ckpt_choice"] = source
    elif source == DEMO:
        st.session_state["ckpt_choice"] = Pick.DEMO
    elif source == "upload":
        st.session_state["ckpt_choice"] = Pick.UPLOAD
    else:
        st.session_state["ckpt_choice"], st.session_state["ckpt_path"] = Pick.PATH, source
    st.session_state["device"] = q.get("device", "cpu") if q.get("device", "cpu") in DEVICES else "cpu"
    st.session_state["dtype"] = q.get("dtype", "auto") if q.get("dtype", "auto") in COMPUTE_DTYPES else "auto"
    from .saes import from_url  # it draws with widgets.py, which reads this module

    from_url(q.get("sae"), source)
    _read_steer(q.get("steer"))
    # newlines arrive %0A-encoded and are kept; a shipped checkpoint may name its own preset
    st.session_state["prompt"] = q.get("prompt", preset_prompt(source) or PRESET_PROMPT)
    if q.get("keep_last") == "1":
        st.session_state["fix_long"] = st.session_state["prompt"]
    if q.get("drop_unknown") == "1":
        st.session_state["fix_unknown"] = st.session_state["prompt"]
    if source == "upload" and q.get("upload"):
        st.session_state[keys.UPLOAD_NAMES] = q["upload"][:300]
    st.session_state[keys.URL_VIEW] = {}
    for key in ("layer", "head", "position"):
        if URL_INT.fullmatch(q.get(key, "")):
            st.session_state[key] = st.session_state[keys.URL_VIEW][key] = int(q[key])
    if "position" in st.session_state:
        st.session_state[keys.POSITION_FOR] = (source, st.session_state["prompt"])
    st.session_state["presentation"] = q.get("present") == "1"


def _read_steer(text: str | None) -> None:
    """?steer= into the session's spec; the panel's widgets then follow it (steering_panel._fill)."""
    from .steering_panel import WIDGETS  # it draws with widgets.py, which reads this module

    for key in WIDGETS:
        st.session_state.pop(key, None)
    st.session_state[keys.STEER] = None
    if text is None:
        return
    try:
        st.session_state[keys.STEER] = SteeringSpec.from_text(text)
    except SteeringSpecError as e:
        st.session_state[keys.STEER_ERROR] = str(e)


def set_steer(spec: SteeringSpec | None) -> None:
    """The session's steering (None: off), in the URL at once: the sidebar wrote this run's URL
    before the page chose it."""
    st.session_state[keys.STEER] = spec
    written = st.session_state.get(keys.URL_WRITTEN)
    if not isinstance(written, dict) or written.get("steer") == (spec.text if spec else None):
        return
    if spec is None:
        written.pop("steer", None)
        st.query_params.pop("steer", None)
    else:
        written["steer"] = st.query_params["steer"] = spec.text


def write_url(v: View) -> None:
    upload = st.session_state.get("ckpt_choice") is Pick.UPLOAD
    wanted = {"checkpoint": "upload" if upload else v.source}
    if upload and v.label:  # the names only: a new session must upload the files again
        wanted["upload"] = v.label.removeprefix("upload: ")
    wanted["prompt"] = v.prompt
    if st.session_state.get("fix_long") == v.prompt:
        wanted["keep_last"] = "1"
    if st.session_state.get("fix_unknown") == v.prompt:
        wanted["drop_unknown"] = "1"
    if v.device != "cpu":
        wanted["device"] = v.device
    if v.dtype != "auto":
        wanted["dtype"] = v.dtype
    if v.sae_url:
        wanted["sae"] = v.sae_url
    spec = st.session_state.get(keys.STEER)
    if isinstance(spec, SteeringSpec):
        wanted["steer"] = spec.text
    if v.trace is not None:
        wanted.update(layer=str(v.layer), head=str(v.head), position=str(v.position))
    if v.presentation:
        wanted["present"] = "1"
    st.session_state[keys.URL_WRITTEN] = dict(wanted)
    if _url_choices() != wanted:
        kept = {k: st.query_params[k] for k in KEPT_KEYS if k in st.query_params}
        st.query_params.from_dict({**wanted, **kept})


MACHINE_KEYS = ("device", "dtype")  # the session's whatever the model: every link carries them
MODEL_KEYS = ("sae", "steer")  # they name parts of one checkpoint: carried to that checkpoint only
PROMPT_KEYS = ("keep_last", "drop_unknown")  # choices made on one prompt: carried with that prompt only


def link_params(**params) -> dict[str, str]:
    """Query parameters for a link gptviz makes: the given choices over the session's own (the URL
    the sidebar wrote), so following the link changes only what it names. A link to another
    checkpoint keeps the device and dtype only; one that picks another SAE drops the steering too (a
    feature's number means another direction there). Presentation mode stays on if it is."""
    out = {k: str(v) for k, v in params.items()}
    now = st.session_state.get(keys.URL_WRITTEN)
    now = now if isinstance(now, dict) else {}
    if "checkpoint" not in out or out["checkpoint"] == now.get("checkpoint"):
        same = MACHINE_KEYS + MODEL_KEYS + PROMPT_KEYS
        carried = dict(now) if "checkpoint" not in out else {k: now[k] for k in same if k in now}
        if "sae" in out and out["sae"] != _sae_opened(now):
            carried.pop("steer", None)
        if out.get("prompt", carried.get("prompt")) != now.get("prompt"):  # another prompt (or the preset)
            for k in PROMPT_KEYS:
                carried.pop(k, None)
    else:
        carried = {k: now[k] for k in MACHINE_KEYS if k in now}
    out = {**carried, **out}
    if st.session_state.get("presentation"):
        out["present"] = "1"
    return out


def _sae_opened(url: dict[str, str]) -> str:
    """The SAE a URL of the session opens: its ?sae=, else its checkpoint's first shipped one
    (saes.from_url), so a link that names that one explicitly picks no other SAE."""
    from .saes import URL_WORDS, default_sae  # it draws with widgets.py, which reads this module

    if "sae" in url:
        return url["sae"]
    sae = default_sae(url.get("checkpoint") or default_checkpoint())
    return sae if isinstance(sae, str) else URL_WORDS[sae]


SWITCH_KEYS = (  # the sidebar's widgets, which st.switch_page forgets
    "ckpt_choice",
    "ckpt_path",
    "device",
    "dtype",
    "sae_choice",
    "sae_path",
    "sae_layer",  # a Gemma Scope SAE's layer and site (saes._with_site): its file names neither
    "sae_site",
    "prompt",
    "layer",
    "head",
    "position",
    "presentation",
)


def switch_page(page: str, leave: tuple[str, ...] = (), **chosen) -> NoReturn:
    """st.switch_page with the sidebar's choices kept (read_url puts them back), less `leave`, plus
    `chosen`; the steering is no widget's and stays by itself."""
    state = st.session_state
    state[keys.SWITCH_CHOICES] = {k: state[k] for k in SWITCH_KEYS if k in state and k not in leave} | chosen
    uploads.carry_over()
    st.switch_page(page)
