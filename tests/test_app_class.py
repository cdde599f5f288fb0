"""A class server (issue 27, docs/architecture.md, "A class on a shared network"): a student on the room's
network reaches no file on the server's disk through any box or URL parameter, learns nothing of
what is there (every refusal is the same line, whether the file exists or not), and starts no
upload or scan unless the teacher turned them on. Each case was open on the code before class mode."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from apptest_helpers import app_session, ok, serve
from streamlit import config
from streamlit.testing.v1 import AppTest

from gptviz.bench.checkpoints import NAME, make_checkpoints, make_overtime_checkpoints
from gptviz.dashboard.corpus import scan_form
from gptviz.dashboard.sources import classmode, uploads
from gptviz.dashboard.state import Pick
from gptviz.dashboard.widgets import plain
from gptviz.errors import CheckpointError
from gptviz.scanning import jobs as scan_jobs

SHOWN = plain(classmode.REFUSED)  # how the page shows the refusal (Markdown escaped)
SECRET = "grades and wifi password: hunter2"


@pytest.fixture
def room(tmp_path, monkeypatch):
    """A class server over tmp/checkpoints, and a teacher's private folder tmp/private beside it: a
    checkpoint, a run folder, a corpus, a scan-like folder and a lesson file, all readable."""
    root = make_overtime_checkpoints(tmp_path / "checkpoints")
    serve(monkeypatch, root, NAME)
    monkeypatch.setenv(classmode.CLASS_ENV, "1")
    monkeypatch.delenv(classmode.ROOTS_ENV, raising=False)
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    private = tmp_path / "private"
    shutil.copytree(root / NAME, private / "model")
    shutil.copytree(root / "tiny-run", private / "run")
    (private / "notes.txt").write_text(SECRET * 40)
    (private / "scan").mkdir()
    (private / "scan" / "summary.json").write_text("{}")
    (private / "lesson.toml").write_text('title = "Mine"\n[[slides]]\npage = "mask"\ntitle = "a secret title"\n')
    return private


def errors(at: AppTest) -> list[str]:
    assert not at.exception, [e.value for e in at.exception]
    return [e.value for e in at.error]


def refused_alike(shown: list[list[str]]) -> None:
    """Every case gave the same page of errors, and that is the class server's one line."""
    assert all(s == shown[0] for s in shown), shown
    assert len(shown[0]) == 1 and shown[0][0].endswith(SHOWN), shown[0]
    assert "\n" not in shown[0][0]


# --- class mode is on where the room can reach the server -------------------------------------------
@pytest.mark.parametrize(
    "address, env, on",
    [
        ("127.0.0.1", "", False),
        ("localhost", "", False),
        ("::1", "", False),
        ("0.0.0.0", "", True),
        ("", "", True),  # Streamlit's default: every interface
        ("192.168.1.20", "", True),
        ("127.0.0.1", "1", True),  # --class
        ("0.0.0.0", "0", False),  # the teacher's explicit choice stands
    ],
)
def test_class_mode_follows_the_address_the_server_binds(monkeypatch, address, env, on):
    before = config.get_option("server.address")
    monkeypatch.setenv(classmode.CLASS_ENV, env)
    try:
        config.set_option("server.address", address)
        assert classmode.class_mode() is on
    finally:
        config.set_option("server.address", before)


# --- no path reaches the disk, and none answers whether it exists -------------------------------------
def test_a_checkpoint_in_the_url_is_refused_the_same_whether_it_exists(room):
    shown = []
    for path in (room / "model", room / "nothing-here", "/etc/passwd", "../private/model"):
        at = app_session(checkpoint=str(path))
        shown.append(errors(at))
        assert not at.get("plotly_chart"), "nothing was loaded"
    refused_alike(shown)


