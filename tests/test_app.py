"""The dashboard through Streamlit's AppTest: every page, the numbers on screen against the Trace,
caching, URL state and every bad input. Runs on a fixture checkpoint built in a temp folder."""

from __future__ import annotations

import dataclasses
import gc
import html
import io
import os
import re
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import streamlit as st
import torch
from apptest_helpers import app_session, array, figure, ok
from dashboard_fixtures import CHARS, CONFIG, NAME, make_checkpoints
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz import analysis
from gptviz.dashboard import caches, sources, state, uploads
from gptviz.figures.style import WORD_JOINER

ROOT = Path(__file__).resolve().parents[1]
PAGES = {
    "views/overview.py": "Overview",
    "views/attention.py": "Attention",
    "views/qkv.py": "Q / K / V",
    "views/shapes.py": "Shapes",
    "views/residual.py": "Residual stream",
    "views/next_token.py": "Next token",
}
PROMPT = "To be, or not to be: that is the question."
RUNS: list = []  # the ids of every run the model really did (caches.trace is wrapped to count)


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory) -> Path:
    return make_checkpoints(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture
def env(ckpt_root, monkeypatch):
    monkeypatch.setenv(sources.CHECKPOINTS_ENV, str(ckpt_root))
    monkeypatch.delenv(sources.DEFAULT_ENV, raising=False)
    monkeypatch.setenv(sources.DEFAULT_ENV, NAME)
    st.cache_resource.clear()  # process-wide: every test starts with a cold cache
    RUNS.clear()
    real = caches.trace
    monkeypatch.setattr(caches, "trace", lambda *a, **k: RUNS.append(a[1]) or real(*a, **k))
    return ckpt_root


@pytest.fixture
def at(env) -> AppTest:
    return ok(app_session())


def run_prompt(at: AppTest, prompt: str) -> AppTest:
    at.text_area(key="prompt").input(prompt)
    return at.button(key="run_btn").click().run()


def reference_trace(root: Path, prompt: str) -> gptviz.Trace:
    """The same run done directly through the library, outside Streamlit."""
    bundle = gptviz.load(root / NAME)
    ids = gptviz.encode_prompt(bundle.tokenizer, prompt, bundle.model.config.block_size)
    return gptviz.trace(bundle.model, ids, bundle.tokenizer)


def test_first_open_shows_a_result_on_the_default_model(at):
    assert at.title[0].value == "Overview"
    assert {"overview_topk", "overview_heatmap"} <= {e.key for e in at.get("plotly_chart")}
    assert at.query_params["checkpoint"] == NAME
    assert at.query_params["prompt"] == state.PRESET_PROMPT


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders(at, path):
    run_prompt(at, PROMPT)
    ok(at.switch_page(path).run())
    assert at.title[0].value == PAGES[path]
    assert at.get("plotly_chart"), "every page draws at least one figure"


def test_heatmap_equals_the_traces_weights(at, env):
    ok(run_prompt(at, PROMPT))
    at.radio(key="layer").set_value(1)
    at.radio(key="head").set_value(2)
    ok(at.switch_page("views/attention.py").run())
    z = array(figure(at, "attn_heatmap")["data"][0]["z"])
    t = reference_trace(env, PROMPT)
    expected = np.where(t["blocks.1.attn.mask"], t["blocks.1.attn.weights"][2], np.nan)
    np.testing.assert_array_equal(z, expected)  # NaN where masked, the exact float32 weights elsewhere
    assert np.isnan(z[0, 1:]).all() and not np.isnan(np.tril(z)).any()


def test_topk_bars_equal_softmax_of_the_logits(at, env):
    ok(run_prompt(at, PROMPT))
    ok(at.switch_page("views/next_token.py").run())
    bars = figure(at, "topk_bars")["data"][0]
    t = reference_trace(env, PROMPT)
    probs = torch.softmax(torch.tensor(t["logits"][-1], dtype=torch.float64), -1)
    top = torch.topk(probs, 10)
    np.testing.assert_allclose(array(bars["x"]), top.values.numpy(), rtol=1e-12)
    tok = gptviz.load(env / NAME).tokenizer
    assert [y.split(" ", 1)[1] for y in bars["y"]] == tok.display(top.indices.tolist())


def test_temperature_resoftmaxes_without_running_the_model(at, env):
    ok(run_prompt(at, PROMPT))
    ok(at.switch_page("views/next_token.py").run())
    runs = len(RUNS)
    ok(at.slider(key="temperature").set_value(2.0).run())
    x = array(figure(at, "topk_bars")["data"][0]["x"])
    logits = reference_trace(env, PROMPT)["logits"][-1]
    np.testing.assert_allclose(x, np.sort(analysis.softmax(logits, 2.0))[::-1][:10], rtol=1e-12)
    assert len(RUNS) == runs


def test_view_widgets_never_rerun_the_model(at):
    ok(run_prompt(at, PROMPT))
    assert len(RUNS) == 2  # the preset prompt, then this one
    ok(at.switch_page("views/attention.py").run())
    ok(at.radio(key="layer").set_value(1).run())
    ok(at.radio(key="head").set_value(3).run())
    ok(at.select_slider(key="position").set_value(5).run())
    ok(at.checkbox(key="attn_skip_first").check().run())
    ok(at.toggle(key="presentation").set_value(True).run())
    for path in PAGES:
        ok(at.switch_page(path).run())
    assert len(RUNS) == 2
    ok(run_prompt(at, PROMPT + " Again."))
    assert len(RUNS) == 3


def test_a_second_session_reuses_the_cached_run(at):
    run_prompt(at, PROMPT)
    ok(app_session(prompt=PROMPT))
    assert len(RUNS) == 2


def test_query_params_restore_a_view(env):
    at = ok(app_session(checkpoint=NAME, prompt=PROMPT, layer="1", head="3", position="4"))
    assert at.text_area(key="prompt").value == PROMPT
    assert (at.radio(key="layer").value, at.radio(key="head").value, at.select_slider(key="position").value) == (
        1,
        3,
        4,
    )
    ok(at.switch_page("views/attention.py").run())
    assert figure(at, "attn_heatmap")["layout"]["title"]["text"].startswith("Layer 1, head 3")
    assert "query 4 " in figure(at, "attn_lines")["layout"]["title"]["text"]
    assert at.query_params["layer"] == "1" and at.query_params["position"] == "4"


def test_changed_view_is_written_to_the_url(at):
    ok(at.radio(key="head").set_value(2).run())
    assert at.query_params["head"] == "2"


def test_presentation_mode_enlarges_fonts(at):
    small = figure(at, "overview_heatmap")["layout"]["font"]["size"]
    ok(at.toggle(key="presentation").set_value(True).run())
    assert figure(at, "overview_heatmap")["layout"]["font"]["size"] > small


# --- bad input: a message in the page, never a traceback, and the app keeps working ---------
def rendered(md: str) -> str:
    """Markdown as the browser shows it: HTML from a CommonMark renderer (GFM tables and
    strikethrough on, as in Streamlit)."""
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)


