"""docs/checkpoints.md's family table is the family records' (gptviz/formats/families.py), generated, as
TransformerLens generates its list of supported models: a family added, renamed or described anew in its
record fails here until the docs follow. `python tests/test_family_table.py --write` rewrites the table."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gptviz.formats.families import FAMILIES, markdown_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "checkpoints.md"
BLOCK = re.compile(
    r"(<!-- family table: generated from gptviz/formats/families.py -->\n)(.*?)(\n<!-- end of family table -->)", re.S
)


def documented() -> str:
    m = BLOCK.search(DOC.read_text(encoding="utf-8"))
    assert m, f"{DOC.name} has no generated family table between its markers"
    return m.group(2)


def test_the_docs_family_table_is_the_records():
    assert documented() == markdown_table(), "the family records changed: python tests/test_family_table.py --write"


def test_every_record_names_the_checkpoints_people_download():
    """One row per family, each with its checkpoints: a record without them would leave a blank cell."""
    rows = markdown_table().splitlines()[2:]
    assert len(rows) == len(FAMILIES)
    assert all(family.checkpoints for family in FAMILIES.values())


def write() -> None:
    text = DOC.read_text(encoding="utf-8")
    DOC.write_text(BLOCK.sub(lambda m: m.group(1) + markdown_table() + m.group(3), text), encoding="utf-8")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write()
