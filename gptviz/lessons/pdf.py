"""The handout as a PDF: the handout's HTML printed by a headless Chromium (or Chrome), the browser
that draws its Plotly figures, so the PDF shows what the HTML shows. Its print CSS (handout.CSS) puts
each slide on its own landscape page and never splits a figure or a table.

No Python package is added for it: the browser is a program on the machine (GPTVIZ_CHROMIUM names
one; otherwise the first of BROWSERS on the PATH), run on a copy of the HTML with no network use."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import OutputError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
TIMEOUT_S = 180  # a lesson of 9 slides prints in a few seconds; 60 slides on a busy laptop, longer
_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def browser() -> str:
    """The browser that prints: GPTVIZ_CHROMIUM, or the first of BROWSERS found on the PATH."""
    named = os.environ.get("GPTVIZ_CHROMIUM")
    if named:
        if not (Path(named).is_file() and os.access(named, os.X_OK)):
            raise OutputError(f"GPTVIZ_CHROMIUM={named[:200]} is not a program that can be run")
        return named
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise OutputError(
        "a PDF is printed by Chromium or Chrome, and none was found (install chromium, or set GPTVIZ_CHROMIUM)"
    )


def print_pdf(html: str | Path, out: str | Path) -> Path:
    """Print the handout at `html` to the PDF `out` (exactly this path) and return it."""
    out = Path(out)
    html = Path(html).resolve()
    with tempfile.TemporaryDirectory(prefix="gptviz-pdf-") as profile:
        target = Path(profile) / "handout.pdf"  # written whole, then moved: no half PDF at `out`
        cmd = [
            browser(),
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--no-pdf-header-footer",
            "--virtual-time-budget=20000",  # the figures are drawn by scripts: let them finish
            f"--print-to-pdf={target}",
            html.as_uri(),
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # Chromium refuses to run as root with its sandbox
            cmd.insert(2, "--no-sandbox")
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise OutputError(f"the browser did not print the PDF within {TIMEOUT_S} s") from None
        if done.returncode != 0 or not target.is_file() or not pages(target):
            why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no PDF written"]
            raise OutputError(f"the browser could not print the PDF: {why[0][:200]}")
        try:
            shutil.move(str(target), out)
        except OSError as err:
            raise OutputError(f"cannot write the PDF to {out}: {err.strerror or err}") from None
    return out


def pages(pdf: str | Path) -> int:
    """How many pages a PDF has: its /Type /Page objects (Chromium writes them uncompressed)."""
    return len(_PAGE.findall(Path(pdf).read_bytes()))
