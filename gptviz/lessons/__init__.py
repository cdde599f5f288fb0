"""Lessons as slides: a lesson is a small TOML file, read with Python's tomllib (nothing in it is
ever executed), listing slides. Each slide names what it shows (`page`), its parameters, a title
and a short note for the class:

    title = "How attention works"

    [[slides]]
    page = "attention"                  # one of PAGES below
    title = "An induction head"
    note = "In the second half each token looks one past its earlier copy."
    checkpoint = "induction-2l"         # a shipped checkpoint (or "demo"), never a path
    prompt = "..."                      # default: the checkpoint's own preset prompt
    layer = 1
    head = 1
    highlight = { row = 30 }            # or { cell = [30, 10] }, or { token = 5 }
    steer = { neuron = [1, 57], layer = 2, coeff = 4.0 }   # the slide's run steered (steering_spec.py)

A `features` slide shows one feature of an SAE shipped beside the checkpoint (`sae = "NAME"`, default
its first) on the slide's prompt: `feature = 12` (default: the strongest at `position`).

A "tiny-head" slide may give `step` (one stage of the head's chain, in order: STEPS) and the
teacher's own `X`, `Wq`, `Wk`, `Wv` (numbers.py). A "predict" slide asks the class for the next
token of its prompt; `choices` lists guesses to pick from (a student may also type one); `round =
"probability"` scores the room's guesses by the model's own probabilities at the reveal (class_round.py),
`round = "tally"` (the default) shows the class's shares beside the model's distribution only.

A lesson file is untrusted input (a teacher's upload or a path): it is size-bounded and bounded in
what tomllib would pay for before tomllib reads it (bounded_toml.py), parsed once per content, every
key is checked against the ones below and an unknown one is refused with one line naming it and where.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GptvizError
from ..steering_spec import SteeringSpec, SteeringSpecError
from .bounded_toml import TomlBoundError, load, tomllib
from .numbers import MATRICES, Numbers, NumbersError, parse_numbers
from .poll import GuessError, normal_guess

MAX_BYTES = 64 * 1024  # a lesson of 30 slides with long notes is ~10 KB
MAX_SLIDES = 60
SHIPPED_DIR = Path(__file__).resolve().parent
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")  # a shipped lesson's name in ?lesson=NAME
SAE_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,63}", re.ASCII)  # a folder's name in checkpoints/NAME/saes/

# What a slide can show, and the key of the dashboard page that shows it in full (the slide's "open"
# link; the keys are gptviz.dashboard.pages' registry, which this library module does not import).
PAGES = {
    "tiny-head": "worked-examples",  # the worked tiny head: its input and its weights
    "mask": "worked-examples",  # the same scores with and without the causal mask
    "softmax": "worked-examples",  # why the scores are divided by √d_k before the softmax
    "attention": "attention",  # one head of a real model on a prompt
    "heads": "heads",  # every layer × head of a real model, and what each head does
    "mask-leak": "mask-leak",  # a real model with its mask switched off
    "predict": "next-token",  # the class guesses a real model's next token, then sees the model's
    "features": "features",  # one feature of an SAE on the slide's prompt, and what it writes
}
STEERS = ("attention", "heads", "features")  # the slides whose run may be steered (mask-leak runs its own)
PRESETS = ("textbook", "sharp")  # the worked tiny head's inputs: the teaching text's, or sharper ones
# The tiny head's chain, one stage a slide: X and the weights; Q, K, V; the scores; the weights; the
# output. A tiny-head slide without a step shows X beside the weights (the whole head at a glance).
STEPS = ("input", "qkv", "scores", "weights", "output")
MAX_CHOICES = 8  # a predict slide's guesses to pick from
ROUNDS = ("tally", "probability")  # a predict slide's reveal: the shares alone, or scored by the model
LESSON_KEYS = {"title", "description", "slides"}
SLIDE_KEYS = {
    "page",
    "title",
    "note",
    "checkpoint",
    "prompt",
    "layer",
    "head",
    "position",
    "preset",
    "mask",
    "highlight",
    "step",
    "X",
    "Wq",
    "Wk",
    "Wv",
    "choices",
    "round",
    "sae",
    "feature",
    "steer",
}
HIGHLIGHT_KEYS = {"cell", "row", "token"}
MAX_TEXT = {"title": 120, "note": 600, "description": 600, "prompt": 2000, "checkpoint": 200}
MAX_INDEX = 100_000


class LessonError(GptvizError, ValueError):
    """A lesson file that cannot be used; the message is one line naming the key or the problem."""


@dataclass(frozen=True)
class Highlight:
    kind: str  # "cell", "row" or "token"
    at: tuple[int, ...]  # (row, column) for a cell, (index,) otherwise

    def __str__(self) -> str:
        return f"{self.kind} {', '.join(map(str, self.at))}"


@dataclass(frozen=True)
class Slide:
    """One slide. Frozen and hashable: it is the cache key of what the slide computes, so a slide
    shown to a whole class is computed once."""

    page: str
    title: str
    note: str = ""
    checkpoint: str | None = None  # None: the dashboard's default checkpoint
    prompt: str | None = None  # None: the checkpoint's preset prompt
    layer: int = 0
    head: int = 0
    position: int | None = None
    preset: str = "textbook"
    mask: bool = True
    highlight: Highlight | None = None
    step: str | None = None  # a tiny-head slide's stage of the chain (STEPS); None: X and the weights
    numbers: Numbers | None = None  # a tiny-head slide's own X, Wq, Wk, Wv (None: its preset's)
    choices: tuple[str, ...] = ()  # a predict slide's guesses to pick from
    round: str = "tally"  # a predict slide's reveal (ROUNDS)
    sae: str | None = None  # an SAE shipped beside the checkpoint, by name; None: its first
    feature: int | None = None  # a features slide's feature; None: the strongest at the position
    steer: SteeringSpec | None = None  # the slide's run steered


@dataclass(frozen=True)
class Lesson:
    name: str
    title: str
    slides: tuple[Slide, ...]
    description: str = ""
    origin: str = field(default="shipped", compare=False)  # "shipped", "upload" or "file"
    lines: tuple[int, ...] = field(default=(), compare=False)  # each slide's [[slides]] line in the file
    key_lines: tuple[tuple[tuple[str, int], ...], ...] = field(default=(), compare=False)  # each slide's keys' lines

    def where(self, i: int) -> str:
        """How a message names slide i (0-based): with its line in the file when known."""
        return f"line {self.lines[i]}, slide {i + 1}" if i < len(self.lines) else f"slide {i + 1}"

    def at_key(self, i: int, message: str) -> str:
        """A message about slide i pointed at the line of the key it names (see at_key)."""
        if i >= len(self.key_lines):
            return message
        return at_key(message, self.where(i), dict(self.key_lines[i]), i)


_KEY_LINE = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_-]*)[ \t]*=", re.MULTILINE)


def slide_key_lines(text: str, lines: tuple[int, ...]) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Each slide's keys with the line each is set on (its first), from the file's text."""
    starts = [0, *(m.end() for m in re.finditer("\n", text))]  # offset of each line (from 1: starts[n - 1])
    out = []
    for k, first in enumerate(lines):
        last = lines[k + 1] - 1 if k + 1 < len(lines) else len(starts)
        found: dict[str, int] = {}
        for n in range(first + 1, last + 1):
            end = starts[n] if n < len(starts) else len(text)
            m = _KEY_LINE.match(text, starts[n - 1], end)
            if m:
                found.setdefault(m.group(1), n)
        out.append(tuple(found.items()))
    return tuple(out)


