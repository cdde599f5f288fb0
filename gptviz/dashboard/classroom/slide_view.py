"""A slide drawn to fit a projector: its input beside its result, the note large. What it shows is
computed once per process (slide_content, cached by the slide itself), so a class of followers costs one
computation, not one per student; the teacher's page (slides.py) and a follower's (follow.py) draw it
alike."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Literal

import plotly.graph_objects as go
import streamlit as st
from streamlit.runtime import Runtime

from ... import figures
from ...errors import GptvizError
from ...lessons import Slide, content
from ...tokenizers import encode_prompt
from .. import caches
from ..caches import ModelKey, RunKey, cached
from ..panels import features as fc
from ..sources import checkpoints
from ..widgets import CHART_CONFIG, plain
from . import predict
from .lesson_check import model_key, slide_prompt, slide_sae
from .slide_style import PRESENT_CSS, SLIDE_CSS

log = logging.getLogger("gptviz.dashboard")
NUMBER_PX = 24  # the smallest a number a slide is about may be on a projector


@dataclass(frozen=True)
class Shown:
    """A slide's content and its figure, styled once for the screen and once for a projector."""

    content: content.Content
    figure: go.Figure
    presented: go.Figure


@cached(max_entries=64, show_spinner="Preparing the slide…")
def slide_content(slide: Slide, key: ModelKey | None) -> Shown | str:
    """What the slide shows, once per process for every session and follower; a slide that cannot
    be shown gives its one-line reason instead (remembered too: a class would ask again and again)."""
    bundle = trace = sae = None
    if key is not None:
        if key.source not in (*checkpoints.shipped(), checkpoints.DEMO):
            names = ", ".join(checkpoints.shipped())
            return f"checkpoint {key.source[:80]!r} is not shipped with this server; shipped: {names}"
        try:
            bundle = caches.bundle_for(key)
            prompt = slide_prompt(slide, key.source)
            if bundle.tokenizer is None:
                return f"checkpoint {key.source!r} has no tokenizer: a lesson cannot give it a prompt"
            ids = encode_prompt(bundle.tokenizer, prompt, bundle.model.config.block_size, keep_last=True)
            trace, sae = _run(slide, RunKey(key, tuple(ids)))
        except GptvizError as e:
            return str(e).splitlines()[0][:300]
    # a real model's slide may run it again (the mask-leak slide: twice); a toy slide runs nothing
    with caches.FORWARD if key is not None else contextlib.nullcontext():
        c = content.build(slide, bundle, trace, sae)
    if slide.page not in ("softmax", "heads", "predict", "features") and slide.step in (None, "weights"):
        # an attention heatmap: short titles, the caption says the rest
        c.figure.update_layout(title_subtitle_text="")
        c.figure.update_xaxes(title_text="key (what is read)")
        c.figure.update_yaxes(title_text="query (who reads)")
    presented = figures.presentation(c.figure, True)
    presented.layout.height = None  # the screen sets it (draw: the chart stretched to its row)
    # numbers written in the cells are what the slide is about: projector size, and no colour bar
    # (the cells say their values), which leaves the cells the width their four decimals need
    presented.update_traces(
        textfont_size=NUMBER_PX, showscale=False, selector=lambda t: t.type == "heatmap" and bool(t.texttemplate)
    )
    return Shown(c, figures.presentation(c.figure, False), presented)


_PREPARED: set[tuple[Slide, ModelKey | None]] = set()  # slides handed to a thread, per process
_PREPARED_LOCK = threading.Lock()
PREPARED_MAX = 256  # the set is forgotten past this (slide_content's own cache keeps 64)


PREPARE_AFTER_S = 3.0  # the room first: the followers' reruns of the slide just shown go before it


