"""A lesson file's TOML read as untrusted text: bounded before Python's tomllib sees it.

tomllib is a careful parser but not a cheap one on every input: a 64 KB file of one long dotted key
(`a.a.a… = 1`) costs it time and memory quadratic in the key's parts (hundreds of MB), and 900
levels of nested arrays end in a RecursionError. So one linear pass first counts, outside strings and
comments, what tomllib pays for: nesting, the parts of a dotted key, keys, array items, tables; a file
over any bound is refused with the line where it went over, before tomllib runs. Within the bounds
any 64 KB file parses in a few hundredths of a second and a few MB (`gptviz bench --lessons` measures it).
"""

from __future__ import annotations

import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover  (tomli is the same parser for 3.10: requirements.txt)
    import tomli as tomllib

MAX_NESTING = 8  # [[slides]] is 2, a highlight's { cell = [1, 2] } 2 more; a tiny head's [[…]] matrix 2
MAX_KEY_PARTS = 8  # a.b.c…: slides use one part, a dotted key of a few is plenty
MAX_KEYS = 2000  # `key =` in the file (60 slides × 12 keys is 720)
MAX_ITEMS = 4000  # commas: array items and inline-table entries (a teacher's matrices: a few hundred)
MAX_OPEN = 2000  # [ and {: tables, arrays, inline tables
MAX_MARKS = 12_000  # all of the above, ] } and every string: a 60-slide lesson has about 2,500
BOM = "\ufeff"
_MARK = re.compile(r"[\[\]{}=,.\"'#]")  # what the pass looks at; everything else it skips at C speed
SLIDES_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*slides[ \t]*\]\]", re.M)


class TomlBoundError(ValueError):
    """A file over one of the bounds: the message names the line and the bound."""


def _string_end(text: str, i: int) -> int:
    """The index just past the string that opens at text[i] (a quote), or len(text) if it never closes
    (tomllib then says so, with its line)."""
    q = text[i]
    if text.startswith(q * 3, i):
        end = text.find(q * 3, i + 3)
        if q == '"':
            while end != -1 and _escaped(text, end):
                end = text.find(q * 3, end + 1)
        return len(text) if end == -1 else end + 3
    stop = text.find("\n", i)
    stop = len(text) if stop == -1 else stop  # a one-line string ends on its line
    j = i + 1
    while True:
        end = text.find(q, j, stop)
        if end == -1:
            return stop  # an unclosed one-line string: tomllib reports it
        if q == '"' and _escaped(text, end):
            j = end + 1
            continue
        return end + 1


def _escaped(text: str, i: int) -> bool:
    """Whether text[i] follows an odd number of backslashes."""
    n = 0
    while i - n - 1 >= 0 and text[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def check_bounds(text: str) -> None:
    """TomlBoundError if text holds more of what tomllib pays for than a lesson can need. Linear and
    at most MAX_MARKS steps: one regex search per mark, strings and comments skipped with str.find."""
    depth = parts = keys = items = opened = marks = 0
    i, n = 0, len(text)

    def refuse(what: str) -> TomlBoundError:
        return TomlBoundError(f"line {text.count(chr(10), 0, i) + 1}: {what}")

    while i < n:
        m = _MARK.search(text, i)
        if m is None:
            break
        i, c = m.start(), m.group()
        marks += 1
        if marks > MAX_MARKS:
            raise refuse(f"more than {MAX_MARKS} brackets, quotes, dots, commas and equals signs")
        if c in "\"'":
            i = _string_end(text, i)
            continue
        if c == "#":
            end = text.find("\n", i)
            i = n if end == -1 else end
            continue
        if c == ".":  # a key's parts, or a number's point; a new key or value begins after = , [ {
            parts += 1
            if parts >= MAX_KEY_PARTS:
                raise refuse(f"a dotted key of more than {MAX_KEY_PARTS} parts")
        else:
            parts = 0
            if c in "[{":
                depth, opened = depth + 1, opened + 1
                if depth > MAX_NESTING:
                    raise refuse(f"nested more than {MAX_NESTING} levels deep")
                if opened > MAX_OPEN:
                    raise refuse(f"more than {MAX_OPEN} tables and arrays")
            elif c in "]}":
                depth = max(depth - 1, 0)
            elif c == "=":
                keys += 1
                if keys > MAX_KEYS:
                    raise refuse(f"more than {MAX_KEYS} keys")
            elif c == ",":
                items += 1
                if items > MAX_ITEMS:
                    raise refuse(f"more than {MAX_ITEMS} items")
        i += 1


def load(raw: bytes) -> tuple[dict, tuple[int, ...]]:
    """The TOML document in raw (UTF-8, a leading byte-order mark allowed), and the line of each
    [[slides]] header in order. UnicodeDecodeError, TomlBoundError or tomllib.TOMLDecodeError (a
    RecursionError tomllib might still hit becomes one too)."""
    text = raw.decode("utf-8").removeprefix(BOM)
    check_bounds(text)
    try:
        doc = tomllib.loads(text)
    except RecursionError:  # the bounds keep nesting shallow; never let one escape as a crash
        raise tomllib.TOMLDecodeError("nested too deep") from None
    lines = tuple(text.count("\n", 0, m.start()) + 1 for m in SLIDES_HEADER.finditer(text))
    return doc, lines
