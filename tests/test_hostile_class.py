"""A hostile student on a class network: ballot stuffing from one computer, every class code taken,
a teacher locked out. Each bound, and its legitimate neighbour (another computer, a room behind one
address whose teacher allowed it, the teacher's own link)."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptest_helpers import app_session, fresh_class, ok, serve

from gptviz.dashboard.classroom import live, slides, voters
from gptviz.dashboard.sources import classmode
from gptviz.lessons import shipped_lesson
from gptviz.lessons.poll import MAX_ANSWERS, GuessError, Tally

ROOT = Path(__file__).resolve().parents[1]
LESSON = "how-attention-works"
K = next(i for i, s in enumerate(shipped_lesson(LESSON).slides) if s.page == "predict")
KEY = "teacher-key-of-this-server-1234"


@pytest.fixture
def registry(monkeypatch):
    fresh_class(monkeypatch)
    clock = [1000.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    return clock


def test_fifty_sessions_from_one_computer_are_one_vote():
    """The issue's 50 scripted sessions put one word at 86 % of the tally: now one answer per address."""
    t = Tally()
    t.vote("student-1", "e", "10.0.0.5", per_client=1)
    t.vote("script-first", "offensive", "10.0.0.66", per_client=1)
    for i in range(49):
        with pytest.raises(GuessError, match="this computer has given its one answer"):
            t.vote(f"script-{i}", "offensive", "10.0.0.66", per_client=1)
    assert dict(t.snapshot().counts) == {"e": 1, "offensive": 1}
    assert t.vote("script-first", "kinder", "10.0.0.66", per_client=1) == "kinder"  # its own page may change it


def test_no_address_is_one_address_and_one_address_never_fills_a_poll():
    t = Tally()
    t.vote("a", "x", "", per_client=1)
    with pytest.raises(GuessError, match="one answer"):
        t.vote("b", "x", "", per_client=1)
    # a room behind one address whose teacher allows 10 000: still at most half of the poll
    room = Tally()
    for i in range(MAX_ANSWERS // 2):
        room.vote(f"s{i}", "e", "203.0.113.9", per_client=10_000)
    with pytest.raises(GuessError, match="10000 answers"):
        room.vote("one-more", "e", "203.0.113.9", per_client=10_000)
    for i in range(MAX_ANSWERS // 2):  # the other half is still the rest of the class's
        room.vote(f"other-{i}", "i", f"10.1.{i // 200}.{i % 200}", per_client=1)
    assert room.snapshot().answers == MAX_ANSWERS
    free = Tally()  # a private server: no per-address bound
    for i in range(20):
        free.vote(f"tab-{i}", "e", "127.0.0.1")
    assert free.snapshot().answers == 20


def test_votes_per_address_is_the_teachers_setting_on_a_class_server(monkeypatch):
    monkeypatch.setenv(classmode.CLASS_ENV, "0")
    assert voters.votes_per_address() is None
    monkeypatch.setenv(classmode.CLASS_ENV, "1")
    monkeypatch.delenv(voters.VOTES_ENV, raising=False)
    assert voters.votes_per_address() == 1
    for raw, want in (("30", 30), ("0", 1), ("-3", 1), ("many", 1)):
        monkeypatch.setenv(voters.VOTES_ENV, raw)
        assert voters.votes_per_address() == want


def test_clients_without_an_address_share_the_per_computer_cap(registry):
    made = [live.start("", teacher=f"browser-{i}") for i in range(live.MAX_CODES_PER_CLIENT)]
    assert all(isinstance(m, tuple) for m in made)
    assert "end one first" in live.start("", teacher="browser-x")
    assert isinstance(live.start("10.0.0.8", teacher="browser-y"), tuple), "a computer with an address may"


def test_a_teacher_holds_one_live_code(registry):
    code, key = live.start("10.0.0.7", teacher="browser-t")
    assert live.start("10.0.0.7", teacher="browser-t") == (code, key)  # a second tab: the same class
    other = live.start("10.0.0.7", teacher="browser-u")
    assert isinstance(other, tuple) and other[0] != code


def test_a_full_registry_never_locks_out_the_servers_teacher(registry):
    for i in range(live.MAX_LIVE):  # 64 addresses took every code
        assert isinstance(live.start(f"10.9.{i // 3}.{i % 3}", teacher=f"b{i}"), tuple)
    assert "classes are being taught" in live.start("10.0.0.1", teacher="teacher-browser")
    code, key = live.start("10.0.0.1", teacher="teacher-browser", reserved_key=KEY)
    assert key == KEY and live.resume(KEY) == code
    assert live.start("10.0.0.2", reserved_key=KEY) == (code, KEY)  # one code for the key, from any computer
    assert "classes are being taught" in live.start("10.9.99.1", teacher="another")  # it took no one's place


def test_a_teachers_code_is_freed_when_the_teacher_is_gone(registry):
    code, key = live.start("10.0.0.7", teacher="t")
    registry[0] += live.TEACHER_GONE_S + 1
    assert live.resume(key) is None and live.ended(code) == live.LEFT
    assert live._owners == {}  # the key and its place are freed
    assert isinstance(live.start("10.0.0.7", teacher="t"), tuple)


@pytest.fixture
def room(monkeypatch):
    serve(monkeypatch, ROOT / "checkpoints", "shakespeare-char")
    monkeypatch.setenv(classmode.CLASS_ENV, "1")
    monkeypatch.delenv(voters.VOTES_ENV, raising=False)
    fresh_class(monkeypatch)


def send(student, text):
    student.text_input(key=f"poll_guess_{K}").input(text)
    return student.button(key=f"poll_send_{K}").click().run()


def test_the_teachers_link_starts_the_class_on_a_full_server_and_votes_are_one_per_computer(room, monkeypatch):
    """Through the pages: the server's teacher link makes the class although others took every code;
    two followers from one computer (AppTest's sessions have no address) give one answer, said in one
    line; with the teacher's per-address setting for a room behind one address, both count."""
    monkeypatch.setenv(voters.TEACHER_KEY_ENV, KEY)
    for i in range(live.MAX_LIVE):
        live.start(f"10.9.{i // 3}.{i % 3}", teacher=f"b{i}")
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide=str(K + 1), teach=KEY))
    code = teacher.session_state[slides.CODE_KEY]
    assert live.resume(KEY) == live.lookup(code) and live.lookup(code).slide == K
    first, second = (ok(app_session(timeout=90, follow=code)) for _ in range(2))
    ok(send(first, "e"))
    refused = send(second, "x")
    assert not refused.exception
    assert [e.value for e in refused.error] == [
        "this computer has given its one answer to this poll \\(the same page may change it\\)"
    ]
    ok(send(first, "i"))  # the first may change its own
    assert live.poll(code, live.poll_key(shipped_lesson(LESSON), K)).answers == 1
    monkeypatch.setenv(voters.VOTES_ENV, "30")
    ok(send(second, "x"))
    assert live.poll(code, live.poll_key(shipped_lesson(LESSON), K)).answers == 2