def shown(md: str) -> str:
    """The text a person reads for a Markdown message: rendered, tags stripped."""
    return html.unescape(re.sub(r"<[^>]+>", "", rendered(md))).strip()


def errors(at: AppTest) -> str:
    assert not at.exception, [e.value for e in at.exception]
    return " ".join(shown(e.value) for e in at.error)


def test_empty_prompt(at):
    assert "the prompt is empty" in errors(run_prompt(at, ""))
    assert "Nothing to show" in at.info[0].value
    ok(run_prompt(at, PROMPT))


def test_too_long_prompt_offers_to_keep_the_last_block(at):
    long = "All the world's a stage. " * 4  # 100 characters, block_size is 64
    assert "at most 64" in errors(run_prompt(at, long))
    ok(at.button(key="fix_long_btn").click().run())
    assert "last 64 tokens" in at.info[0].value
    ok(at.switch_page("views/shapes.py").run())
    assert any(m.label.startswith("T ") and m.value == "64" for m in at.metric)


def test_unknown_characters_offer_to_drop_them(at):
    assert "does not know 2 character(s)" in errors(run_prompt(at, "Café | bar"))
    ok(at.button(key="fix_unknown_btn").click().run())
    assert "Dropped 2 unknown" in at.info[0].value
    assert at.query_params["prompt"] == "Café | bar"


