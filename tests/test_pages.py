"""The page registry (gptviz.dashboard.pages): every page named once, by key, with the titles and URL
paths users bookmark and tests click unchanged."""

import ast
import re
from pathlib import Path

from gptviz import lessons
from gptviz.dashboard import pages

ROOT = Path(__file__).resolve().parents[1]
VIEW_FILE = re.compile(r"views/\w+\.py")
MARKUP = re.compile(r"<(span|div|b|p|a|table|br)\b")  # HTML a page would build itself

# Title and URL path of every page as the router listed them before the registry (bookmarks depend on them).
BOOKMARKED = {
    "overview": "Overview",
    "attention": "Attention",
    "qkv": "Q / K / V",
    "shapes": "Shapes",
    "residual": "Residual stream",
    "next-token": "Next token",
    "heads": "Heads",
    "logit-lens": "Logit lens",
    "attribution": "Logit attribution",
    "health": "Health",
    "features": "Features",
    "graph": "Graph",
    "corpus": "Corpus",
    "interventions": "Interventions",
    "patching": "Patching",
    "generate": "Generate",
    "compare": "Compare",
    "timeline": "Timeline",
    "worked-examples": "Worked examples",
    "forward-pass": "Forward pass",
    "mask-leak": "Mask leak",
    "lesson": "Lesson",
}


def test_every_bookmarked_page_keeps_its_title_and_url_path():
    assert {p.key: p.title for p in pages.PAGES} == BOOKMARKED
    assert len(pages.BY_KEY) == len(pages.PAGES)  # keys unique
    assert [p.key for p in pages.PAGES if p.default] == ["overview"]


def test_every_page_file_is_in_views_and_every_view_is_registered():
    files = {p.file for p in pages.PAGES}
    assert all(f.startswith("views/") and (ROOT / f).is_file() for f in files)
    on_disk = {f"views/{p.name}" for p in (ROOT / "views").glob("[a-z]*.py")}
    assert on_disk == files
    assert not (ROOT / "pages").exists()  # a pages/ folder switches Streamlit to its old multipage mode


def test_lesson_slides_open_registered_pages():
    assert set(lessons.PAGES.values()) <= set(pages.BY_KEY)


def test_no_page_is_named_by_file_outside_the_registry():
    """The router, the lessons, the library and every page name a page by key: a file name in a string
    anywhere else would break silently when a page is renamed."""
    registry = ROOT / "gptviz" / "dashboard" / "pages.py"
    sources = [ROOT / "app.py", *(ROOT / "gptviz").rglob("*.py"), *(ROOT / "views").glob("*.py")]
    named = []
    for path in sources:
        if path == registry:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and VIEW_FILE.search(node.value):
                named.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert named == []


def test_page_files_are_thin():
    """Every page file is at most 200 lines and builds no HTML of its own (figures/ and dashboard/ do)."""
    too_long, markup = [], []
    for spec in pages.PAGES:
        text = (ROOT / spec.file).read_text()
        if len(text.splitlines()) > 200:
            too_long.append(f"{spec.file}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and MARKUP.search(node.value):
                markup.append(f"{spec.file}:{node.lineno}")
    assert too_long == [] and markup == []
