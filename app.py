"""gptviz dashboard: `streamlit run app.py`. A router: the shared sidebar, then the chosen page.

The pages are listed in one registry (gptviz.dashboard.pages): title, file, menu, icon and URL path.

The sidebar (gptviz.dashboard.sidebar) loads the checkpoint once per process and runs a prompt once per
(checkpoint, device, prompt); every page reads that one Trace through the View (gptviz.dashboard.state).
"""

import os

# Before torch loads its OpenMP runtime: a thread that has finished its share of an operation sleeps
# instead of spinning for the next one. A class's many small runs wasted a third of their CPU time
# spinning (89-97 -> 60-68 ms of CPU per prompt on the shipped model); a 124M model at T = 512 runs as fast as before.
# A value set by the user stands.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import streamlit as st  # noqa: E402

from gptviz.dashboard import keys, pages  # noqa: E402
from gptviz.dashboard.classroom.follow import follower  # noqa: E402
from gptviz.dashboard.classroom.lesson_return import back_link, read_slide_url  # noqa: E402
from gptviz.dashboard.classroom.slides import read_lesson_url  # noqa: E402
from gptviz.dashboard.classroom.step_url import read_step_url  # noqa: E402
from gptviz.dashboard.icon import page_icon  # noqa: E402
from gptviz.dashboard.memory import freeze_imports  # noqa: E402
from gptviz.dashboard.sidebar import PRESENTATION_ROOT_PX, VIEW_CONTROLS, sidebar  # noqa: E402
from gptviz.dashboard.state import set_view  # noqa: E402
from gptviz.dashboard.widgets import guard  # noqa: E402

# the icon is an image the server sends, never a Material icon: those are fetched from fonts.gstatic.com
st.set_page_config(page_title="gptviz", page_icon=page_icon(), layout="wide")

PAGES = pages.navigation()


# What of the sidebar's layer, head and position a page reads, where it is not all three: in presentation
# mode these controls sit on the page itself (the sidebar is folded away).
PAGE_CONTROLS = {
    "worked-examples": (),
    "shapes": (),
    "health": (),
    "patching": (),
    "lesson": (),
    "corpus": (),
    "features": ("position",),
    "graph": (),
    "forward-pass": (),  # its table fills the screen; the head of per-head steps stays in the sidebar
}


FOLLOW_CSS = "<style>[data-testid=stSidebar], [data-testid=stSidebarCollapsedControl] { display: none; }</style>"


def follow(code: str) -> None:
    """A student following a teacher (?follow=CODE): the teacher's slide only, no sidebar, no run."""
    st.navigation(PAGES, position="hidden")
    st.html(FOLLOW_CSS)  # a student who joined from the first page's box had its (now empty) sidebar left
    present = st.query_params.get("present") == "1"
    if present:
        st.html(f"<style>html {{ font-size: {PRESENTATION_ROOT_PX}px; }}</style>")
    follower(code, present)


def main() -> None:
    if "follow" in st.query_params:
        return follow(st.query_params["follow"])
    page = st.navigation(PAGES, position="top")
    opens_lesson = "lesson" in st.query_params or "teach" in st.query_params  # a lesson link, or a teacher's
    if opens_lesson and page.url_path != "lesson" and not st.session_state.get(keys.URL_READ):
        st.switch_page(pages.page_file("lesson"), query_params=dict(st.query_params))  # ?lesson= opens it on any page
    try:
        read_step_url()  # before the sidebar rewrites the URL
        read_lesson_url()
        read_slide_url()  # a worked-example slide's numbers, before the sidebar rewrites the URL
        sidebar(view_controls=PAGE_CONTROLS.get(page.url_path, VIEW_CONTROLS), reads=pages.reads(page.url_path))
        back_link(page.url_path)
        page.run()
    finally:  # an idle session holds no Trace: only the caches do, within their limits
        set_view(None)
        freeze_imports()


guard(main)
