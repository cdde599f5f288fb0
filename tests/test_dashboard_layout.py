"""The dashboard's layout: a few modules at gptviz/dashboard's top (the frame every page sits in), the rest
in sub-packages by role, and docs/architecture.md's map naming every module and sub-package with what it
owns. (No import goes in a circle there either: tests/test_import_graph.py.)"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "gptviz" / "dashboard"
MAP = ROOT / "docs" / "architecture.md"
TOP_MODULES = 14  # at the top: the frame every page sits in


def mapped() -> set[str]:
    """What docs/architecture.md's "The dashboard" section names in its table's first column."""
    section = MAP.read_text().split("\n## The dashboard\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([\w/]+(?:\.py|/))` \|", section, re.M))


def test_the_map_names_every_module_and_sub_package_of_the_dashboard():
    on_disk = {p.relative_to(DASHBOARD).as_posix() for p in DASHBOARD.rglob("*.py") if p.name != "__init__.py"}
    on_disk |= {p.parent.relative_to(DASHBOARD).as_posix() + "/" for p in DASHBOARD.glob("*/__init__.py")}
    named = mapped()
    assert on_disk - named == set(), "in gptviz/dashboard but not in docs/architecture.md's map"
    assert named - on_disk == set(), "in docs/architecture.md's map but not in gptviz/dashboard"


def test_the_dashboards_top_holds_few_modules():
    top = sorted(p.name for p in DASHBOARD.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= TOP_MODULES, top
