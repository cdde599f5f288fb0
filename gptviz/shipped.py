"""Where the items gptviz ships live: the checkpoints, the sample corpora and their scans.

In a source checkout they are its top-level `checkpoints/` and `samples/`; an installed package
(`pip install .`) carries the same files as package data under `gptviz/_shipped/`. An environment
variable names another folder (a class server's own set, a test's)."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_ENV = {"checkpoints": "GPTVIZ_CHECKPOINTS_DIR", "samples": "GPTVIZ_SAMPLES_DIR"}


def shipped_dir(kind: str) -> Path:
    """`checkpoints` or `samples`: $GPTVIZ_<KIND>_DIR, else the checkout's folder, else the installed
    package's copy, else ./<kind> (a folder the user made)."""
    if os.environ.get(_ENV[kind]):
        return Path(os.environ[_ENV[kind]])
    for folder in (_PACKAGE.parent / kind, _PACKAGE / "_shipped" / kind):
        if folder.is_dir():
            return folder
    return Path.cwd() / kind
