"""The README's and docs/'s code blocks run as written, so they cannot drift from the code.

- ```python blocks run in order, one namespace per file, from the repository root.
- ```bash blocks: every `gptviz` command in them (written `.venv/bin/gptviz ...`, the spelling the docs
  use) is parsed by gptviz's real argument parser, whether it runs or not, so a renamed or removed flag
  fails here; and the block runs, line by line in a fresh shell from the repository root, unless the
  line before its fence says why not: `<!-- not run: trains for 50 minutes -->`.
- A block in any other language (toml, text) is data, not run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from gptviz.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")


@dataclass(frozen=True)
class Block:
    file: Path
    line: int  # of the opening fence, counted from 1
    lang: str
    code: str
    not_run: str | None  # the reason, when the block is not run

    def __str__(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def blocks(file: Path) -> list[Block]:
    found, lines = [], file.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i, m.group(1), []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        before = lines[start - 1] if start else ""
        reason = NOT_RUN.search(before)
        found.append(Block(file, start + 1, lang, "\n".join(body), reason.group(1) if reason else None))
        i += 1
    return found


ALL = [b for f in FILES for b in blocks(f)]


def commands(code: str) -> list[str]:
    """Shell lines of a block: continuation lines joined, comments and blank lines dropped."""
    out, current = [], ""
    for line in code.splitlines():
        current += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            if current.strip() and not current.strip().startswith("#"):
                out.append(current.strip())
            current = ""
    return out


def gptviz_argv(command: str) -> list[str] | None:
    """The arguments of a `.venv/bin/gptviz ...` command (None for any other command)."""
    words = shlex.split(command, comments=True)
    env = 0
    while env < len(words) and re.match(r"^[A-Z_]+=", words[env]):
        env += 1
    words = words[env:]
    if not words or not words[0].endswith("/gptviz") and words[0] != "gptviz":
        return None
    return words[1:]


def test_the_docs_have_blocks_to_check():
    assert len(FILES) >= 2 and sum(b.lang == "python" for b in ALL) >= 1 and sum(b.lang == "bash" for b in ALL) >= 3


def test_the_docs_spell_gptviz_one_way():
    """One spelling, the venv's: `python -m gptviz` or a bare `gptviz` fails in a fresh shell."""
    for b in ALL:
        if b.lang != "bash":
            continue
        for command in commands(b.code):
            assert "python -m gptviz" not in command, f"{b}: write .venv/bin/gptviz, not python -m gptviz"
            assert not re.match(r"^(\w+=\S+ )*gptviz ", command), f"{b}: write .venv/bin/gptviz ({command})"


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "bash"], ids=str)
def test_every_gptviz_command_in_the_docs_parses(block):
    parser = build_parser()
    for command in commands(block.code):
        argv = gptviz_argv(command)
        if argv is None:
            continue
        try:
            parser.parse_args(argv)
        except SystemExit as e:
            if e.code != 0:  # --help exits 0
                pytest.fail(f"{block}: `{command}` does not parse")


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "bash" and b.not_run is None], ids=str)
def test_every_shell_block_runs_as_written(block, tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "MPLCONFIGDIR": str(tmp_path)}
    env.pop("PYTHONPATH", None)  # a fresh shell: only what the two commands installed
    for command in commands(block.code):
        p = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"{block}: `{command}` failed ({p.returncode}):\n{p.stdout[-1500:]}{p.stderr[-1500:]}"


@pytest.mark.slow
@pytest.mark.parametrize("file", [f for f in FILES if any(b.lang == "python" for b in blocks(f))], ids=lambda f: f.name)
def test_every_python_block_runs_as_written(file, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks(file):
        if block.lang == "python" and block.not_run is None:
            exec(compile(block.code, str(block), "exec"), namespace)  # noqa: S102 (our own docs)
