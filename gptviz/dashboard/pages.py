"""The dashboard's pages, in one registry: the router (app.py), the lessons and every link name a page by
its key (its URL path) and look its file up here, so a page is renamed or moved in one line.

The files live in views/, not pages/: a folder named pages/ beside app.py switches Streamlit to its old
automatic multipage mode, which then runs a page script without the router (no sidebar) on a fresh server.
Titles and URL paths are what users bookmark and what the AppTest and browser tests click: keep them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..capture import answerable, select


@dataclass(frozen=True)
class PageSpec:
    """One dashboard page: `key` is its URL path and the name everything else uses for it."""

    key: str
    title: str
    file: str  # relative to app.py
    section: str  # the top-bar menu it is listed under
    icon: str  # a Material icon name: Streamlit ships the font, nothing is fetched
    default: bool = False  # the page at the root URL
    # what the page reads of the run (gptviz.trace's names=): the sidebar's run captures only that; None:
    # every name. Sites at every layer, since the layer a page shows changes without a new run.
    reads: tuple[str, ...] | None = None


# the logits are rebuilt from ln_f and the maps from q and k: asking for them holds T·C and L·T·(H + H_kv)·D
# floats, a sixth of a full Trace of a 1B model (python -m gptviz bench --trace-memory)
NEXT = ("logits",)
MAPS = ("blocks.*.attn.weights", "blocks.*.attn.mask")
QKV = ("blocks.*.attn.q", "blocks.*.attn.k", "blocks.*.attn.v", "blocks.*.attn.z", *MAPS)
RESIDUAL = ("blocks.*.resid_pre", "blocks.*.resid_mid", "blocks.*.resid_post")
# the sizes B, T, C, H, D, V read off, and the steps of block 0 that are no module (the maps, the residual)
SHAPES = ("embed", "logits", "blocks.0.attn.weights", "blocks.0.attn.mask", "blocks.0.resid_mid", "blocks.0.resid_post")


# Grouped by the question a page answers. In the top bar each group is one menu, so the sidebar holds
# only the controls (checkpoint first) and a 900 px high screen shows them without scrolling.
COMPUTED, WHY, ACROSS, WHAT_IF, OVER_TIME, CLASSROOM = (
    "What the model computed",
    "Why",
    "Across data",
    "What if",
    "Over time",
    "Classroom",
)
PAGES: tuple[PageSpec, ...] = (
    PageSpec("overview", "Overview", "views/overview.py", COMPUTED, ":material/home:", default=True, reads=NEXT + MAPS),
    PageSpec("attention", "Attention", "views/attention.py", COMPUTED, ":material/grid_on:", reads=MAPS),
    PageSpec("qkv", "Q / K / V", "views/qkv.py", COMPUTED, ":material/calculate:", reads=QKV),
    PageSpec("shapes", "Shapes", "views/shapes.py", COMPUTED, ":material/straighten:", reads=SHAPES),
    PageSpec("residual", "Residual stream", "views/residual.py", COMPUTED, ":material/timeline:", reads=RESIDUAL),
    PageSpec("next-token", "Next token", "views/next_token.py", COMPUTED, ":material/bar_chart:", reads=NEXT),
    PageSpec("heads", "Heads", "views/heads.py", WHY, ":material/psychology:"),
    PageSpec("logit-lens", "Logit lens", "views/logit_lens.py", WHY, ":material/layers:"),
    PageSpec("attribution", "Logit attribution", "views/attribution.py", WHY, ":material/call_split:"),
    PageSpec("health", "Health", "views/health.py", WHY, ":material/health_and_safety:"),
    PageSpec("features", "Features", "views/features.py", WHY, ":material/scatter_plot:"),
    PageSpec("graph", "Graph", "views/graph.py", WHY, ":material/hub:"),
    PageSpec("corpus", "Corpus", "views/corpus.py", ACROSS, ":material/library_books:"),
    PageSpec("interventions", "Interventions", "views/interventions.py", WHAT_IF, ":material/content_cut:"),
    PageSpec("patching", "Patching", "views/patching.py", WHAT_IF, ":material/swap_horiz:"),
    PageSpec("generate", "Generate", "views/generate.py", OVER_TIME, ":material/edit_note:"),
    PageSpec("compare", "Compare", "views/compare.py", OVER_TIME, ":material/compare:"),
    PageSpec("timeline", "Timeline", "views/timeline.py", OVER_TIME, ":material/show_chart:"),
    PageSpec("worked-examples", "Worked examples", "views/worked_examples.py", CLASSROOM, ":material/school:"),
    PageSpec("forward-pass", "Forward pass", "views/forward_pass.py", CLASSROOM, ":material/stairs:"),
    PageSpec("mask-leak", "Mask leak", "views/mask_leak.py", CLASSROOM, ":material/visibility_off:"),
    PageSpec("lesson", "Lesson", "views/lesson.py", CLASSROOM, ":material/slideshow:"),
)
BY_KEY = {p.key: p for p in PAGES}


def reads(url_path: str) -> tuple[str, ...] | None:
    """What the page at this URL path (the root's is "") reads of a run; None: everything."""
    page = BY_KEY.get(url_path) or next((p for p in PAGES if p.default and not url_path), None)
    return page.reads if page is not None else None


def run_names(reads: tuple[str, ...], n_layer: int) -> tuple[str, ...]:
    """What a page's run asks gptviz.trace for: the names the page reads, and every other name the values
    held for them give (capture.answerable), so a later page that reads only those reuses the run."""
    return tuple(sorted(answerable(select(reads, n_layer), n_layer)))


def page_file(key: str) -> str:
    """The file of the page with this key, as st.switch_page and st.page_link take it; KeyError if none."""
    return BY_KEY[key].file


def navigation() -> dict:
    """The registry as st.navigation takes it: {menu section: [st.Page, ...]} in menu order."""
    import streamlit as st

    sections: dict[str, list] = {}
    for p in PAGES:
        page = st.Page(p.file, title=p.title, icon=p.icon, url_path=p.key, default=p.default)
        sections.setdefault(p.section, []).append(page)
    return sections
