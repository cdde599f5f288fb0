"""Links and pointers stay true: every relative link in README.md and docs/ names a file that is there
(and, with #anchor, a heading of it), and every pointer the code gives a reader, `(README, "Speed")` or
`(docs/scanning.md, "Speed on a busy laptop")`, names a section that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
POINTER = re.compile(r"\b(README|docs/[\w-]+\.md),? [\"“]([^\"”]+)[\"”]")
# where code points readers at the docs; views/ and gptviz/dashboard/ join when their pointers are fixed
CODE = [p for p in sorted((ROOT / "gptviz").rglob("*.py")) if "dashboard" not in p.parts] + [ROOT / "app.py"]


def headings(file: Path) -> list[str]:
    """The file's headings, outside code blocks."""
    found, fenced = [], False
    for line in file.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#+\s+(.+?)\s*#*$", line)):
            found.append(m.group(1))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_slugs_are_githubs():
    assert slug("Memory: models the size people download") == "memory-models-the-size-people-download"
    assert slug("The `gptviz bench` command") == "the-gptviz-bench-command"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_and_heading_that_exist(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.relative_to(ROOT)}: link to {target}: no such file"
        if anchor and file.suffix == ".md":
            anchors = {slug(h) for h in headings(file)}
            assert anchor in anchors, f"{doc.relative_to(ROOT)}: link to {target}: no such heading"


def test_every_pointer_in_the_code_names_a_section_that_exists():
    pointers = [(p, m) for p in CODE for m in POINTER.finditer(p.read_text(encoding="utf-8"))]
    assert pointers  # the pattern still finds the pointers the code gives
    for path, m in pointers:
        file = ROOT / ("README.md" if m.group(1) == "README" else m.group(1))
        assert file.is_file(), f"{path.relative_to(ROOT)}: points at {m.group(1)}, which is not there"
        assert any(h.startswith(m.group(2)) for h in headings(file)), (
            f"{path.relative_to(ROOT)}: points at {m.group(1)}, {m.group(2)!r}: no such section"
        )
