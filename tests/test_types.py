"""The type checker over gptviz/: no file may have more mypy errors than tests/mypy_baseline.json
allows, and the baseline follows every fix down (it only shrinks).

    .venv/bin/python tests/test_types.py --write   # rewrite the baseline after fixing errors
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tests" / "mypy_baseline.json"
ERROR = re.compile(r"^(gptviz/[^:]+\.py):\d+: error: ")


def mypy_errors() -> Counter:
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True, timeout=1200
    )
    assert p.returncode in (0, 1), p.stderr[-2000:]  # 2: mypy itself failed
    counts = Counter(m.group(1) for line in p.stdout.splitlines() if (m := ERROR.match(line)))
    return counts


@pytest.mark.slow
def test_no_file_has_more_type_errors_than_its_baseline():
    allowed = json.loads(BASELINE.read_text())
    found = mypy_errors()
    grown = {f: (n, allowed.get(f, 0)) for f, n in found.items() if n > allowed.get(f, 0)}
    assert not grown, f"new mypy errors (found, allowed): {grown}; run `.venv/bin/mypy` to see them"
    shrunk = {f: (found.get(f, 0), n) for f, n in allowed.items() if found.get(f, 0) < n}
    assert not shrunk, (
        f"fewer mypy errors than the baseline (found, allowed): {shrunk}; run tests/test_types.py --write"
    )


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    counts = mypy_errors()
    BASELINE.write_text(json.dumps(dict(sorted(counts.items())), indent=1) + "\n")
    print(f"{sum(counts.values())} errors in {len(counts)} files -> {BASELINE.relative_to(ROOT)}")
