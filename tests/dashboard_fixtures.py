"""A small random-weight checkpoint for the dashboard's tests, written to a temporary folder, so
the AppTest and browser tests never depend on the trained checkpoints in checkpoints/."""

from __future__ import annotations

from pathlib import Path

import torch

import gptviz

NAME = "tiny-char"
# Printable ASCII without "~" and "|": those two (and anything non-ASCII) are unknown characters.
CHARS = sorted({chr(c) for c in range(32, 127)} - {"~", "|"} | {"\n"})
CONFIG = dict(vocab_size=len(CHARS), block_size=64, n_layer=2, n_head=4, n_embd=32)


def make_checkpoints(root: Path) -> Path:
    """root/tiny-char (a native checkpoint) and root/broken (a folder that fails to load)."""
    torch.manual_seed(1234)
    model = gptviz.GPT(gptviz.GPTConfig(**CONFIG))
    gptviz.save(model, root / NAME, gptviz.CharTokenizer(CHARS), card={"note": "test fixture, random weights"})
    broken = root / "broken"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "config.json").write_text('{"gptviz_format": 1, "config": {"n_layer": "two"}}')
    return root
