"""Small readable modules: no library module over 450 lines (docs/contributing.md, "The layout"). The
dashboard's own modules join once its layout by role is settled (drop the skip)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOST_LINES = 450
SKIP = ("gptviz/dashboard/",)


def test_no_library_module_is_over_450_lines():
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted((ROOT / "gptviz").rglob("*.py"))
    }
    assert len(sizes) > 100  # the package was found
    over = {name: n for name, n in sizes.items() if n > MOST_LINES and not name.startswith(SKIP)}
    assert not over, f"over {MOST_LINES} lines: {over}"