def test_checkpoint_that_fails_to_load(at, env):
    at.selectbox(key="ckpt_choice").set_value(state.Pick.PATH).run()
    at.text_input(key="ckpt_path").input(str(env / "broken")).run()
    msg = errors(at)
    assert "Checkpoint not loaded" in msg and "config.json" in msg
    at.text_input(key="ckpt_path").input(str(env / "nowhere")).run()
    assert "no such file or directory" in errors(at)
    ok(at.selectbox(key="ckpt_choice").set_value(NAME).run())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_gpu_that_is_not_there(at):
    msg = errors(at.radio(key="device").set_value("cuda").run())
    assert "Device not available" in msg and "CUDA" in msg
    assert at.get("plotly_chart"), "the app keeps working on CPU"


def test_no_shipped_checkpoint_falls_back_to_the_demo_model(tmp_path, monkeypatch, env):
    monkeypatch.setenv(sources.CHECKPOINTS_ENV, str(tmp_path))
    monkeypatch.delenv(sources.DEFAULT_ENV)
    at = app_session()
    assert not at.exception and not at.error
    assert "No shipped checkpoint" in at.sidebar.warning[0].value
    assert at.get("plotly_chart")


class Upload:
    """What st.file_uploader hands the app: a name, a size and the bytes."""

    def __init__(self, name, data):
        self.name, self.data, self.size = name, data, len(data)

    def getvalue(self):
        return self.data


def test_upload_is_size_limited_and_held_in_memory(env):
    owner = uploads.SessionUploads()
    files = [Upload(p.name, p.read_bytes()) for p in (env / NAME).iterdir()]
    saved = owner.save(files, 10, sources.UPLOAD_LIMIT_ENV)
    assert isinstance(saved.path, gptviz.MemoryPath) and gptviz.load(saved.path).model.config.n_layer == 2
    assert saved.files == {f.name: f.data for f in files}  # the bytes as uploaded, nowhere else
    with pytest.raises(gptviz.CheckpointError, match="limit"):
        owner.save(files, 0, sources.UPLOAD_LIMIT_ENV)
    for bad in ("../evil.json", ".hidden", "a b.json", "ckpt\\x.pt", "é.pt", ""):
        with pytest.raises(gptviz.CheckpointError, match="plain file names"):
            owner.save([Upload(bad, b"{}")], 10, sources.UPLOAD_LIMIT_ENV)
    owner.close()
    assert owner.current(saved.source) is None


def test_uploads_off_on_a_class_server(env, monkeypatch):
    """GPTVIZ_MAX_UPLOAD_MB=0: no upload box on the sidebar or the Corpus page, so no session's upload
    can take the server's memory (Streamlit holds an uploaded file's bytes for its session)."""
    monkeypatch.setenv(sources.UPLOAD_LIMIT_ENV, "0")
    at = ok(app_session())
    at.selectbox(key="ckpt_choice").set_value(state.Pick.UPLOAD).run()
    assert not at.exception and not at.get("file_uploader")
    assert any(f"{sources.UPLOAD_LIMIT_ENV}=0" in i.value for i in at.sidebar.info)
    at.selectbox(key="ckpt_choice").set_value(NAME).run()
    ok(at.switch_page("views/corpus.py").run())
    ok(at.radio(key="corpus_mode").set_value("run a new scan").run())
    kinds = at.selectbox(key="corpus_source").options
    assert "a path on this server" in kinds and not any("upload" in k for k in kinds)


