"""How long, and how much memory, a hostile 64 KB lesson file costs: `gptviz bench --lessons`.

Each case is a file of at most lessons.MAX_BYTES built to cost a TOML parser the most (one long dotted
key, many dotted keys, deep nesting, many keys, items, tables, strings, escapes, comments, blank
lines). *after* is lessons.parse_lesson (bounded before tomllib, bounded_toml.py): the best of 3 runs'
seconds and the peak Python memory (tracemalloc) of one. *before* is tomllib on the same text, unbounded,
in a child process capped at 1 GB of address space and 60 s (a file that takes more says so)."""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
import tracemalloc

from ..lessons import MAX_BYTES, LessonError, parse_lesson

HEAD = 'title = "t"\n[[slides]]\npage = "mask"\ntitle = "t"\n'


def _fill(line: str, room: int = MAX_BYTES) -> str:
    return line * max(room // len(line), 1)


def cases() -> dict[str, str]:
    """Hostile lesson texts, each at most MAX_BYTES bytes."""
    n = MAX_BYTES
    c = {
        "one dotted key a.a.a…": "a." * ((n - 8) // 2) + "a = 1\n",
        "dotted keys, 100 parts each": "".join(f"k{i}." + "a." * 99 + "b = 1\n" for i in range(n // 210)),
        "dotted keys, 7 parts each": "".join(f"k{i}.a.b.c.d.e.f = 1\n" for i in range(n // 24)),
        "nesting 900 deep": "x = " + "[" * 900 + "]" * 900 + "\n",
        "nesting 8 deep, repeated": "".join(f"x{i} = [[[[[[[[1]]]]]]]]\n" for i in range(n // 25)),
        "keys": "".join(f"k{i} = 1\n" for i in range(n // 10)),
        "array items": "x = [" + "1," * ((n - 8) // 2) + "]\n",
        "tables": "".join(f"[t{i}]\n" for i in range(n // 8)),
        "inline tables": "x = [" + "{}," * ((n - 8) // 3) + "]\n",
        "one long string": 'note = "' + "x" * (n - 12) + '"\n',
        "escapes": 'note = "' + "\\u0041" * ((n - 12) // 6) + '"\n',
        "comments": _fill("# a comment\n"),
        "blank lines": "\n" * n,
        "many closing brackets": "]" * n,
        "many empty strings": "x = [" + '"",' * ((n - 8) // 3) + "]\n",
        "a valid lesson of 60 slides": "".join(
            f'[[slides]]\npage = "attention"\ntitle = "slide {i}"\nnote = "{"x" * 600}"\nlayer = 1\nhead = 2\n'
            f"highlight = {{ cell = [3, 2] }}\n"
            for i in range(60)
        ),
    }
    return {k: v.encode()[:n].decode("utf-8", "ignore") for k, v in c.items()}


def _after(text: str, i: int) -> tuple[float, float, str]:
    best = float("inf")
    outcome = ""
    for r in range(3):
        t = time.perf_counter()
        try:
            parse_lesson(text, f"bench{i}-{r}")  # a new name each time: never the parse cache
            outcome = "parsed"
        except LessonError as e:
            outcome = str(e).split(": ", 1)[-1][:60]
        best = min(best, time.perf_counter() - t)
    return best, peak_mb(text, f"bench{i}-mem"), outcome


def peak_mb(text: str, name: str) -> float:
    """The peak Python memory (tracemalloc, MB) of parsing text as a lesson, refused or not."""
    tracemalloc.start()
    try:
        with contextlib.suppress(LessonError):
            parse_lesson(text, name)
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


# the child imports nothing of gptviz (torch): its memory is tomllib's
CHILD = """
import json, resource, sys, time, tomllib
resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))
text = open(sys.argv[1], encoding="utf-8").read()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
try:
    tomllib.loads(text)
    outcome = "parsed"
except MemoryError:
    outcome = "out of memory (1 GB cap)"
except Exception as e:
    outcome = type(e).__name__
seconds = time.perf_counter() - t
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(json.dumps({"s": seconds, "mb": grown / 1e3, "outcome": outcome}))
"""


def _before(text: str, tmp: str) -> tuple[str, str, str]:
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, tmp], capture_output=True, text=True, timeout=60)
        r = json.loads(out.stdout)
        return f"{r['s']:.3f}", f"{r['mb']:.0f}", r["outcome"]
    except subprocess.TimeoutExpired:
        return "> 60", "?", "timed out"
    except ValueError:
        return "?", "?", "child died"


def main(args: argparse.Namespace | list[str] | None = None) -> int:
    """`gptviz bench --lessons` (before and after), or `python -m gptviz.bench.lessons [--before]`."""
    if isinstance(args, argparse.Namespace):  # gptviz bench --lessons: before and after
        before = True
    else:
        p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        p.add_argument("--before", action="store_true", help="also time plain tomllib (a child process each)")
        before = p.parse_args(args).before
    head = f"{'case':32s} {'bytes':>6s} {'after s':>8s} {'after MB':>9s}  outcome"
    print(head + ("  | before: tomllib alone" if before else ""))
    worst_s = worst_mb = 0.0
    for i, (name, text) in enumerate(cases().items()):
        s, mb, outcome = _after(text, i)
        worst_s, worst_mb = max(worst_s, s), max(worst_mb, mb)
        line = f"{name:32s} {len(text.encode()):6d} {s:8.4f} {mb:9.2f}  {outcome[:50]}"
        if before:
            bs, bmb, bout = _before(text, "/tmp/gptviz-bench-lesson.toml")
            line += f"  | {bs} s, {bmb} MB, {bout}"
        print(line, flush=True)
    print(f"worst: {worst_s:.4f} s, {worst_mb:.2f} MB (the goal: <= 0.2 s and <= 50 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
