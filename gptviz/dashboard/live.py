"""Follow the teacher: the lessons being taught right now, in this server process.

A teacher's session publishes (lesson, slide) under a short code; a student's page opened with
?follow=CODE reads it, polling a few times a second from a tiny fragment, and reruns when the
slide changes. The registry is process-wide (one Streamlit server serves the whole class), bounded
in size, and forgets a lesson nobody has moved for a few hours.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from ..lessons import Lesson

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read aloud or off a projector
CODE_LENGTH = 4
MAX_LIVE = 64  # lessons taught at once on one server
IDLE_S = 6 * 3600  # a lesson unchanged this long is forgotten


@dataclass(frozen=True)
class Live:
    code: str
    lesson: Lesson
    slide: int  # 0-based
    version: int  # grows with every change: what a follower compares
    updated: float


_lock = threading.Lock()
_live: dict[str, Live] = {}
_counter = 0


def new_code() -> str:
    """A fresh code not in use."""
    with _lock:
        while True:
            code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
            if code not in _live:
                return code


def normal(code: str) -> str:
    """A code as typed (any case, spaces) in its canonical form; '' if it cannot be one."""
    c = "".join(code.split()).upper()[: CODE_LENGTH + 1]
    return c if len(c) == CODE_LENGTH and all(ch in ALPHABET for ch in c) else ""


def publish(code: str, lesson: Lesson, slide: int) -> Live:
    """Make (lesson, slide) what code's followers see; a no-op when it already is."""
    global _counter
    now = time.monotonic()
    with _lock:
        old = _live.get(code)
        if old is not None and old.lesson == lesson and old.slide == slide:
            if now - old.updated > 60:  # keep a lesson in use from looking idle
                _live[code] = Live(code, lesson, slide, old.version, now)
            return _live[code]
        _counter += 1
        _live[code] = Live(code, lesson, slide, _counter, now)
        for c in [c for c, v in _live.items() if now - v.updated > IDLE_S]:
            del _live[c]
        while len(_live) > MAX_LIVE:  # the least recently moved goes first
            del _live[min(_live, key=lambda c: _live[c].updated)]
        return _live[code]


def lookup(code: str) -> Live | None:
    """What the followers of code see now, or None if no lesson is live under it."""
    with _lock:
        return _live.get(code)


def end(code: str) -> None:
    with _lock:
        _live.pop(code, None)
