"""Follow the teacher: the lessons being taught right now, in this server process.

A code belongs to a teacher, not to a browser session: "Start teaching" makes one (start) with a
secret teacher key that the teacher's URL keeps (?teach=KEY), so a reload or a reopened tab takes the
same class back (resume). The teacher's page then publishes (lesson, slide) under the code; a
student's page opened with ?follow=CODE reads it. A code ends when its teacher ends it, or when no
page of the teacher's has been seen for TEACHER_GONE_S (the followers are told which); closing a
lesson keeps the code, and the teacher's next lesson comes up under it. Codes per client (its
address; a client with none counts as one address) are bounded, and so are the unknown codes one
client may try. A teacher (a browser) holds at most one live code: a second "Start teaching" takes the
same class back. The server's own teacher key (voters.TEACHER_KEY_ENV, which `gptviz dashboard --class`
prints) makes its one code past every bound, so a registry that others filled never locks the class out.

When the teacher moves, the server asks every follower's session to rerun
(slides.nudge); each follower also polls from a tiny fragment every few seconds, a safety net for a
nudge that did not arrive. Polling alone (every follower rerunning a fragment twice a second) was
measured to swamp two cores with 30 followers. The registry is process-wide (one Streamlit server
serves the whole class), bounded in size (a new lesson waits for a place; none is pushed out), and
forgets a lesson nobody has moved for a few hours.

A code also holds its class's polls: one lessons.poll.Tally per predict slide, fed by the followers'
guesses (vote), read by the teacher's screen (poll), closed by the teacher's reveal (reveal), bounded
per code (MAX_ANSWERS_PER_CODE) and per network address (vote's per_client), and gone with the code.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from ...lessons import Lesson
from ...lessons.poll import GuessError, Snapshot, Tally

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read aloud or off a projector
CODE_LENGTH = 4
MAX_LIVE = 64  # lessons taught at once on one server
IDLE_S = 6 * 3600  # a lesson unchanged this long is forgotten
TEACHER_GONE_S = 600  # no page of the teacher's seen this long: the class has ended (the teacher left)
ENDED_KEEP_S = 3600  # how long followers of an ended code are told why
MAX_CODES_PER_CLIENT = 3  # codes one address may hold: a neighbour cannot take every code
GUESSES_PER_MINUTE = 12  # unknown codes one address may try a minute
ENDED = "ended"  # the teacher ended the class
LEFT = "left"  # the teacher's pages were gone for TEACHER_GONE_S


@dataclass(frozen=True)
class Live:
    code: str
    lesson: Lesson | None  # None: the teacher closed a lesson and has not opened the next
    slide: int  # 0-based
    version: int  # grows with every change: what a follower compares
    updated: float


@dataclass
class _Owner:
    key: str  # the teacher key (secret: in the teacher's URL only)
    client: str
    seen: float  # when a page of the teacher's last ran
    teacher: str = ""  # the teacher's browser (voters.browser_id): one live code each
    reserved: bool = False  # made with the server's teacher key: counted in no bound


MAX_FOLLOWERS = 500  # sessions nudged per code
_lock = threading.Lock()
_live: dict[str, Live] = {}
_followers: dict[str, dict[str, None]] = {}  # code -> follower session ids, in the order they came
_counter = 0
_owners: dict[str, _Owner] = {}  # code -> its teacher
_ended: dict[str, tuple[str, float]] = {}  # code -> (ENDED or LEFT, when): what its followers are told
_guesses: dict[str, dict[str, float]] = {}  # client -> unknown codes it tried, and when
MAX_ANSWERS_PER_CODE = 2000  # guesses one class holds over all its polls (a 60-slide lesson, 30 students)
PollKey = tuple[str, str, int]  # (lesson name, lesson title, slide index): one poll per predict slide
_polls: dict[str, dict[PollKey, Tally]] = {}  # code -> its polls


def new_code() -> str:
    """A fresh code not in use (nor recently ended: its followers are still being told so)."""
    with _lock:
        return _fresh_code()


def _fresh_code() -> str:
    while True:
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        if code not in _live and code not in _owners and code not in _ended:
            return code


def _sweep(now: float) -> None:
    """Under _lock: end the codes whose teacher is gone, forget old endings and idle lessons."""
    for c in [c for c, o in _owners.items() if now - o.seen > TEACHER_GONE_S]:
        _end(c, LEFT, now)
    for c in [c for c, v in _live.items() if c not in _owners and now - v.updated > IDLE_S]:
        del _live[c]
        _followers.pop(c, None)
        _polls.pop(c, None)
    for c in [c for c, (_, t) in _ended.items() if now - t > ENDED_KEEP_S]:
        del _ended[c]


def start(client: str = "", teacher: str = "", reserved_key: str = "") -> tuple[str, str] | str:
    """A code for a teacher who pressed "Start teaching": (code, teacher key), or the one-line reason
    there is none (the server teaches MAX_LIVE classes, or this client, an address or none, holds its
    MAX_CODES_PER_CLIENT). A teacher (a browser id) already teaching gets its class back, not a second
    one. reserved_key: the server's own teacher key; its one class is made past both bounds."""
    now = time.monotonic()
    with _lock:
        _sweep(now)
        for code, o in _owners.items():
            if (teacher and o.teacher == teacher) or (reserved_key and o.reserved):
                o.seen = now
                return code, o.key
        if reserved_key:
            code = _fresh_code()
            _owners[code] = _Owner(reserved_key, client, now, teacher, reserved=True)
            return code, reserved_key
        counted = [o for o in _owners.values() if not o.reserved]
        if len(counted) + len([c for c in _live if c not in _owners]) >= MAX_LIVE:
            return f"{MAX_LIVE} classes are being taught on this server: start when one ends"
        if sum(o.client == client for o in counted) >= MAX_CODES_PER_CLIENT:
            return f"this computer teaches {MAX_CODES_PER_CLIENT} classes already: end one first"
        code, key = _fresh_code(), secrets.token_urlsafe(16)
        _owners[code] = _Owner(key, client, now, teacher)
        return code, key


