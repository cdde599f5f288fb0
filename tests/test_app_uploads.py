"""Uploaded checkpoints: bounded and held in memory, named by their files, read once, one session's
alone, freed with it, and off on a class server."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from apptest_helpers import (
    RUNS,
    Upload,
    app_session,
    errors,
    ok,
    page_text,
    report_rows,
    shown,
    upload,
)

import gptviz
from gptviz.bench.checkpoints import CHARS, CONFIG, NAME
from gptviz.dashboard import caches, keys, state
from gptviz.dashboard.sources import checkpoints, uploads
from gptviz.dashboard.widgets import plain


def test_upload_is_size_limited_and_held_in_memory(env):
    owner = uploads.SessionUploads()
    files = [Upload(p.name, p.read_bytes()) for p in (env / NAME).iterdir()]
    saved = owner.save(files, 10, checkpoints.UPLOAD_LIMIT_ENV)
    assert isinstance(saved.path, gptviz.MemoryPath) and gptviz.load(saved.path).model.config.n_layer == 2
    assert saved.files == {f.name: f.data for f in files}  # the bytes as uploaded, nowhere else
    with pytest.raises(gptviz.CheckpointError, match="limit"):
        owner.save(files, 0, checkpoints.UPLOAD_LIMIT_ENV)
    for bad in ("../evil.json", ".hidden", "a b.json", "ckpt\\x.pt", "é.pt", ""):
        with pytest.raises(gptviz.CheckpointError, match="plain file names"):
            owner.save([Upload(bad, b"{}")], 10, checkpoints.UPLOAD_LIMIT_ENV)
    owner.close()
    assert owner.current(saved.source) is None


def test_uploads_off_on_a_class_server(env, monkeypatch):
    """GPTVIZ_MAX_UPLOAD_MB=0: no upload box on the sidebar or the Corpus page, so no session's upload
    can take the server's memory (Streamlit holds an uploaded file's bytes for its session)."""
    monkeypatch.setenv(checkpoints.UPLOAD_LIMIT_ENV, "0")
    at = ok(app_session())
    at.selectbox(key="ckpt_choice").set_value(state.Pick.UPLOAD).run()
    assert not at.exception and not at.get("file_uploader")
    assert any(f"{checkpoints.UPLOAD_LIMIT_ENV}=0" in i.value for i in at.sidebar.info)
    at.selectbox(key="ckpt_choice").set_value(NAME).run()
    ok(at.switch_page("views/corpus.py").run())
    ok(at.radio(key="corpus_mode").set_value("run a new scan").run())
    kinds = at.selectbox(key="corpus_source").options
    assert "a path on this server" in kinds and not any("upload" in k for k in kinds)


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


def test_an_upload_stays_in_use_across_a_page_switch(at, env, tmp_path):
    """st.switch_page (a click on the Heads grid opens the head in Attention) empties every file_uploader:
    the uploaded checkpoint stays in use there, said under the empty box, until other files are uploaded."""
    ok(upload(at, env / NAME))
    held = at.session_state[keys.UPLOADS]._last[1]
    ok(at.switch_page("views/heads.py").run())
    at.session_state[keys.HEADS_OPEN_ATTENTION] = True  # what the grid's click callback sets
    ok(at.run())
    assert at.get_by_key("attn_heatmap") is not None and "upload those files again" not in page_text(at)
    said = plain(f"In use: {', '.join(held.names)}, uploaded on the page before.")
    assert said in [c.value for c in at.sidebar.caption]
    torch.manual_seed(6)  # the same names, other weights: uploaded by hand, they replace the carried ones
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), tmp_path / NAME, gptviz.CharTokenizer(CHARS))
    ok(
        at.get_by_key("ckpt_upload")
        .set_value([(p.name, p.read_bytes(), "application/octet-stream") for p in sorted((tmp_path / NAME).iterdir())])
        .run()
    )
    assert at.session_state[keys.UPLOADS]._last[1].digest != held.digest
    assert not any("uploaded on the page before" in c.value for c in at.sidebar.caption)
