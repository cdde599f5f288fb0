"""The Timeline page through AppTest on real nanoGPT snapshots: folders named 1 … 4 drawn at the
iter_num each ckpt.pt holds, with the disagreement said on the page; dated folders without a
recorded step drawn in name order, said too; and a checkpoints folder whose listing stops early."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptest_helpers import app_session, array, figure, ok, serve
from streamlit.testing.v1 import AppTest
from test_timeline_steps import save_snapshot
from test_timeline_steps import snapshot as snapshot  # the module fixture: one real ckpt.pt

from gptviz import limits
from gptviz.bench.checkpoints import NAME

PROMPT = "To be, or not to be"


@pytest.fixture
def at(ckpt_root, monkeypatch) -> AppTest:
    serve(monkeypatch, ckpt_root, NAME)
    return app_session(timeout=90, prompt=PROMPT)


def unescaped(markdown: str) -> str:
    """Page text as read: widgets.plain backslash-escapes punctuation so that it stays text."""
    return markdown.replace("\\", "")


def open_run(at: AppTest, folder: Path) -> AppTest:
    at = at.switch_page("views/timeline.py").run()
    at.selectbox(key="tl_run").set_value("a local path…")
    at = at.run()
    at.text_input(key="tl_path").set_value(str(folder))
    return at.run()


def test_numbered_folders_are_drawn_at_their_iter_num_and_the_page_says_names_disagree(at, tmp_path, snapshot):
    for i in range(1, 5):
        save_snapshot(snapshot, tmp_path / "run" / str(i), 250 * i)
    at = ok(open_run(at, tmp_path / "run"))
    assert at.select_slider(key="tl_step").options == ["250", "500", "750", "1000"]
    assert list(array(figure(at, "tl_loss")["data"][-1]["x"])) == [250, 500, 750, 1000]
    (warning,) = at.warning
    assert "Names and recorded steps disagree for 4 of 4 checkpoints" in warning.value
    assert any("steps 250 … 1000" in c.value for c in at.caption)


def test_dated_folders_without_a_step_are_drawn_in_name_order_and_say_so(at, tmp_path, snapshot):
    for d in ("2026-11-23_2250", "2026-11-23_2251", "2026-11-24_0003"):
        save_snapshot(snapshot, tmp_path / "dated" / d, None)
    at = ok(open_run(at, tmp_path / "dated"))
    assert at.select_slider(key="tl_step").options == ["0", "1", "2"]
    assert any("drawn in name order as 0 … 2, not at training steps" in unescaped(w.value) for w in at.warning)
    assert any("positions in name order 0 … 2" in c.value for c in at.caption)


def test_a_checkpoints_folder_listed_only_in_part_says_so_in_the_sidebar(ckpt_root, tmp_path, monkeypatch):
    root = tmp_path / "many"
    root.mkdir()
    (root / NAME).symlink_to(ckpt_root / NAME)
    for i in range(30):
        (root / f"notes-{i:02d}.txt").touch()
    monkeypatch.setattr(limits, "MAX_LISTING_ENTRIES", 10)
    serve(monkeypatch, root, "demo")
    at = app_session(timeout=90)
    assert not at.exception
    notes = [w.value for w in at.sidebar.warning if "entries were read" in w.value]
    assert notes and "only the first 10 entries were read" in unescaped(notes[0])