def test_scores_view_and_token_lookup(at, env):
    ok(run_prompt(at, PROMPT))
    ok(at.switch_page("views/attention.py").run())
    ok(at.button_group(key="attn_kind").set_value("scores").run())
    t = reference_trace(env, PROMPT)
    z = array(figure(at, "attn_heatmap")["data"][0]["z"])
    np.testing.assert_array_equal(z, t["blocks.0.attn.scores"][0])  # before the mask: every cell
    ok(at.switch_page("views/next_token.py").run())
    ok(at.text_input(key="lookup_token").input("e").run())
    tok = gptviz.load(env / NAME).tokenizer
    rank, p = analysis.token_rank(t["logits"][-1], tok.encode("e")[0])
    assert {m.label: m.value for m in at.metric}["Rank"] == f"{rank} of {len(tok.itos)}"
    at.text_input(key="lookup_token").input("~").run()
    assert "does not know" in errors(at)


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
    return "\n".join(map(str, parts))


def test_uploaded_checkpoint_is_named_by_its_files_not_a_server_path(at, env):
    at.selectbox(key="ckpt_choice").set_value(state.Pick.UPLOAD).run()
    assert "Choose a checkpoint" in at.info[0].value
    ok(upload(at, env / NAME))
    names = ", ".join(sorted(p.name for p in (env / NAME).iterdir()))
    assert report_rows(at)["path"] == f"upload: {names}"
    assert "/tmp" not in page_text(at) and "upload:" + at.session_state["_uploads"].token not in page_text(at)
    assert any(f"upload: {names}" in shown(c.value) for c in at.caption)
    assert at.query_params["checkpoint"] == "upload" and at.query_params["upload"] == names


def test_a_broken_upload_is_named_by_its_files(at, env):
    at = upload(at, env / "broken")
    msg = errors(at)
    assert msg.startswith("Checkpoint not loaded: config.json: "), msg
    assert "/tmp" not in page_text(at)


def test_an_upload_is_read_once_and_a_head_click_does_not_rerun(at, env, monkeypatch):
    loads = []
    real = caches.load
    monkeypatch.setattr(caches, "load", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    ok(upload(at, env / NAME))
    runs = len(RUNS)
    owner = at.session_state["_uploads"]
    held = owner._last[1]
    for head in (1, 2, 3):
        ok(at.radio(key="head").set_value(head).run())
    assert len(RUNS) == runs and len(loads) == 1  # three clicks: no reload, no rerun of the model
    assert owner.current(held.source) is held  # the same bytes, not hashed or copied again
    assert isinstance(loads[0], gptviz.MemoryPath)  # loaded from memory, never from a file


def test_reuploading_the_same_names_keeps_one_copy(at, env, tmp_path):
    ok(upload(at, env / NAME))
    owner = at.session_state["_uploads"]
    first = owner._last[1]
    torch.manual_seed(5)  # the same file names, other weights
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), tmp_path / NAME, gptviz.CharTokenizer(CHARS))
    ok(upload(at, tmp_path / NAME))
    second = owner._last[1]
    assert first.digest != second.digest and first.names == second.names
    assert owner.current(first.source) is None and owner.current(second.source) is second


def test_another_session_cannot_open_an_upload(at, env):
    """An upload is its session's alone: its content name typed in another session (the URL, a path
    box, Compare's checkpoint B) opens nothing, even while the owner's model is in the cache."""
    ok(upload(at, env / NAME))
    source = at.session_state["_uploads"]._last[1].source
    typed = app_session(checkpoint=source)  # a typed path is a path: "./upload:…" is no file
    assert "no such file" in errors(typed) and not typed.get("plotly_chart")
    other = ok(app_session())
    ok(other.switch_page("views/compare.py").run())
    other.radio(key="cmp_mode").set_value("one prompt, two checkpoints").run()
    other.selectbox(key="cmp_ckpt_b").set_value("a local path…").run()
    other.text_input(key="cmp_path_b").input(source).run()
    assert "no such upload" in errors(other), errors(other)
    assert len(other.get("plotly_chart")) == 0


