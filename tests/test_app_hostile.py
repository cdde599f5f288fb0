"""Hostile surroundings through AppTest (issue 21): a folder name that is not UTF-8, a NUL byte in a
path from the URL or a text box, and text that GitHub-flavoured Markdown would turn into a link.
Each gets one line in the page, on every page, never an internal error."""

from __future__ import annotations

import html
import os
import re
import shutil
from pathlib import Path

import pytest
from apptest_helpers import app_session, ok, serve
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from gptviz.bench.checkpoints import NAME, make_checkpoints, make_overtime_checkpoints
from gptviz.dashboard.pages import PAGES
from gptviz.dashboard.widgets import plain
from gptviz.figures.style import WORD_JOINER

ROOT = Path(__file__).resolve().parents[1]
VIEWS = [page.file for page in PAGES]  # every page of the registry the router is built from
UNDECODABLE = os.fsdecode(b"run-\xff\xfe")  # what os.listdir gives for a name that is not UTF-8
LINK_NAME = "[click](mailto:x@example.invalid)"

# GitHub-flavoured Markdown's autolink extension (GFM spec 0.29, section 6.9), which Streamlit's
# renderer applies to the text after escapes are resolved: www. after a line start, space or one of
# * _ ~ (; http:// and https://; and an e-mail address.
GFM_AUTOLINKS = [
    re.compile(r"(?:^|[\s*_~(])www\.[\w-]", re.I),
    re.compile(r"https?://[\w-]", re.I),
    re.compile(r"[\w.+-]+@[\w-]+\.[\w-]"),
]


def text_of(md: str) -> str:
    """What a person reads for a Markdown body: rendered by a CommonMark renderer, tags stripped."""
    out = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    return html.unescape(re.sub(r"<[^>]+>", "", out)).strip()


def links_in(md: str) -> list[str]:
    """The CommonMark links and the GFM autolinks a Markdown body would show. GFM links inside one
    text node: the text between two tags (a chip's token, or a whole message)."""
    out = MarkdownIt("commonmark").render(md)
    texts = [html.unescape(t) for t in re.split(r"<[^>]+>", out)]
    return re.findall(r"<a\b[^>]*>", out) + [m.group(0) for r in GFM_AUTOLINKS for t in texts for m in r.finditer(t)]


def hostile_links(at: AppTest) -> list[str]:
    """Links on the page to the addresses the tests type. The app's own links (to its pages, the
    prompt in their query) are fine; a link to another host, a mailto: or an autolink is not."""
    found = [link for body in bodies(at) for link in links_in(body)]
    return [link for link in found if not link.startswith("<a") or re.search(r'href="(mailto:|\w+://|www)', link)]


def bodies(at: AppTest) -> list[str]:
    """Every Markdown body on the page and in the sidebar."""
    kinds = ("error", "warning", "info", "caption", "markdown", "subheader", "title", "success")
    return [str(e.value) for kind in kinds for e in at.get(kind)]


def no_internal_error(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not any("Internal error" in str(e.value) for e in at.error), [e.value for e in at.error]


@pytest.fixture
def root(tmp_path, monkeypatch):
    root = make_checkpoints(tmp_path / "checkpoints")
    serve(monkeypatch, root, NAME)
    return root


# --- file names are data ------------------------------------------------------------------------
def test_a_folder_name_that_is_not_utf8_is_left_out_with_one_line(root):
    shutil.copytree(root / NAME, root / UNDECODABLE)
    at = ok(app_session())
    assert at.get("plotly_chart"), "every other checkpoint still works"
    said = [c.value for c in at.sidebar.caption if "Left out" in c.value]
    assert len(said) == 1 and "run-\\xff\\xfe" in text_of(said[0]), said
    assert UNDECODABLE not in at.selectbox(key="ckpt_choice").options


def test_a_run_folder_holding_a_name_that_is_not_utf8_still_draws_its_timeline(tmp_path, monkeypatch):
    root = make_overtime_checkpoints(tmp_path / "checkpoints")
    serve(monkeypatch, root, NAME)
    run = next(p for p in root.iterdir() if p.is_dir() and any(p.glob("step-*")))
    (run / UNDECODABLE).write_bytes(b"notes")  # a stray file: the stamp of the folder names it
    at = ok(app_session())
    ok(at.switch_page("views/timeline.py").run())
    assert at.get("plotly_chart"), [e.value for e in at.info]


@pytest.mark.parametrize("view", VIEWS)
def test_a_nul_byte_in_the_url_is_one_line_on_every_page(root, view):
    at = app_session(checkpoint="\x00")
    at.switch_page(view).run()
    no_internal_error(at)
    lines = [text_of(e.value) for e in at.error]
    assert any("a path cannot contain a NUL byte" in line for line in lines), lines


def test_a_nul_byte_in_the_timeline_path_is_one_line(root):
    at = ok(app_session())
    ok(at.switch_page("views/timeline.py").run())
    at.selectbox(key="tl_run").set_value("a local path…").run()
    at.text_input(key="tl_path").input("runs/\x00/x").run()
    no_internal_error(at)
    assert "a path cannot contain a NUL byte" in text_of(at.error[0].value)


def test_a_nul_byte_in_compares_checkpoint_b_is_one_line(root):
    at = ok(app_session())
    ok(at.switch_page("views/compare.py").run())
    at.radio(key="cmp_mode").set_value("one prompt, two checkpoints").run()
    at.selectbox(key="cmp_ckpt_b").set_value("a local path…").run()
    at.text_input(key="cmp_path_b").input("a\x00b").run()
    no_internal_error(at)
    assert "a path cannot contain a NUL byte" in text_of(at.error[0].value)


# --- user text only as text ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "text", ["www.evil.example/login", "x@example.invalid", "see https://example.invalid/a?b", "_www.a.example"]
)
def test_plain_text_makes_no_autolink_and_reads_the_same(text):
    md = plain(text)
    assert links_in(md) == [], md
    assert text_of(md).replace(WORD_JOINER, "") == text
    assert links_in(text) != [], "the check itself sees the link the raw text would make"


