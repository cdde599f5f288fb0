"""Small random-weight checkpoints written to a folder, for the dashboard's benchmarks and tests: they
never depend on the trained checkpoints in checkpoints/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import gptviz

from .forward import GPT2_SMALL

NAME = "tiny-char"
# Printable ASCII without "~" and "|": those two (and anything non-ASCII) are unknown characters.
CHARS = sorted({chr(c) for c in range(32, 127)} - {"~", "|"} | {"\n"})
CONFIG: dict[str, Any] = dict(vocab_size=len(CHARS), block_size=64, n_layer=2, n_head=4, n_embd=32)


def make_checkpoints(root: Path) -> Path:
    """root/tiny-char (a native checkpoint) and root/broken (a folder that fails to load)."""
    torch.manual_seed(1234)
    model = gptviz.GPT(gptviz.GPTConfig(**CONFIG))
    gptviz.save(model, root / NAME, gptviz.CharTokenizer(CHARS), card={"note": "test fixture, random weights"})
    broken = root / "broken"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "config.json").write_text('{"gptviz_format": 1, "config": {"n_layer": "two"}}')
    return root


def make_overtime_checkpoints(root: Path) -> Path:
    """make_checkpoints, plus what Compare and Timeline need: root/tiny-char-2 (other weights of the
    same shape), root/tiny-run (a run folder: steps 0, 50 and 100 with their losses on the cards)
    and root/tiny-deep (three layers: another shape)."""
    make_checkpoints(root)
    torch.manual_seed(99)
    tok = gptviz.CharTokenizer(CHARS)
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), root / "tiny-char-2", tok, card={"note": "other weights"})
    for i, step in enumerate((0, 50, 100)):
        torch.manual_seed(200 + i)
        card = {"steps": step, "train_loss": 4.0 - i, "val_loss": 4.2 - i}
        gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), root / "tiny-run" / f"step-{step:06d}", tok, card=card)
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**dict(CONFIG, n_layer=3))), root / "tiny-deep", tok, card={})
    return root


GPT2_SMALL_NAME = "gpt2-small-char"
# Printable ASCII first (the prompt's characters), then CJK ideographs and Hangul syllables to fill
# GPT-2's 50,257 ids, so every id the model can predict has a printable token.
_FILL = [*range(0x4E00, 0xA000), *range(0xAC00, 0xD7A4), *range(0x20000, 0x2A6E0)]
GPT2_SMALL_CHARS = CHARS + [chr(c) for c in _FILL[: 50257 - len(CHARS)]]


def make_gpt2_small_checkpoint(root: Path, n_embd: int = 768) -> Path:
    """root/gpt2-small-char: GPT-2 small's shape (12 layers, 12 heads, C = 768, V = 50,257,
    block 1,024; about 500 MB of float32 weights), random weights, a character tokenizer.
    A narrower n_embd keeps every layer, head, position and id (so every map, table and message the
    dashboard sends has its full size) at a fraction of the compute."""
    torch.manual_seed(1234)
    shape: dict[str, Any] = GPT2_SMALL | {"n_embd": n_embd}
    model = gptviz.GPT(gptviz.GPTConfig(**shape))
    gptviz.save(
        model,
        root / GPT2_SMALL_NAME,
        gptviz.CharTokenizer(GPT2_SMALL_CHARS),
        card={"note": f"test fixture: GPT-2 small shape (C = {n_embd}), random weights"},
    )
    return root