def test_an_upload_is_freed_when_its_session_ends(env):
    at = ok(upload(app_session(), env / NAME))
    held = weakref.ref(at.session_state["_uploads"]._last[1])
    assert held() is not None
    del at
    gc.collect()
    assert held() is None  # its bytes went with the session; the cached model holds none of them


def test_a_checkpoint_rewritten_in_place_is_loaded_again(tmp_path, monkeypatch, env):
    make_checkpoints(tmp_path)
    monkeypatch.setenv(sources.CHECKPOINTS_ENV, str(tmp_path))
    at = ok(app_session())
    before = array(figure(at, "overview_topk")["data"][0]["x"])
    torch.manual_seed(99)  # the same shape, new weights: as a training run saving as it goes
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), tmp_path / NAME, gptviz.CharTokenizer(CHARS))
    ok(at.run())
    assert len(RUNS) == 2
    assert not np.array_equal(array(figure(at, "overview_topk")["data"][0]["x"]), before)


def test_an_unexpected_error_is_a_message_not_a_traceback(at, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(analysis, "top_k", broken)
    at.run()
    assert not at.exception
    assert "Internal error while drawing this page (RuntimeError: boom)" in errors(at)


SHIPPED = sorted(p.name for p in (ROOT / "checkpoints").glob("*") if (p / "config.json").is_file())


@pytest.mark.skipif(not SHIPPED, reason="no shipped checkpoint in checkpoints/ yet")
@pytest.mark.parametrize("name", SHIPPED)
def test_every_page_renders_on_the_shipped_checkpoints(name, monkeypatch):
    monkeypatch.setenv(sources.CHECKPOINTS_ENV, str(ROOT / "checkpoints"))
    monkeypatch.setenv(sources.DEFAULT_ENV, name)
    st.cache_resource.clear()
    at = ok(app_session())
    for path, title in PAGES.items():
        ok(at.switch_page(path).run())
        assert at.title[0].value == title and at.get("plotly_chart")


# --- untrusted input: user text stays text, bad numbers are messages, failures are remembered ---
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


@pytest.mark.parametrize("text", MARKUP)
def test_a_checkpoint_path_in_the_url_is_shown_as_text(env, text):
    at = app_session(checkpoint=text)
    msg = errors(at)
    assert str(Path(text)) in msg.replace(WORD_JOINER, ""), msg  # as typed (a path collapses "//")
    for e in [*at.error, *at.info, *at.warning, *at.caption]:
        no_markup(e.value)


@pytest.mark.parametrize("text", MARKUP)
def test_a_prompt_with_markup_is_shown_as_text(env, text):
    at = app_session(prompt=text + " | ~")  # unknown characters: the message quotes the prompt's characters
    assert "does not know" in errors(at)
    at = ok(app_session(prompt=text.replace("`", "'")[:60]))  # runs: the chips and captions quote the tokens
    for kind in ("error", "info", "warning", "caption", "subheader"):
        for e in at.get(kind):
            no_markup(e.value)
    ok(at.switch_page("views/qkv.py").run())
    for e in [*at.caption, *at.subheader]:
        no_markup(e.value)


def test_plain_escapes_every_markdown_character():
    from gptviz.dashboard.widgets import plain

    for text in [*MARKUP, "a\\b", "*_~`|<>&#!", "1. item", "- item", "> quote"]:
        # as typed, but for the invisible word joiners that keep addresses from becoming links
        assert shown(plain(text)).replace(WORD_JOINER, "") == text.strip(), (text, rendered(plain(text)))
        no_markup(plain(text))


@pytest.mark.parametrize(
    "query",
    [
        {"layer": "²"},
        {"head": "٣"},
        {"position": "99999999999999999999999"},
        {"layer": "-1"},
        {"head": "1e3"},
        {"position": " 4"},
        {"layer": "1.5"},
        {"device": "bogus"},
        {"prompt": ""},
        {"prompt": "x" * 5000},
    ],
)
def test_bad_url_values_are_ignored_or_explained(env, query):
    at = app_session(**query)
    assert not at.exception, [e.value for e in at.exception]
    assert "Internal error" not in errors(at)
    if "prompt" not in query:
        assert at.get("plotly_chart") and at.radio(key="layer").value == 0 and at.radio(key="head").value == 0


@pytest.fixture
def ids_only(tmp_path, monkeypatch, env):
    """A checkpoint with no tokenizer: prompts and lookups are token ids (vocabulary 95)."""
    torch.manual_seed(3)
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), tmp_path / "ids-only")
    monkeypatch.setenv(sources.CHECKPOINTS_ENV, str(tmp_path))
    monkeypatch.setenv(sources.DEFAULT_ENV, "ids-only")
    return ok(app_session(prompt="1, 2, 3"))


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("999999", "outside the vocabulary"),
        ("-1", "not one"),
        ("1.5", "not one"),
        ("99999999999999999999999", "outside the vocabulary"),
        ("True", "not one"),
        ("²", "not one"),
        (str(len(CHARS)), "outside the vocabulary"),
    ],
)
def test_token_lookup_refuses_bad_ids(ids_only, typed, expected):
    at = ok(ids_only.switch_page("views/next_token.py").run())
    at.text_input(key="lookup_token").input(typed).run()
    assert expected in errors(at) and "Internal error" not in errors(at)
    assert "Rank" not in {m.label for m in at.metric}
    ok(at.text_input(key="lookup_token").input(str(len(CHARS) - 1)).run())
    assert {m.label: m.value for m in at.metric}["Rank"].endswith(f"of {len(CHARS)}")


