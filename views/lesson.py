"""Lessons as slides: choose a shipped lesson or load your own (a TOML file), then Back / Next (or
a clicker's keys) through its slides; followers see the same slide (?follow=CODE)."""

import streamlit as st

from gptviz import lessons
from gptviz.dashboard import keys, pages, slides, widgets
from gptviz.dashboard.classmode import allowed_path, uploads_allowed
from gptviz.dashboard.sources import upload_limit_mb
from gptviz.dashboard.state import link_params, view
from gptviz.errors import GptvizError

v = view()
presentation = bool(v and v.presentation)
lesson = st.session_state.get(slides.LESSON_KEY)
error = st.session_state.pop(keys.LESSON_ERROR, None)

if lesson is None:
    st.title("Lessons")
    if error:
        st.error(f"Lesson not opened: {widgets.plain(error)}")
    if slides.teaching():
        slides.class_bar(lesson_open=False)
    st.caption(
        "A lesson is a short list of slides, each a page of gptviz with its parameters, a title and a note "
        "for the class. Back / Next, PageDown / PageUp, the arrow keys and Space move between slides; b or . "
        "blacks out the screen (and every follower's), and the same key, Escape or Next brings the slide back "
        "(Next then stays on it)."
    )
    for name in lessons.shipped_lessons():
        shipped = lessons.shipped_lesson(name)
        st.page_link(
            pages.page_file("lesson"),
            label=f"{shipped.title} ({len(shipped.slides)} slides)",
            query_params=link_params(lesson=name, slide=1),
        )
        st.caption(shipped.description)
    st.subheader("Your own lesson")
    st.caption(
        f"A TOML file of at most {lessons.MAX_BYTES // 1024} KB (README, “Lessons”). It is read, never run: "
        "an unknown key is refused with the line that names it."
    )
    upload = None
    if upload_limit_mb() and uploads_allowed():
        upload = st.file_uploader("Lesson file (.toml)", type=["toml"], key="lesson_upload", max_upload_size=1)
    else:
        st.caption("Uploads are off on this server: put the file in a folder the server opens and give its path.")
    path = st.text_input("…or its path on the server", key="lesson_path")
    try:
        if upload is not None:
            slides.open_lesson(lessons.parse_lesson(upload.getvalue(), upload.name[:64], origin="upload"))
            st.rerun()
        elif path.strip() and st.button("Open this file", key="lesson_path_open"):
            slides.open_lesson(lessons.read_lesson(allowed_path(path.strip())))  # a class server: its roots only
            st.rerun()
    except GptvizError as e:
        st.error(f"Lesson not opened: {widgets.plain(e)}")
    st.stop()

if error:  # e.g. an ended class's teacher link, opened on its lesson: the lesson opens, and says so
    st.warning(widgets.plain(error))
slides.teacher(lesson, presentation)
slides.tools(lesson, presentation)
