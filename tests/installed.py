"""Build the wheel, install it into a folder of its own, and run what it installed from a working
folder outside the checkout: shared by tests/test_package.py and tests/e2e/test_installed_dashboard.py
(one build per pytest process)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "checkpoints"
# Never copied into the build: a stale build/lib in the checkout would end up in the wheel
# (setuptools packs whatever build/lib holds), and the rest is not source.
# The shipped checkpoints and samples are copied: the wheel carries them (gptviz/shipped.py).
NOT_SOURCE = {".git", ".venv", "build", "dist", "artifacts", "test-results", ".pytest_cache", "docs"}


@dataclass(frozen=True)
class Installed:
    wheel: Path  # the built .whl
    target: Path  # what `pip install --target` wrote: gptviz/, bin/gptviz, the dist-info
    work: Path  # an empty working folder outside the checkout
    build_log: str  # what `pip wheel -v` printed: setuptools' warnings among it

    @property
    def script(self) -> Path:
        return self.target / "bin" / "gptviz"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment that imports gptviz from the installed copy, not the checkout's editable install."""
        return {**os.environ, "PYTHONPATH": str(self.target), **extra}

    def run(self, *args: str, timeout: float = 300, **extra_env: str) -> subprocess.CompletedProcess:
        """Run a command in the working folder with the installed copy first on the path."""
        return subprocess.run(
            list(args), cwd=self.work, env=self.env(**extra_env), capture_output=True, text=True, timeout=timeout
        )


_cache: dict[str, Installed] = {}


def _copy_source(dest: Path) -> Path:
    def ignore(folder: str, names: list[str]) -> set[str]:
        top = Path(folder).resolve() == ROOT
        return {n for n in names if (top and n in NOT_SOURCE) or n == "__pycache__" or n.endswith(".egg-info")}

    return Path(shutil.copytree(ROOT, dest, ignore=ignore))


def installed_package(tmp_path_factory) -> Installed:
    """The wheel built from a copy of the checkout (build isolation fetches setuptools as
    `pip install .` would) and installed with `pip install --no-deps --target`."""
    if "it" in _cache:
        return _cache["it"]
    base = tmp_path_factory.mktemp("wheel")
    src = _copy_source(base / "src")
    dist, target, work = base / "dist", base / "target", base / "work"
    work.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "-v", "--no-deps", str(src), "-w", str(dist)], capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("gptviz-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=600)
    _cache["it"] = Installed(wheel=wheel, target=target, work=work, build_log=built.stdout + built.stderr)
    return _cache["it"]