@pytest.mark.parametrize("typed", ["99999999999999999999999", "1, 95", "-1", "1 2 x", "1,,2.0", "0x10"])
def test_bad_ids_in_the_prompt_box_are_a_message(ids_only, typed):
    at = run_prompt(ids_only, typed)
    assert "no tokenizer" in errors(at) and not at.get("plotly_chart")
    ok(run_prompt(at, "4, 5, 6"))


def test_too_many_ids_offer_to_keep_the_last_block(ids_only):
    at = run_prompt(ids_only, " ".join(["7"] * 70))
    assert "at most 64" in errors(at)
    ok(at.button(key="fix_long_btn").click().run())
    assert at.query_params["keep_last"] == "1"


def test_a_failed_load_is_remembered_for_that_version(at, env, monkeypatch, tmp_path):
    loads = []
    real = caches.load
    monkeypatch.setattr(caches, "load", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"gptviz_format": 1, "config": {"n_layer": "two"}}')
    at.selectbox(key="ckpt_choice").set_value(state.Pick.PATH).run()
    at.text_input(key="ckpt_path").input(str(broken)).run()
    for _ in range(3):
        assert "Checkpoint not loaded" in errors(at.run())
    assert len(loads) == 1
    assert "Checkpoint not loaded" in errors(app_session(checkpoint=str(broken)))  # another session: still once
    assert len(loads) == 1
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), broken, gptviz.CharTokenizer(CHARS))  # a new version
    ok(at.run())
    assert len(loads) == 2


def test_the_version_stamp_reads_only_what_a_loader_reads(tmp_path, monkeypatch):
    folder = tmp_path / "big"
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), folder, gptviz.CharTokenizer(CHARS))
    for i in range(20_000):  # training logs, samples, old checkpoints: none of them is loaded
        (folder / f"sample_{i}.txt").touch()
    calls = []
    real = Path.stat
    monkeypatch.setattr(Path, "stat", lambda self, **k: calls.append(self) or real(self, **k))
    stamp = sources.version(str(folder))
    assert len([p for p in calls if folder in (p, p.parent)]) <= len(sources.LOADER_FILES) + 4  # not 20,000
    assert "model.safetensors" in stamp and "sample_" not in stamp
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())  # rewritten in place
    os.utime(folder / "model.safetensors", ns=(1, 1))
    assert sources.version(str(folder)) != stamp


