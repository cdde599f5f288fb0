"""From a slide to its full page and back: the slide's "Open this in its full page" link carries what
the slide shows (model, prompt, layer, head; a worked-example slide's preset and mask) and where the
lesson was (?lesson=, ?slide=, the teacher's ?teach=), and every page a session opens while a lesson is
open offers "Back to the lesson", which returns to that slide with the class still taught.

The worked-example choices (?preset=, ?mask=) are read once into the Worked examples page's widgets
before the sidebar rewrites the URL, then dropped from it: they are a link's, not the page's state."""

from __future__ import annotations

import streamlit as st

from ...analysis.worked import TOY_PRESETS
from ...lessons import PAGES, Lesson, Slide, content
from .. import keys
from ..pages import page_file
from ..state import link_params
from .lesson_check import slide_checkpoint, slide_prompt, slide_sae_name

WORKED = ("tiny-head", "mask", "softmax")  # the slides the Worked examples page shows in full
PRESET_WIDGET, MASK_WIDGET = "w0_preset", "w0_mask"  # the Worked examples page's own widget keys
LENS_WIDGET = "lens_target"  # the Logit lens page's target token box


def slide_params(lesson: Lesson, i: int, slide: Slide) -> dict[str, str]:
    """What a full-page link adds to the slide's model choices: the worked example's numbers, and the
    way back (a shipped lesson's name and slide; the teacher's key, so the class is kept)."""
    out: dict[str, str] = {}
    if slide.page in WORKED:
        out["preset"] = slide.preset
        out["mask"] = "1" if slide.mask else "0"
    if lesson.origin == "shipped":  # an uploaded lesson stays open in the session: no name to give
        out.update(lesson=lesson.name, slide=str(i + 1))
    key = st.session_state.get(keys.TEACH_KEY)
    if key:
        out["teach"] = key
    return out


def full_page_link(slide: Slide, lesson: Lesson | None = None, i: int = 0) -> None:
    """A link to the page this slide comes from, with its choices and the way back (same tab)."""
    params = slide_params(lesson, i, slide) if lesson is not None else {}
    if content.real_model(slide):
        name = slide_checkpoint(slide)
        params.update(checkpoint=name, layer=slide.layer, head=slide.head)
        params["prompt"] = slide_prompt(slide, name)
        sae = slide.sae or slide_sae_name(slide, name)  # the SAE the slide reads, not the session's (its
        if sae:  # feature is another direction there)
            params["sae"] = sae
        if slide.steer is not None:  # the page opens with the slide's steering (Next token, Generate)
            params["steer"] = slide.steer.text
    st.page_link(page_file(PAGES[slide.page]), label="Open this in its full page", query_params=link_params(**params))


def read_slide_url() -> None:
    """?preset= and ?mask= from a worked-example slide's link, into the Worked examples page's widgets;
    ?target= from a round's link, into the Logit lens page's token box."""
    preset, mask = st.query_params.get("preset"), st.query_params.get("mask")
    if preset in TOY_PRESETS:
        st.session_state[PRESET_WIDGET] = preset
    if mask in ("0", "1"):
        st.session_state[MASK_WIDGET] = mask == "1"
    target = st.query_params.get("target")  # a round's link: the token the Logit lens page follows
    if target is not None:
        st.session_state[LENS_WIDGET] = target[:64]
    for k in ("preset", "mask", "target"):
        st.query_params.pop(k, None)


def back_link(page_path: str) -> None:
    """ "Back to the lesson" on every page but the lesson's own while this session has a lesson open."""
    lesson = st.session_state.get(keys.LESSON)
    if lesson is None or page_path == "lesson":
        return
    i = int(st.session_state.get(keys.SLIDE, 0))
    params = {"slide": str(i + 1)}
    if lesson.origin == "shipped":
        params["lesson"] = lesson.name
    key = st.session_state.get(keys.TEACH_KEY)
    if key:
        params["teach"] = key
    if st.session_state.get("presentation"):
        params["present"] = "1"
    with st.container(key="lesson_back"):
        st.page_link(page_file("lesson"), label=f"◀ Back to the lesson (slide {i + 1})", query_params=params)