@pytest.mark.parametrize("text", ["www.evil.example/login", "x@example.invalid"])
def test_a_checkpoint_in_the_url_makes_no_link(root, text):
    at = app_session(checkpoint=text)
    no_internal_error(at)
    assert any(text in text_of(e.value).replace(WORD_JOINER, "") for e in at.error)
    assert hostile_links(at) == []


def test_a_checkpoint_folder_named_like_a_link_makes_no_link_in_the_overview(root):
    shutil.copytree(root / NAME, root / LINK_NAME)
    at = ok(app_session(checkpoint=LINK_NAME))
    assert any(LINK_NAME in text_of(c.value).replace(WORD_JOINER, "") for c in at.caption)
    assert hostile_links(at) == []


def test_a_prompt_with_an_address_makes_no_link_on_any_page(root):
    at = ok(app_session(prompt="mail x@example.invalid or see www.example.invalid"))
    for view in VIEWS:
        at.switch_page(view).run()
        no_internal_error(at)
        assert hostile_links(at) == [], view


# --- the Corpus page: its scans folder in the shared temp folder, and its path boxes ---------------
def test_the_scans_folder_is_private_and_never_a_symlink(tmp_path, monkeypatch):
    from gptviz.errors import OutputError
    from gptviz.scanning import jobs as scan_jobs

    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    corpus = scan_jobs.save_upload("notes.txt", b"private words")
    assert os.stat(tmp_path / "scans").st_mode & 0o777 == 0o700
    assert os.stat(corpus.parent).st_mode & 0o777 == 0o700 and os.stat(corpus).st_mode & 0o777 == 0o600
    elsewhere = tmp_path / "someone-elses"
    elsewhere.mkdir()
    (elsewhere / "2019-photos").mkdir()
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "planted"))
    (tmp_path / "planted").symlink_to(elsewhere)  # a name in /tmp that another user made first
    with pytest.raises(OutputError, match="symbolic link"):
        scan_jobs.save_upload("notes.txt", b"private words")
    assert [p.name for p in elsewhere.iterdir()] == ["2019-photos"]  # nothing written there, nothing deleted
    open_to_all = tmp_path / "open"
    open_to_all.mkdir(mode=0o777)
    os.chmod(open_to_all, 0o777)
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(open_to_all))
    with pytest.raises(OutputError, match="others can read or write it"):
        scan_jobs.save_upload("notes.txt", b"x")


def test_a_nul_byte_in_the_corpus_pages_paths_is_one_line(root, monkeypatch, tmp_path):
    from gptviz.scanning import jobs as scan_jobs

    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    at = ok(app_session())
    ok(at.switch_page("views/corpus.py").run())
    at.radio(key="corpus_mode").set_value("open a scan folder").run()
    at.text_input(key="corpus_folder").input("scans/\x00")
    at.button(key="corpus_open_folder").click().run()
    no_internal_error(at)
    assert "a path cannot contain a NUL byte" in text_of(at.error[0].value)
    at.radio(key="corpus_mode").set_value("run a new scan").run()
    at.selectbox(key="corpus_source").set_value("a path on this server").run()
    at.text_input(key="corpus_path").input("corpus\x00.txt").run()
    no_internal_error(at)
    assert "a path cannot contain a NUL byte" in text_of(at.error[0].value)


def test_a_checkpoint_card_shown_in_a_presentation_table_makes_no_link(root):
    """In presentation mode tables are st.table, whose cells Streamlit renders as Markdown: a card
    value from a checkpoint's config.json must reach them escaped."""
    import json

    planted = root / "planted"
    shutil.copytree(root / NAME, planted)
    cfg = json.loads((planted / "config.json").read_text())
    cfg["card"] = {
        **cfg.get("card", {}),
        "trained_on": "[Log in](https://evil.example/x) ![](https://evil.example/t.png)",
    }
    (planted / "config.json").write_text(json.dumps(cfg))
    at = ok(app_session(checkpoint="planted", present="1"))
    cells = [str(x) for t in at.table for x in [*t.value.to_numpy().ravel(), *t.value.index]]
    assert any("evil.example/x" in text_of(c).replace(WORD_JOINER, "") for c in cells), "the card reaches a table"
    for c in cells:
        out = MarkdownIt("commonmark").render(c)
        assert not re.search(r"<(a|img)\b", out), c