def prepare(slide: Slide, force: bool = False, after: float = PREPARE_AFTER_S) -> threading.Thread | None:
    """Compute the slide the class will see next, in a thread, while the teacher talks about this one:
    a slide never shown before was computed on the press, and the class waited for it (a reloaded
    teacher's first Next onto the predict slide: 3 s). It starts `after` seconds on, once the followers
    have redrawn the slide just shown (its CPU would slow theirs). Once per slide and process; only on
    a real server (AppTest counts each computation), unless forced. Returns the thread started, if any."""
    key = model_key(slide)
    if not (force or Runtime.exists()):
        return None
    with _PREPARED_LOCK:
        if (slide, key) in _PREPARED:
            return None
        if len(_PREPARED) >= PREPARED_MAX:
            _PREPARED.clear()
        _PREPARED.add((slide, key))
    worker = threading.Thread(target=_prepare, args=(slide, key, after), name="gptviz-next-slide", daemon=True)
    worker.start()
    return worker


def _prepare(slide: Slide, key: ModelKey | None, after: float) -> None:
    time.sleep(after)
    try:
        slide_content(slide, key)  # a slide that cannot be shown is cached as its reason: no raise
    except Exception:  # a thread's error must not go unseen, nor stop the class: the press computes it
        log.warning("could not prepare the slide %r ahead", slide.title, exc_info=True)


def _run(slide: Slide, run: RunKey):
    """The slide's Trace (steered when the slide steers) and its SAE (a features slide's); GptvizError
    if either cannot be had."""
    sae_key = slide_sae(slide, run.model.source)
    sae = fc.sae_for(run.model, sae_key) if sae_key is not None else None
    if isinstance(sae, str):
        raise GptvizError(sae)
    if slide.page == "features" and sae is None:
        raise GptvizError(f"checkpoint {run.model.source!r} ships no SAE {slide.sae or ''}".rstrip())
    if slide.steer is None:
        return caches.run_trace(run), sae
    spec = slide.steer
    vector = fc.spec_vector(run.model, spec, sae_key if spec.kind == "feature" else None)
    return fc.steered_run(run, tuple(float(x) for x in vector), spec.site, spec.coeff), sae


def draw(slide: Slide, presentation: bool, key: str = "slide", at: predict.At | None = None) -> None:
    """One slide, read-only: title, note, then its input (left) beside its result (right). What it shows
    is computed before anything is drawn: a page that still shows the last slide is replaced by the whole
    new one, never by a new title over the old figure while the new one is prepared."""
    shown = slide_content(slide, model_key(slide))
    st.html(SLIDE_CSS + (PRESENT_CSS if presentation else ""))
    with st.container(key=f"{key}_head"):
        st.markdown(f"### {plain(slide.title)}")
    if slide.note:
        with st.container(key=f"{key}_note"):
            st.markdown(plain(slide.note))
    if isinstance(shown, str):
        st.error(f"This slide cannot be shown: {plain(shown)}")
        return
    if slide.page == "predict" and at is not None:  # the class answers before the model's answer shows
        with st.container(key=f"{key}_body"):  # as any slide's body: the tally takes the height left
            if key == "follow":
                predict.follower(slide, shown.content, at, presentation)
            else:
                predict.teacher(slide, shown.content, at, presentation)
        return
    c = shown.content
    # a matrix, or a table of three columns with long names, needs half of the width
    wide = c.table is not None and len(c.table.columns) >= 3
    with st.container(key=f"{key}_body"):
        left, right = st.columns([1, 1] if wide else [1, 1.3])
    with left:
        st.markdown(f"**{plain(c.table_title)}**")
        if c.table is not None:
            st.table(c.table.set_index(c.table.columns[0]) if c.table.index.dtype.kind == "i" else c.table)
        with st.container(key=f"{key}_facts"):
            for label, value in c.facts:
                st.markdown(f"{plain(label)}: **{plain(value)}**")
    with right:
        height: Literal["stretch", "content"] = "stretch" if presentation else "content"  # the screen's (PRESENT_CSS)
        fig = shown.presented if presentation else shown.figure
        st.plotly_chart(fig, key=f"{key}_figure", width="stretch", height=height, config=CHART_CONFIG)
        st.caption(plain(c.caption))