# --- what a load found: a banner at the top of every page ----------------------------------
def test_nan_weights_show_a_banner_on_every_page(tmp_path, monkeypatch, env):
    torch.manual_seed(4)
    model = gptviz.GPT(gptviz.GPTConfig(**CONFIG))
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[0, 0] = float("nan")
    gptviz.save(model, tmp_path / "nan", gptviz.CharTokenizer(CHARS))
    monkeypatch.setenv(sources.CHECKPOINTS_ENV, str(tmp_path))
    monkeypatch.setenv(sources.DEFAULT_ENV, "nan")
    at = app_session()
    assert not at.exception
    for path in PAGES:
        at.switch_page(path).run()
        banner = " ".join(shown(w.value) for w in at.warning)
        assert "NaN" in banner and "transformer.h.1.mlp.c_fc.weight" in banner, path


def test_missing_and_unexpected_keys_are_summarised_in_the_banner(at, env, monkeypatch):
    real = caches.load

    def with_keys(*args, **kwargs):
        bundle = real(*args, **kwargs)
        report = dataclasses.replace(
            bundle.report,
            missing=[f"transformer.h.{i}.attn.c_attn.weight" for i in range(16_000)],
            unexpected=["transformer.h.7.mlp.c_fc.weight"],
        )
        return dataclasses.replace(bundle, report=report)

    monkeypatch.setattr(caches, "load", with_keys)
    st.cache_resource.clear()
    at.run()
    banner = " ".join(shown(w.value) for w in at.warning)
    assert "16,000 weights missing" in banner and "15,997 more" in banner
    assert "1 weights in the file that the model does not use (is the model truncated?)" in banner
    assert len(banner) < 1000


# --- the prompt: several lines, and what the URL keeps ---------------------------------------
def test_a_multi_line_prompt_from_the_url_is_kept(env):
    prompt = "First Citizen:\nBefore we proceed, hear me.\n\nAll:\nSpeak."
    at = ok(app_session(prompt=prompt))
    assert at.text_area(key="prompt").value == prompt
    ok(at.switch_page("views/shapes.py").run())
    assert any(m.label.startswith("T ") and m.value == str(len(prompt)) for m in at.metric)
    ok(at.radio(key="head").set_value(1).run())
    assert at.query_params["prompt"] == prompt


def test_keep_last_and_the_upload_names_survive_a_reload(at, env):
    long = "All the world's a stage. " * 4
    assert "at most 64" in errors(run_prompt(at, long))
    ok(at.button(key="fix_long_btn").click().run())
    reloaded = ok(app_session(**{k: at.query_params[k] for k in at.query_params}))
    assert "last 64 tokens" in reloaded.info[0].value and reloaded.get("plotly_chart")
    ok(upload(at, env / NAME))
    names = at.query_params["upload"]
    again = app_session(checkpoint="upload", upload=names)
    assert not again.exception and names in shown(again.info[0].value) and "again" in again.info[0].value


# --- memory: nothing but the caches holds a Trace between runs -------------------------------
def test_a_download_button_holds_a_copy_not_the_page(monkeypatch):
    """Streamlit keeps a download button's callable for the session's life: it must not keep what
    the page's lambda closes over (in a page, its globals: the Trace)."""
    from gptviz.dashboard import widgets

    kept = []
    monkeypatch.setattr(st, "download_button", lambda label, data, **kwargs: kept.append(data))

    class Big:  # stands in for a Trace: a weakref tells when nothing holds it any more
        def __init__(self):
            self.weights = np.arange(12.0).reshape(3, 4)

    def page() -> weakref.ref:  # as a page script does: lambdas over what the page holds
        big = Big()
        widgets.download("w", lambda: {"weights": big.weights[1]}, "w.npz", key="w")
        widgets.download("t", lambda: pd.DataFrame({"x": big.weights[0]}), "t.csv", key="t")
        return weakref.ref(big)

    alive = page()
    gc.collect()
    assert alive() is None  # the buttons' callables hold copies only
    with np.load(io.BytesIO(kept[0]())) as npz:
        np.testing.assert_array_equal(npz["weights"], [4.0, 5.0, 6.0, 7.0])
    assert kept[1]().decode().split() == ["x", "0.0", "1.0", "2.0", "3.0"]


