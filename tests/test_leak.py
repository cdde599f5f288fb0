"""The mask switch on a loaded model (gptviz.analysis.leak): future mass 0 exactly with the mask,
the hand computation's value without it, on a random model and on the shipped char model; and the
shipped leaky model, trained with the mask off by mistake, falls apart once the mask is back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gptviz
from gptviz.analysis import leak
from gptviz.names import point
from tests.conftest import tiny_model

ROOT = Path(__file__).resolve().parent.parent / "checkpoints"
# A few lines of Romeo and Juliet (public domain), typed here as a fixed probe of the weights.
PASSAGE = (
    "ROMEO.\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n"
    "Arise, fair sun, and kill the envious moon,\nWho is already sick and pale with grief,\n"
)


@pytest.fixture(scope="module")
def char():
    return gptviz.load(ROOT / "shakespeare-char")


@pytest.fixture(scope="module")
def leaky():
    return gptviz.load(ROOT / "shakespeare-char-leaky")


def hand_future_mass(scores: np.ndarray) -> np.ndarray:
    """Softmax over ALL keys of the captured scores [H, T, T], then the weight on keys j > i,
    summed over the queries: [H]. Written out with numpy, not with the module under test."""
    s = np.asarray(scores, dtype=np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    w = e / e.sum(axis=-1, keepdims=True)
    T = s.shape[-1]
    out = np.zeros(s.shape[0])
    for i in range(T):
        for j in range(i + 1, T):
            out += w[:, i, j]
    return out


def check_switch(model: gptviz.GPT, ids: list[int], tokenizer=None) -> leak.Leak:
    lk = leak.mask_leak(model, ids, tokenizer)
    L, H = model.config.n_layer, model.config.n_head
    assert lk.masked.future_mass.shape == (L, H) == lk.unmasked.future_mass.shape
    assert np.all(lk.masked.future_mass == 0.0)  # exactly: masked keys get weight 0, not a small number
    for layer in range(L):
        scores = lk.unmasked.trace[point("attn.scores", layer)]  # captured, before the (absent) mask
        np.testing.assert_allclose(lk.unmasked.future_mass[layer], hand_future_mass(scores), rtol=1e-5, atol=1e-6)
        assert lk.unmasked.trace[point("attn.mask", layer)].all()
    assert np.all(lk.unmasked.future_mass > 0.01)
    # the switch reaches the predictions: every position but the last reads a different context
    assert not np.allclose(lk.masked.probs[0], lk.unmasked.probs[0], atol=1e-4)
    return lk


def test_switch_on_a_random_model():
    model = tiny_model(seed=3)
    ids = [1, 5, 2, 7, 7, 3, 0, 9, 4, 10]
    lk = check_switch(model, ids)
    # with the mask the run is the plain model: its logits, and the loss as F.cross_entropy says
    logits = model(torch.tensor([ids]))[0].detach()
    np.testing.assert_allclose(lk.masked.probs, F.softmax(logits.double(), -1).numpy(), atol=1e-6)
    want = F.cross_entropy(logits[:-1].double(), torch.tensor(ids[1:]), reduction="none").numpy()
    np.testing.assert_allclose(lk.masked.loss, want, atol=1e-6)
    # without the mask: the same numbers as the explicit path with the mask probe returning all True
    hooks = [b.attn.mask.register_forward_hook(lambda m, i, o: torch.ones_like(o)) for b in model.transformer.h]
    try:
        with gptviz.explicit_attention():
            free = model(torch.tensor([ids]))[0].detach()
    finally:
        for h in hooks:
            h.remove()
    np.testing.assert_allclose(lk.unmasked.probs, F.softmax(free.double(), -1).numpy(), atol=1e-6)


def test_switch_on_the_shipped_char_model(char):
    ids = char.tokenizer.encode(PASSAGE)[:60]
    lk = check_switch(char.model, ids, char.tokenizer)
    assert lk.tokens[:6] == list("ROMEO.")


def test_future_mass_is_the_toys_sum():
    w = np.array([[1.0, 0.0, 0.0], [0.3, 0.3, 0.4], [0.2, 0.5, 0.3]])
    assert leak.future_mass(w) == pytest.approx(0.4)  # only row 1 reads a later key (j = 2)
    assert leak.future_mass(np.stack([w, np.eye(3)])).tolist() == pytest.approx([0.4, 0.0])


def test_top_k_and_loss_table(char):
    ids = char.tokenizer.encode(PASSAGE)[:40]
    lk = leak.mask_leak(char.model, ids, char.tokenizer)
    top = lk.top_k(5, k=4, tokenizer=char.tokenizer)
    assert len(top) == 4
    p = lk.masked.probs[5]
    assert top["with mask: p"].tolist() == pytest.approx(sorted(p, reverse=True)[:4])
    assert top["with mask: token"][1] == gptviz.display_token(char.tokenizer.decode([int(np.argmax(p))]))
    with pytest.raises(IndexError):
        lk.top_k(len(ids))
    table = lk.loss_table()
    assert len(table) == len(ids) - 1 and table["next"].iloc[0] == "O"


def test_leaky_model_looks_wonderful_without_the_mask_and_falls_apart_with_it(leaky):
    ids = leaky.tokenizer.encode(PASSAGE)[: leaky.model.config.block_size]
    lk = leak.mask_leak(leaky.model, ids, leaky.tokenizer)
    off, on = lk.unmasked.mean_loss, lk.masked.mean_loss
    # measured (checkpoints/README.md): 0.0004 nats/char without the mask, 7.7082 with it
    assert off < 0.5 * on, (off, on)
    assert off < 0.5 and on > 2.0, (off, on)
    # it learned to read the answer: without the mask, the next character is its top guess almost everywhere
    hits = np.mean(np.argmax(lk.unmasked.probs[:-1], -1) == np.array(ids[1:]))
    assert hits > 0.9
    # the same numbers from text_loss, which reads any length of text in block_size windows
    assert leak.text_loss(leaky.model, ids, causal=False) < 0.5 * leak.text_loss(leaky.model, ids, causal=True)


def test_leaky_card_says_how_it_was_made(leaky):
    card = leaky.card
    assert "--no-causal-mask" in card["command"]
    assert card["n_params"] == leaky.model.num_params()


def test_no_causal_mask_hooks_are_the_switch():
    """train.without_causal_mask makes every plain forward pass the switched-off one, and leaves the
    explicit-path setting as it found it."""
    from gptviz.model import _explicit
    from gptviz.training.train import without_causal_mask

    model = tiny_model(seed=5)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    want = gptviz.trace(model, ids, interventions=leak.unmask(model.config.n_layer))["logits"]
    plain = model(torch.tensor([ids]))[0].detach().numpy()
    without_causal_mask(model)
    got = model(torch.tensor([ids]))[0].detach().numpy()
    assert not _explicit.get()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(got, plain, atol=1e-3)


@pytest.mark.slow
def test_train_no_causal_mask_learns_to_copy(tmp_path):
    """On random letters nothing can be predicted (the best causal loss is ln 8 = 2.08 nats), yet a
    model trained with --no-causal-mask reaches a low loss by reading the answer, and loses it with the mask."""
    from gptviz.cli import main

    rng = np.random.default_rng(0)
    text = "".join(rng.choice(list("abcdefgh"), 6000))
    (tmp_path / "noise.txt").write_text(text)
    out = tmp_path / "ck"
    argv = ["train", "--corpus", str(tmp_path / "noise.txt"), "--out", str(out), "--no-causal-mask"]
    argv += ["--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--batch-size", "16"]
    argv += ["--max-steps", "250", "--lr", "1e-2", "--warmup-steps", "10", "--eval-interval", "50", "--threads", "1"]
    assert main(argv) == 0
    bundle = gptviz.load(out)
    assert "causal_mask" in bundle.card and bundle.card["val_loss"] < 1.0  # measured with the mask off
    ids = bundle.tokenizer.encode(text[-200:])
    off, on = leak.text_loss(bundle.model, ids, causal=False), leak.text_loss(bundle.model, ids, causal=True)
    assert off < 1.0 < 2.0 < on, (off, on)
