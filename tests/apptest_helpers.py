"""What every AppTest module shares: the app's path, the no-error check, and reading a Plotly
figure (and its base64-encoded arrays) back from the page."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import numpy as np
import streamlit as st
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz.bench.checkpoints import NAME
from gptviz.dashboard import state
from gptviz.dashboard.sources import checkpoints, classmode

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
# The six pages every model has, by script and title
PAGES = {
    "views/overview.py": "Overview",
    "views/attention.py": "Attention",
    "views/qkv.py": "Q / K / V",
    "views/shapes.py": "Shapes",
    "views/residual.py": "Residual stream",
    "views/next_token.py": "Next token",
}
PROMPT = "To be, or not to be: that is the question."
RUNS: list = []  # the ids of every run the model really did (conftest's `env` wraps caches.trace to count)


def serve(monkeypatch, root: Path, default: str) -> None:
    """Point the dashboard at a folder of checkpoints, opening on `default`, with cold caches:
    st.cache_resource is process-wide, shared by every AppTest in the run."""
    monkeypatch.setenv(checkpoints.CHECKPOINTS_ENV, str(root))
    monkeypatch.setenv(checkpoints.DEFAULT_ENV, default)
    st.cache_resource.clear()


# what dashboard/classroom/live.py holds for every class in this process: codes, followers, tallies, polls
CLASS_REGISTRIES = ("_live", "_followers", "_owners", "_ended", "_guesses", "_polls")


def fresh_class(monkeypatch) -> None:
    """Every class registry emptied for one test (they are process-wide, shared by AppTest sessions)."""
    from gptviz.dashboard.classroom import live

    for name in CLASS_REGISTRIES:
        monkeypatch.setattr(live, name, {})


def shipped_room(monkeypatch) -> None:
    """The shipped checkpoints served on a teacher's own machine (not a class server), no class yet."""
    serve(monkeypatch, Path(__file__).resolve().parents[1] / "checkpoints", "shakespeare-char")
    monkeypatch.setenv(classmode.CLASS_ENV, "0")
    fresh_class(monkeypatch)


def app_session(page: str | None = None, timeout: int = 60, **query) -> AppTest:
    """A new session of the app, opened with these query parameters and run, then switched to `page`
    (a script path) if given. Not checked: callers say what they expect (ok())."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.query_params.update(query)
    at.run()
    return at.switch_page(page).run() if page else at


def ok(at: AppTest) -> AppTest:
    """No exception and no error message on the page."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def figure(at: AppTest, key: str) -> dict:
    """The Plotly figure drawn under a widget key, as its JSON."""
    return json.loads(at.get_by_key(key).proto.spec)


def array(v) -> np.ndarray:
    """Plotly >= 6 writes NumPy data as base64 `bdata`; lists stay lists."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        return a.reshape([int(s) for s in v["shape"].split(",")]) if "shape" in v else a
    return np.asarray(v)


def run_prompt(at: AppTest, prompt: str) -> AppTest:
    at.text_area(key="prompt").input(prompt)
    return at.button(key="run_btn").click().run()


def reference_trace(root: Path, prompt: str) -> gptviz.Trace:
    """The same run done directly through the library, outside Streamlit."""
    bundle = gptviz.load(root / NAME)
    ids = gptviz.encode_prompt(bundle.tokenizer, prompt, bundle.model.config.block_size)
    return gptviz.trace(bundle.model, ids, bundle.tokenizer)


def rendered(md: str) -> str:
    """Markdown as the browser shows it: HTML from a CommonMark renderer (GFM tables and
    strikethrough on, as in Streamlit)."""
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)


def shown(md: str) -> str:
    """The text a person reads for a Markdown message: rendered, tags stripped."""
    return html.unescape(re.sub(r"<[^>]+>", "", rendered(md))).strip()


def html_texts(at: AppTest) -> list[str]:
    """The text of every st.html element, tags stripped (a script's or a style's body left out)."""
    bodies = (re.sub(r"<(script|style)\b.*?</\1>", "", e.proto.body, flags=re.S) for e in at.get("html"))
    return [html.unescape(re.sub(r"<[^>]+>", "", b)).strip() for b in bodies]


def slide_counter(at: AppTest) -> str:
    """The teacher's slide counter ('title · slide i of n'), as the page shows it."""
    return next(t for t in html_texts(at) if " · slide " in t)


def errors(at: AppTest) -> str:
    assert not at.exception, [e.value for e in at.exception]
    return " ".join(shown(e.value) for e in at.error)


class Upload:
    """What st.file_uploader hands the app: a name, a size and the bytes."""

    def __init__(self, name, data):
        self.name, self.data, self.size = name, data, len(data)

    def getvalue(self):
        return self.data


def upload(at: AppTest, folder: Path) -> AppTest:
    at.selectbox(key="ckpt_choice").set_value(state.Pick.UPLOAD).run()
    files = [(p.name, p.read_bytes(), "application/octet-stream") for p in sorted(folder.iterdir())]
    return at.get_by_key("ckpt_upload").set_value(files).run()


def report_rows(at: AppTest) -> dict:
    return dict(at.dataframe[1].value.itertuples(index=False))  # the Overview's load report


def page_text(at: AppTest) -> str:
    """Every message, caption, heading and table cell on the page, as one string."""
    parts = [
        e.value
        for kind in ("error", "warning", "info", "caption", "markdown", "title", "subheader")
        for e in at.get(kind)
    ]
    parts += [df.value.to_csv() for df in at.dataframe]
    parts += [t for t in html_texts(at) if t]
    return "\n".join(map(str, parts))


# Text that would be a link, an image, a heading or HTML if it ever became markup
MARKUP = [
    "[Click here to repair your checkpoint](https://example.invalid/fix)",
    "![x](https://example.invalid/pixel.png)",
    "<img src=https://example.invalid/a.png> <a href='https://example.invalid'>x</a>",
    ":red[alarm] # heading **bold** `code` $x^2$",
    "https://example.invalid/autolink www.example.invalid",
]


def no_markup(md: str) -> None:
    """What a message renders to has no link, image, heading, emphasis or HTML: only a paragraph of text."""
    out = rendered(md)
    assert not re.search(r"<(a|img|h\d|code|script|span|iframe)\b", out), out


def open_lesson_file(at: AppTest, path: Path) -> AppTest:
    """Open a lesson file by its path on the Lesson page (the page must be open), with no exception."""
    at.text_input(key="lesson_path").input(str(path)).run()
    at.button(key="lesson_path_open").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at
