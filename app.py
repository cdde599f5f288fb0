"""gptviz dashboard: `streamlit run app.py`. A router: the shared sidebar, then the chosen page.

The pages live in views/, not pages/: a folder named pages/ beside app.py switches Streamlit to its
old automatic multipage mode, which then runs a page script without this router (no sidebar).

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

from gptviz.dashboard.classroom import read_step_url  # noqa: E402
from gptviz.dashboard.icon import page_icon  # noqa: E402
from gptviz.dashboard.memory import freeze_imports  # noqa: E402
from gptviz.dashboard.sidebar import PRESENTATION_ROOT_PX, VIEW_CONTROLS, sidebar  # noqa: E402
from gptviz.dashboard.slides import follower, read_lesson_url  # noqa: E402
from gptviz.dashboard.state import set_view  # noqa: E402
from gptviz.dashboard.widgets import guard  # noqa: E402

# the icon is an image the server sends, never a Material icon: those are fetched from fonts.gstatic.com
st.set_page_config(page_title="gptviz", page_icon=page_icon(), layout="wide")

# Grouped by the question a page answers. In the top bar each group is one menu, so the sidebar holds
# only the controls (checkpoint first) and a 900 px high screen shows them without scrolling.
PAGES = {
    "What the model computed": [
        st.Page("views/overview.py", title="Overview", icon=":material/home:", default=True),
        st.Page("views/attention.py", title="Attention", icon=":material/grid_on:"),
        st.Page("views/qkv.py", title="Q / K / V", icon=":material/calculate:", url_path="qkv"),
        st.Page("views/shapes.py", title="Shapes", icon=":material/straighten:"),
        st.Page("views/residual.py", title="Residual stream", icon=":material/timeline:", url_path="residual"),
        st.Page("views/next_token.py", title="Next token", icon=":material/bar_chart:", url_path="next-token"),
    ],
    "Why": [
        st.Page("views/heads.py", title="Heads", icon=":material/psychology:", url_path="heads"),
        st.Page("views/logit_lens.py", title="Logit lens", icon=":material/layers:", url_path="logit-lens"),
        st.Page(
            "views/attribution.py", title="Logit attribution", icon=":material/call_split:", url_path="attribution"
        ),
        st.Page("views/health.py", title="Health", icon=":material/health_and_safety:", url_path="health"),
    ],
    "Across data": [
        st.Page("views/corpus.py", title="Corpus", icon=":material/library_books:", url_path="corpus"),
    ],
    "What if": [
        st.Page(
            "views/interventions.py", title="Interventions", icon=":material/content_cut:", url_path="interventions"
        ),
        st.Page("views/patching.py", title="Patching", icon=":material/swap_horiz:", url_path="patching"),
    ],
    "Over time": [
        st.Page("views/generate.py", title="Generate", icon=":material/edit_note:", url_path="generate"),
        st.Page("views/compare.py", title="Compare", icon=":material/compare:", url_path="compare"),
        st.Page("views/timeline.py", title="Timeline", icon=":material/show_chart:", url_path="timeline"),
    ],
    "Classroom": [
        st.Page(
            "views/worked_examples.py", title="Worked examples", icon=":material/school:", url_path="worked-examples"
        ),
        st.Page("views/forward_pass.py", title="Forward pass", icon=":material/stairs:", url_path="forward-pass"),
        st.Page("views/mask_leak.py", title="Mask leak", icon=":material/visibility_off:", url_path="mask-leak"),
        st.Page("views/lesson.py", title="Lesson", icon=":material/slideshow:", url_path="lesson"),
    ],
}


# What of the sidebar's layer, head and position a page reads, where it is not all three: in presentation
# mode these controls sit on the page itself (the sidebar is folded away).
PAGE_CONTROLS = {
    "worked-examples": (),
    "shapes": (),
    "health": (),
    "patching": (),
    "lesson": (),
    "corpus": (),
    "forward-pass": (),  # its table fills the screen; the head of per-head steps stays in the sidebar
}


def follow(code: str) -> None:
    """A student following a teacher (?follow=CODE): the teacher's slide only, no sidebar, no run."""
    st.navigation(PAGES, position="hidden")
    present = st.query_params.get("present") == "1"
    if present:
        st.html(f"<style>html {{ font-size: {PRESENTATION_ROOT_PX}px; }}</style>")
    follower(code, present)


def main() -> None:
    if "follow" in st.query_params:
        return follow(st.query_params["follow"])
    page = st.navigation(PAGES, position="top")
    opens_lesson = "lesson" in st.query_params or "teach" in st.query_params  # a lesson link, or a teacher's
    if opens_lesson and page.url_path != "lesson" and not st.session_state.get("_url_read"):
        st.switch_page("views/lesson.py", query_params=dict(st.query_params))  # ?lesson= opens it on any page
    try:
        read_step_url()  # before the sidebar rewrites the URL
        read_lesson_url()
        sidebar(view_controls=PAGE_CONTROLS.get(page.url_path, VIEW_CONTROLS))
        page.run()
    finally:  # an idle session holds no Trace: only the caches do, within their limits
        set_view(None)
        freeze_imports()


guard(main)
