"""The type checker over gptviz/, views/ and app.py (pyproject's [tool.mypy] files): no file may have more
mypy errors than tests/mypy_baseline.json allows, and the baseline follows every fix down (it only
shrinks). In the quick loop: mypy's cache (.mypy_cache) makes a run after a change a few seconds.

    .venv/bin/python tests/test_types.py           # what `make lint` runs: the check, one line per file off
    .venv/bin/python tests/test_types.py --write   # rewrite the baseline after fixing errors
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tests" / "mypy_baseline.json"
MAX_TOTAL = 60  # the baseline's ceiling: it was 227 over these files before the pages were checked too
ERROR = re.compile(r"^((?:gptviz|views)/[^:]+\.py|app\.py):\d+: error: ")


def mypy_errors() -> Counter:
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True, timeout=1200
    )
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]  # 2: mypy itself failed
    return Counter(m.group(1) for line in p.stdout.splitlines() if (m := ERROR.match(line)))


def off_baseline(found: Counter, allowed: dict[str, int]) -> list[str]:
    """One line per file whose count differs from the baseline: more (new errors) or fewer (a fix to record)."""
    lines = []
    for f in sorted(set(found) | set(allowed)):
        n, a = found.get(f, 0), allowed.get(f, 0)
        if n > a:
            lines.append(f"{f}: {n} mypy errors, the baseline allows {a}: run `.venv/bin/mypy` to see them")
        elif n < a:
            lines.append(f"{f}: {n} mypy errors, fewer than the baseline's {a}: run tests/test_types.py --write")
    return lines


def test_the_baseline_stays_under_its_ceiling():
    allowed = json.loads(BASELINE.read_text())
    assert sum(allowed.values()) <= MAX_TOTAL, f"{sum(allowed.values())} errors in the baseline, over {MAX_TOTAL}"


def test_no_file_has_more_type_errors_than_its_baseline():
    off = off_baseline(mypy_errors(), json.loads(BASELINE.read_text()))
    assert not off, "\n".join(off)


def test_the_comparison_catches_a_new_error_and_a_fix():
    allowed = {"gptviz/a.py": 2}
    assert off_baseline(Counter({"gptviz/a.py": 2}), allowed) == []
    assert "the baseline allows 2" in off_baseline(Counter({"gptviz/a.py": 3}), allowed)[0]
    assert "fewer than the baseline's 2" in off_baseline(Counter({"gptviz/a.py": 1}), allowed)[0]
    assert "allows 0" in off_baseline(Counter({"views/new.py": 1}), allowed)[1]
    assert ERROR.match("app.py:3: error: x") and ERROR.match("views/qkv.py:3: error: x")


if __name__ == "__main__":
    counts = mypy_errors()
    if sys.argv[1:] == ["--write"]:
        BASELINE.write_text(json.dumps(dict(sorted(counts.items())), indent=1) + "\n")
        print(f"{sum(counts.values())} errors in {len(counts)} files -> {BASELINE.relative_to(ROOT)}")
    else:
        off = off_baseline(counts, json.loads(BASELINE.read_text()))
        print("\n".join(off) or f"mypy: {sum(counts.values())} errors, as the baseline allows")
        sys.exit(1 if off else 0)