def resume(key: str) -> Live | str | None:
    """The class a teacher key holds (its Live, or its code while no lesson is open), marking the
    teacher seen; None for a key that holds no class (never handed out, or the class ended)."""
    now = time.monotonic()
    with _lock:
        _sweep(now)
        for code, o in _owners.items():
            if key and secrets.compare_digest(o.key, key):
                o.seen = now
                return _live.get(code) or code
    return None


def seen(code: str) -> None:
    """A page of the teacher's ran: the class is not left."""
    with _lock:
        if code in _owners:
            _owners[code].seen = time.monotonic()


def pause(code: str) -> None:
    """The teacher closed the lesson: followers wait for the next one under the same code."""
    global _counter
    now = time.monotonic()
    with _lock:
        if code in _owners:
            _counter += 1
            _live[code] = Live(code, None, 0, _counter, now)


def ended(code: str) -> str | None:
    """Why a code's class is over (ENDED or LEFT), for its followers; None if it is not."""
    with _lock:
        _sweep(time.monotonic())
        found = _ended.get(code)
        return found[0] if found else None


def may_guess(client: str, code: str) -> bool:
    """Whether this client may look up a code nobody teaches: GUESSES_PER_MINUTE different codes a
    minute (asking again for one it tried is free: a student waiting for the teacher polls)."""
    now = time.monotonic()
    with _lock:
        tried = _guesses.setdefault(client, {})
        for c in [c for c, t in tried.items() if now - t > 60]:
            del tried[c]
        if code in tried:
            return True
        if len(tried) >= GUESSES_PER_MINUTE:
            return False
        tried[code] = now
        if len(_guesses) > 10_000:  # many addresses: forget the idle ones
            for c in [c for c, d in _guesses.items() if not d]:
                del _guesses[c]
        return True


def taught(code: str) -> bool:
    """Whether a teacher holds this code now (a student's mistyped code is held by nobody)."""
    with _lock:
        return code in _owners


def normal(code: str) -> str:
    """A code as typed (any case, spaces) in its canonical form; '' if it cannot be one."""
    c = "".join(code.split()).upper()[: CODE_LENGTH + 1]
    return c if len(c) == CODE_LENGTH and all(ch in ALPHABET for ch in c) else ""


def publish(code: str, lesson: Lesson, slide: int) -> Live | None:
    """Make (lesson, slide) what code's followers see; a no-op when it already is. None when MAX_LIVE
    other lessons are live: a new code waits for a place rather than push out a class being taught
    (a neighbour opening 64 lessons could otherwise end any teacher's)."""
    global _counter
    now = time.monotonic()
    with _lock:
        _sweep(now)
        if code in _owners:
            _owners[code].seen = now
        old = _live.get(code)
        if old is not None and old.lesson == lesson and old.slide == slide:
            if now - old.updated > 60:  # keep a lesson in use from looking idle
                _live[code] = Live(code, lesson, slide, old.version, now)
            return _live[code]
        if old is None and code not in _owners and len(_live) + len(_owners) >= MAX_LIVE:
            return None
        _counter += 1
        _live[code] = Live(code, lesson, slide, _counter, now)
        return _live[code]