def test_the_checkpoint_path_box_is_refused_the_same_whether_it_exists(room):
    at = ok(app_session())
    shown = []
    for path in (room / "model", room / "nothing-here", room / "notes.txt"):
        at.sidebar.selectbox(key="ckpt_choice").set_value(Pick.PATH).run()
        at.sidebar.text_input(key="ckpt_path").input(str(path)).run()
        shown.append(errors(at))
    refused_alike(shown)


def test_a_link_inside_a_data_root_to_elsewhere_is_refused(room, monkeypatch, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copytree(room / "model", shared / "model")
    os.symlink(room / "model", shared / "sneaky")
    monkeypatch.setenv(classmode.ROOTS_ENV, str(shared))
    ok(app_session(checkpoint=str(shared / "model")))  # the teacher's folder opens
    refused_alike([errors(app_session(checkpoint=str(shared / "sneaky")))])  # its link out does not
    assert classmode.allowed_path(shared / "model") == (shared / "model").resolve()
    with pytest.raises(CheckpointError, match="class server"):
        classmode.allowed_path(str(shared / ".." / "private" / "model"))


def test_the_timeline_path_box_is_refused_the_same_whether_it_exists(room):
    at = ok(app_session())
    ok(at.switch_page("views/timeline.py").run())
    at.selectbox(key="tl_run").set_value("a local path…").run()
    shown = []
    for path in (room / "run", room / "nothing"):
        at.text_input(key="tl_path").input(str(path)).run()
        shown.append(errors(at))
    refused_alike(shown)


def test_compares_checkpoint_b_is_refused_the_same_whether_it_exists(room):
    at = ok(app_session())
    ok(at.switch_page("views/compare.py").run())
    at.radio(key="cmp_mode").set_value("one prompt, two checkpoints").run()
    at.selectbox(key="cmp_ckpt_b").set_value("a local path…").run()
    shown = []
    for path in (room / "model", room / "nothing"):
        at.text_input(key="cmp_path_b").input(str(path)).run()
        shown.append(errors(at))
        assert not at.get("plotly_chart"), "B was not run"
    refused_alike(shown)


def test_the_corpus_page_opens_no_scan_folder_and_reads_no_corpus_path(room, monkeypatch):
    at = ok(app_session())
    ok(at.switch_page("views/corpus.py").run())
    assert "run a new scan" not in at.radio(key="corpus_mode").options  # scans off on a class server
    at.radio(key="corpus_mode").set_value("open a scan folder").run()
    shown = []
    for path in (room / "scan", room / "nothing"):
        at.text_input(key="corpus_folder").input(str(path))
        at.button(key="corpus_open_folder").click().run()
        shown.append(errors(at))
    refused_alike(shown)
    monkeypatch.setenv(classmode.SCANS_ENV, "1")  # the teacher turns scans on: paths stay closed
    at = ok(app_session())
    ok(at.switch_page("views/corpus.py").run())
    at.radio(key="corpus_mode").set_value("run a new scan").run()
    assert "upload a .txt or .jsonl" not in at.selectbox(key="corpus_source").options  # uploads are still off
    at.selectbox(key="corpus_source").set_value("a path on this server").run()
    shown = []
    for path in (room / "notes.txt", room / "nothing.txt"):
        at.text_input(key="corpus_path").input(str(path)).run()
        shown.append(errors(at))
        assert at.button(key="corpus_run").disabled
    refused_alike(shown)


def test_the_lesson_path_box_is_refused_the_same_whether_it_exists(room):
    at = ok(app_session())
    ok(at.switch_page("views/lesson.py").run())
    shown = []
    for path in (room / "lesson.toml", room / "nothing.toml", "/etc/shadow", room):
        at.text_input(key="lesson_path").input(str(path)).run()
        at.button(key="lesson_path_open").click().run()
        shown.append(errors(at))
    refused_alike(shown)
    assert not any("secret" in m.value for m in at.markdown)


# --- uploads off unless the teacher turns them on, then bounded for the whole server ------------------
def test_no_upload_box_on_a_class_server(room):
    at = ok(app_session())
    at.sidebar.selectbox(key="ckpt_choice").set_value(Pick.UPLOAD).run()
    assert not at.get("file_uploader")
    assert any("Uploads are off" in i.value for i in at.sidebar.info)
    ok(at.switch_page("views/lesson.py").run())
    assert not at.get("file_uploader"), "the lesson uploader is off too"


def test_the_lesson_uploader_honours_max_upload_mb_zero(tmp_path, monkeypatch):
    serve(monkeypatch, make_checkpoints(tmp_path / "checkpoints"), NAME)
    monkeypatch.setenv(classmode.CLASS_ENV, "0")
    at = ok(app_session())
    ok(at.switch_page("views/lesson.py").run())
    assert at.get("file_uploader"), "a private server takes a lesson upload"
    monkeypatch.setenv("GPTVIZ_MAX_UPLOAD_MB", "0")
    at = ok(app_session())
    ok(at.switch_page("views/lesson.py").run())
    assert not at.get("file_uploader")


class _File:
    def __init__(self, name: str, data: bytes):
        self.name, self.size, self._data = name, len(data), data

    def getvalue(self) -> bytes:
        return self._data


def test_uploads_held_by_all_sessions_are_bounded_together():
    sessions = [uploads.SessionUploads() for _ in range(4)]
    total = 3 * 2**20
    for s in sessions[:3]:
        s.save([_File("ckpt.pt", os.urandom(2**20 - 100))], 200, "X", total)
    with pytest.raises(CheckpointError, match="limit for the whole class"):
        sessions[3].save([_File("ckpt.pt", os.urandom(2**20))], 200, "X", total)
    assert sessions[3].current("upload:") is None
    sessions[0].save([_File("other.pt", os.urandom(2**20 - 100))], 200, "X", total)  # a replacement fits
    sessions[1].close()
    sessions[3].save([_File("ckpt.pt", os.urandom(2**20 - 100))], 200, "X", total)  # room again


def test_one_running_scan_per_client_on_a_class_server(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_jobs, "_JOBS", {"a": _Sleeper()})
    monkeypatch.setattr(scan_jobs, "_CLIENTS", {"a": "10.0.0.5"})
    with pytest.raises(Exception, match="from this computer"):
        scan_jobs.check_room("10.0.0.5")
    scan_jobs.check_room("10.0.0.6")  # another student's computer may
    scan_jobs.check_room("")  # a private server names no client: its old rule (two at once for all)


class _Sleeper:
    """A process that still runs (poll() is None), as subprocess.Popen answers."""

    args: tuple = ()

    def poll(self):
        return None


def test_a_class_servers_corpus_upload_is_smaller(monkeypatch):
    monkeypatch.setenv(classmode.CLASS_ENV, "1")
    assert scan_form.upload_bytes() == classmode.CORPUS_MB * 2**20 < scan_jobs.MAX_UPLOAD_BYTES
    monkeypatch.setenv(classmode.CLASS_ENV, "0")
    assert scan_form.upload_bytes() == scan_jobs.MAX_UPLOAD_BYTES


def test_the_shipped_items_still_open_on_a_class_server(room):
    at = ok(app_session())
    assert at.get("plotly_chart")
    assert Path(classmode.allowed_path(str(room.parent / "checkpoints" / NAME))).name == NAME


def test_the_checkpoint_the_teacher_started_the_server_on_opens(room, monkeypatch):
    # `gptviz dashboard --checkpoint PATH` writes the path, made absolute, as the default checkpoint
    monkeypatch.setenv("GPTVIZ_DEFAULT_CHECKPOINT", str(room / "model"))
    at = ok(app_session())
    assert at.get("plotly_chart")
    assert classmode.allowed_path(str(room / "model" / "config.json")).name == "config.json"
    refused_alike([errors(app_session(checkpoint=str(room / "run")))])  # its neighbours stay closed