def at_key(message: str, where: str, keys: dict[str, int], i: int) -> str:
    """A message that starts with `where` (the slide's [[slides]] line) pointed at the line of the first
    of the slide's keys it names: the wrong key, not the table's header."""
    if not message.startswith(where + ": "):
        return message
    rest = message[len(where) + 2 :]
    quoted = re.search(r"(unknown key )?'([A-Za-z_][\w-]*)'", rest)
    if quoted and (quoted.group(1) or quoted.group(2) in SLIDE_KEYS):  # the key the message is about
        k = quoted.group(2)
        return f"line {keys[k]}, slide {i + 1}: {rest}" if k in keys else message  # a missing key: the slide's
    named = [(m.start(), k) for k in keys if (m := re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-]| slide)", rest))]
    if not named:
        return message
    return f"line {keys[min(named)[1]]}, slide {i + 1}: {rest}"


def _text(where: str, key: str, value) -> str:
    if not isinstance(value, str):
        raise LessonError(f"{where}: {key!r} must be text, not {type(value).__name__}")
    if len(value) > MAX_TEXT.get(key, 200):
        raise LessonError(f"{where}: {key!r} is {len(value)} characters long; at most {MAX_TEXT.get(key, 200)}")
    return value


def _index(where: str, key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INDEX:
        raise LessonError(f"{where}: {key!r} must be a whole number from 0 to {MAX_INDEX}, not {value!r}"[:300])
    return value


def _unknown(where: str, keys, known: set[str], what: str) -> None:
    extra = sorted(set(keys) - known)
    if extra:
        raise LessonError(f"{where}: unknown key {extra[0][:60]!r}; {what} may have {', '.join(sorted(known))}")


def _highlight(where: str, value) -> Highlight:
    if not isinstance(value, dict) or len(value) != 1:
        raise LessonError(
            f"{where}: 'highlight' must be one of {{ cell = [row, column] }}, {{ row = i }}, {{ token = i }}"
        )
    _unknown(where, value, HIGHLIGHT_KEYS, "a highlight")
    ((kind, at),) = value.items()
    if kind == "cell":
        if not isinstance(at, list) or len(at) != 2:
            raise LessonError(f"{where}: highlight 'cell' must be [row, column]")
        return Highlight("cell", tuple(_index(where, "cell", a) for a in at))
    return Highlight(kind, (_index(where, kind, at),))


def _slide(i: int, raw, lines: tuple[int, ...] = ()) -> Slide:
    where = f"line {lines[i]}, slide {i + 1}" if i < len(lines) else f"slide {i + 1}"
    if not isinstance(raw, dict):
        raise LessonError(f"{where}: a slide is a table ([[slides]]), not {type(raw).__name__}")
    _unknown(where, raw, SLIDE_KEYS, "a slide")
    for key in ("page", "title"):
        if key not in raw:
            raise LessonError(f"{where}: {key!r} is missing")
    page = _text(where, "page", raw["page"])
    if page not in PAGES:
        raise LessonError(f"{where}: page {page[:40]!r} is not one a slide shows; use one of {', '.join(PAGES)}")
    kw: dict = {"page": page, "title": _text(where, "title", raw["title"])}
    for key in ("note", "checkpoint", "prompt"):
        if key in raw:
            kw[key] = _text(where, key, raw[key])
    for key in ("layer", "head", "position"):
        if key in raw:
            kw[key] = _index(where, key, raw[key])
    if "preset" in raw:
        kw["preset"] = _text(where, "preset", raw["preset"])
        if kw["preset"] not in PRESETS:
            raise LessonError(f"{where}: preset {kw['preset'][:40]!r} is not one of {', '.join(PRESETS)}")
    if "mask" in raw:
        if not isinstance(raw["mask"], bool):
            raise LessonError(f"{where}: 'mask' must be true or false")
        kw["mask"] = raw["mask"]
    if "highlight" in raw:
        kw["highlight"] = _highlight(where, raw["highlight"])
    kw.update(_tiny_head(where, page, raw), **_predict(where, page, raw), **_features(where, page, raw))
    return Slide(**kw)


def _tiny_head(where: str, page: str, raw: dict) -> dict:
    """A tiny-head slide's step and own numbers, checked (numbers.py); refused on any other slide."""
    kw: dict = {}
    asks = [k for k in ("step", *MATRICES) if k in raw]
    if asks and page != "tiny-head":
        raise LessonError(f"{where}: {asks[0]!r} belongs on a tiny-head slide, not a {page} one")
    if "step" in raw:
        kw["step"] = _text(where, "step", raw["step"])
        if kw["step"] not in STEPS:
            raise LessonError(f"{where}: step {kw['step'][:40]!r} is not one of {', '.join(STEPS)}")
    try:
        kw["numbers"] = parse_numbers(raw)
    except NumbersError as e:
        raise LessonError(f"{where}: {e}") from None
    if kw["numbers"] is not None and "preset" in raw:
        raise LessonError(f"{where}: give either 'preset' or your own X, Wq, Wk, Wv, not both")
    return kw


def _predict(where: str, page: str, raw: dict) -> dict:
    """A predict slide's choices (at most MAX_CHOICES guesses, each one a student could type) and round."""
    asks = [k for k in ("choices", "round") if k in raw]
    if asks and page != "predict":
        raise LessonError(f"{where}: {asks[0]!r} belongs on a predict slide, not a {page} one")
    kw: dict = {}
    if "round" in raw:
        kw["round"] = _text(where, "round", raw["round"])
        if kw["round"] not in ROUNDS:
            raise LessonError(f"{where}: round {kw['round'][:40]!r} is not one of {', '.join(ROUNDS)}")
    if "choices" not in raw:
        return kw
    value = raw["choices"]
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_CHOICES:
        raise LessonError(f'{where}: \'choices\' must be a list of 1 to {MAX_CHOICES} guesses, e.g. ["e", "a"]')
    try:
        return {**kw, "choices": tuple(dict.fromkeys(normal_guess(_text(where, "choices", c)) for c in value))}
    except GuessError as e:
        raise LessonError(f"{where}: 'choices': {e}") from None


def _features(where: str, page: str, raw: dict) -> dict:
    """A slide's sae, feature and steer keys, each checked here; what the model has is checked when
    the dashboard opens the file (dashboard/lesson_check.py)."""
    kw: dict = {}
    if "steer" in raw:
        if page not in STEERS:
            raise LessonError(f"{where}: a {page} slide does not steer; 'steer' goes on {', '.join(STEERS)} slides")
        try:
            kw["steer"] = SteeringSpec.from_table(raw["steer"], where)
        except SteeringSpecError as e:
            raise LessonError(str(e)) from None
    if "feature" in raw:
        if page != "features":
            raise LessonError(f"{where}: only a features slide shows a 'feature'")
        kw["feature"] = _index(where, "feature", raw["feature"])
    if "sae" in raw:
        if page != "features" and (kw.get("steer") is None or kw["steer"].kind != "feature"):
            raise LessonError(f"{where}: 'sae' is for a features slide or one that steers with a feature")
        kw["sae"] = _text(where, "sae", raw["sae"])
        if not SAE_NAME.fullmatch(kw["sae"]):
            raise LessonError(f"{where}: 'sae' names an SAE shipped beside the checkpoint, not a path")
    return kw


MAX_PARSED = 64  # lessons kept parsed (by content): every rerun and every session asks again
_PARSED: OrderedDict[tuple[str, str, str], Lesson | LessonError] = OrderedDict()
_PARSED_LOCK = threading.Lock()


def parse_lesson(data: bytes | str, name: str = "lesson", origin: str = "file") -> Lesson:
    """A lesson from the text of its TOML file. Raises LessonError (one line) on anything wrong:
    too large, not TOML, over bounded_toml's bounds, an unknown or mistyped key, no slides. Each
    content is parsed once per process (its answer, a lesson or the error, kept by its hash)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_BYTES:
        raise LessonError(f"{name}: {len(raw):,} bytes; a lesson file may have at most {MAX_BYTES:,}")
    key = (hashlib.sha256(raw).hexdigest(), name, origin)
    with _PARSED_LOCK:
        found = _PARSED.get(key)
        if found is not None:
            _PARSED.move_to_end(key)
    if found is None:
        try:
            found = _parse(raw, name, origin)
        except LessonError as e:
            found = e
        with _PARSED_LOCK:
            _PARSED[key] = found
            while len(_PARSED) > MAX_PARSED:
                _PARSED.popitem(last=False)
    if isinstance(found, LessonError):
        raise LessonError(str(found))
    return found


def _parse(raw: bytes, name: str, origin: str) -> Lesson:
    try:
        doc, lines = load(raw)
    except UnicodeDecodeError:
        raise LessonError(f"{name}: not UTF-8 text") from None
    except TomlBoundError as e:
        raise LessonError(f"{name}: refused, {e} (a lesson needs far fewer)") from None
    except tomllib.TOMLDecodeError as e:
        raise LessonError(f"{name}: not valid TOML ({str(e).splitlines()[0][:200]})") from None
    _unknown(name, doc, LESSON_KEYS, "a lesson")
    slides = doc.get("slides")
    if not isinstance(slides, list) or not slides:
        raise LessonError(f"{name}: no slides (add [[slides]] tables)")
    if len(slides) > MAX_SLIDES:
        raise LessonError(f"{name}: {len(slides)} slides; a lesson may have at most {MAX_SLIDES}")
    lines = lines if len(lines) == len(slides) else ()  # slides = [...] inline: no header lines
    keys = slide_key_lines(raw.decode("utf-8"), lines) if lines else ()
    parsed = []
    for i, sl in enumerate(slides):
        try:
            parsed.append(_slide(i, sl, lines))
        except LessonError as e:
            if i < len(keys):
                raise LessonError(at_key(str(e), f"line {lines[i]}, slide {i + 1}", dict(keys[i]), i)) from None
            raise
    return Lesson(
        name=name,
        title=_text("lesson", "title", doc.get("title", name)),
        description=_text("lesson", "description", doc.get("description", "")),
        slides=tuple(parsed),
        origin=origin,
        lines=lines,
        key_lines=keys,
    )


def shipped_lessons() -> list[str]:
    """Names of the lessons shipped with gptviz (the .toml files beside this module)."""
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.toml") if NAME.fullmatch(p.stem))


def shipped_lesson(name: str) -> Lesson:
    """A shipped lesson by name (as in ?lesson=NAME); only names, never paths, come from a URL."""
    if not NAME.fullmatch(name) or name not in shipped_lessons():
        known = ", ".join(shipped_lessons()) or "none"
        raise LessonError(f"no shipped lesson is called {name[:60]!r}; shipped: {known}")
    return parse_lesson((SHIPPED_DIR / f"{name}.toml").read_bytes(), name, origin="shipped")


def read_lesson(path: str | Path) -> Lesson:
    """A lesson file at a local path: a regular file, read only up to the size limit."""
    p = Path(path).expanduser()
    try:
        if not p.is_file():
            raise LessonError(f"{p.name or path}: no such lesson file")
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise LessonError(f"{p.name}: {size:,} bytes; a lesson file may have at most {MAX_BYTES:,}")
        with p.open("rb") as f:
            data = f.read(MAX_BYTES + 1)  # the file may grow between the stat and the read
    except OSError as e:
        raise LessonError(f"{p.name}: cannot be read ({e.strerror or e})") from None
    return parse_lesson(data, p.stem[:64] or "lesson", origin="file")