def lookup(code: str) -> Live | None:
    """What the followers of code see now, or None if no lesson is live under it (its teacher gone
    for TEACHER_GONE_S ends it here)."""
    with _lock:
        _sweep(time.monotonic())
        return _live.get(code)


def end(code: str, why: str = ENDED) -> list[str]:
    """End a class: its code is freed, its followers told why (ENDED or LEFT). Returns the
    followers' session ids, to nudge."""
    with _lock:
        ids = list(_followers.get(code, ()))
        _end(code, why, time.monotonic())
        return ids


def _end(code: str, why: str, now: float) -> None:
    _live.pop(code, None)
    _followers.pop(code, None)
    _polls.pop(code, None)
    if _owners.pop(code, None) is not None:
        _ended[code] = (why, now)


def follow(code: str, session_id: str) -> None:
    """Remember a follower's session, to nudge it when the teacher moves. Only for a live lesson: a
    follower of a code nobody teaches (yet) polls, and is remembered on its first run after the
    lesson starts, so made-up codes cannot fill the registry."""
    with _lock:
        if code not in _live:
            return
        ids = _followers.setdefault(code, {})
        ids[session_id] = None
        while len(ids) > MAX_FOLLOWERS:
            del ids[next(iter(ids))]


def followers(code: str) -> list[str]:
    with _lock:
        return list(_followers.get(code, ()))


def unfollow(code: str, session_id: str) -> None:
    with _lock:
        _followers.get(code, {}).pop(session_id, None)


def poll_key(lesson: Lesson, slide: int) -> PollKey:
    return (lesson.name, lesson.title, slide)


def _current(code: str) -> PollKey | None:
    """Under _lock: the poll of the slide code's class shows now (None between lessons)."""
    live = _live.get(code)
    return poll_key(live.lesson, live.slide) if live is not None and live.lesson is not None else None


MAX_POLLS = 64  # polls one code keeps (a lesson has at most 60 slides); the oldest goes first


def _tally(code: str, key: PollKey) -> tuple[dict[PollKey, Tally], Tally]:
    """Under _lock: code's polls and the one of key, made if new."""
    polls = _polls.setdefault(code, {})
    if key not in polls:
        polls[key] = Tally()
        while len(polls) > MAX_POLLS:
            del polls[next(iter(polls))]
    return polls, polls[key]


def vote(code: str, key: PollKey, voter: str, text: str, client: str = "", per_client: int | None = None) -> str:
    """A follower's guess on the poll of the slide its class shows (a second replaces the first):
    the guess as tallied, or GuessError with the line the student reads. client: the voter's address
    ('' counts as one); per_client: how many voters one address may be in a poll (None: no bound)."""
    with _lock:
        lesson = _live[code].lesson if _current(code) == key else None
        if lesson is None or lesson.slides[key[2]].page != "predict":
            raise GuessError("the teacher has moved on to another slide")
        polls, tally = _tally(code, key)
        held = sum(len(t.answers) for t in polls.values())
        if voter not in tally.answers and held >= MAX_ANSWERS_PER_CODE:
            raise GuessError(f"this class has given its {MAX_ANSWERS_PER_CODE} answers")
        return tally.vote(voter, text, client, per_client)


def poll(code: str, key: PollKey) -> Snapshot:
    """What the teacher's screen shows of a poll (an empty one if nobody has answered)."""
    with _lock:
        tally = _polls.get(code, {}).get(key)
        return (tally or Tally()).snapshot()


def my_guess(code: str, key: PollKey, voter: str) -> str | None:
    """This follower's guess on a poll, for its own page (only the voter sees it)."""
    with _lock:
        tally = _polls.get(code, {}).get(key)
        return tally.answers.get(voter) if tally is not None else None


def reveal(code: str, key: PollKey) -> None:
    """The teacher reveals the model's answer: the poll closes, and the followers' pages (a new
    version) show the answer too."""
    global _counter
    with _lock:
        if code not in _owners or _current(code) != key:
            return
        _, tally = _tally(code, key)
        if tally.revealed:
            return
        tally.reveal()
        old = _live[code]
        _counter += 1
        _live[code] = Live(code, old.lesson, old.slide, _counter, time.monotonic())