def test_the_dashboard_fixes_the_mmap_threshold_so_evicted_traces_leave_the_process():
    import platform

    from gptviz.dashboard import memory

    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert memory.fix_mmap_threshold() is True
    else:  # elsewhere there is no glibc threshold to fix, and the call must say so, not fail
        assert memory.fix_mmap_threshold() is False


def test_forward_passes_of_different_sessions_run_one_at_a_time(env, monkeypatch):
    """caches.FORWARD: sessions' threads running passes side by side handed the GIL back and forth at
    every torch operation (30 prompts at once cost 2.5 times the CPU of the same runs in turn)."""
    import threading
    import time

    inside, most, lock = [0], [0], threading.Lock()
    real = caches.trace

    def slow_trace(*a, **k):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)  # long enough for the other threads to arrive while this pass runs
        try:
            return real(*a, **k)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(caches, "trace", slow_trace)
    model = caches.ModelKey(NAME, "cpu", sources.version(NAME))
    keys = [caches.RunKey(model, (1, 2, i)) for i in range(3, 7)]  # four runs, four cache entries
    threads = [threading.Thread(target=caches.run_trace, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(not t.is_alive() for t in threads)
    assert most[0] == 1


def test_the_mask_leak_runs_wait_for_the_forward_lock(env):
    """The Mask leak page's two passes, and a mask-leak slide's, take caches.FORWARD too: while
    another session's pass holds it they wait, and then finish."""
    import threading

    from gptviz.dashboard import slides, whatif
    from gptviz.lessons import Slide

    model = caches.ModelKey(NAME, "cpu", sources.version(NAME))
    slide = Slide(page="mask-leak", title="t", checkpoint=NAME, prompt="abc")
    slides.slide_content(dataclasses.replace(slide, title="first"), model)  # the prompt's run cached: not what waits
    runs = {
        "leak_run": lambda: whatif.leak_run(caches.RunKey(model, (1, 2, 3, 4))),
        "slide": lambda: slides.slide_content(slide, model),
    }
    for name, run in runs.items():
        done = threading.Event()
        with caches.FORWARD:
            t = threading.Thread(target=lambda r=run: (r(), done.set()))
            t.start()
            assert not done.wait(0.5), f"{name} ran while another pass held the lock"
        t.join(60)
        assert done.is_set(), f"{name} did not finish once the lock was free"


def test_nothing_cached_is_called_holding_the_forward_lock(env):
    """A cached value is computed under Streamlit's lock for its key, taken before caches.FORWARD on
    every path: called the other way round (FORWARD, then a cached function) two sessions computing
    the same run could wait on each other for good, so that call raises."""
    import threading

    model = caches.ModelKey(NAME, "cpu", sources.version(NAME))
    key = caches.RunKey(model, (1, 2, 3))
    caches.run_trace(key)  # the usual order: cached function, then FORWARD inside it
    with caches.FORWARD, pytest.raises(RuntimeError, match="holding caches.FORWARD"):
        caches.run_trace(key)
    # what the guard stops: one thread holds the key's compute lock and waits for FORWARD, the other
    # holds FORWARD and asks for the same key (run in threads: without the guard they hang, not the test)
    other, done, raised = caches.RunKey(model, (3, 2, 1)), threading.Event(), []

    def holder() -> None:
        with caches.FORWARD:
            t = threading.Thread(target=lambda: (caches.run_trace(other), done.set()), daemon=True)
            t.start()
            assert not done.wait(0.3)  # it holds the key's compute lock now and waits for FORWARD
            try:
                caches.run_trace(other)
            except RuntimeError as e:
                raised.append(e)

    h = threading.Thread(target=holder, daemon=True)
    h.start()
    h.join(30)
    assert not h.is_alive() and raised, "FORWARD, then a cached function: the two threads wait on each other"
    assert done.wait(30)  # the other thread's run goes on once FORWARD is free
