"""gptviz.generate past block_size with crop_context=True: as nanoGPT's sample.py, the context is
cropped to its last block_size tokens and generation goes on. Every step's distribution, chosen
token and attention row are checked against a fresh forward (and Trace) of exactly the cropped
window; and the record unpacks as `ids, steps = gptviz.generate(...)`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import VARIANTS, tiny_model, variant_id

import gptviz
from gptviz.generation import TOP

BLOCK = 16


def window_logits(model: gptviz.GPT, ids: list[int]) -> torch.Tensor:
    """The next-token logits nanoGPT's sample.py computes: a plain forward over the last block_size ids."""
    with torch.no_grad():
        return model(torch.tensor([ids[-BLOCK:]]))[0, -1]  # (V,)


# positions learned, sinusoidal and rotary (with grouped-query attention): a cropped window moves every
# kept token, so each step past block_size must equal a fresh forward whatever the encoding
WINDOW_VARIANTS = [*VARIANTS[::10], dict(pos_encoding="rotary", n_kv_head=1)]


@pytest.mark.parametrize("variant", WINDOW_VARIANTS, ids=variant_id)
def test_greedy_steps_past_block_size_equal_a_fresh_forward_of_the_cropped_window(variant):
    model = tiny_model(seed=4, **variant)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    n = 20  # 10 + 20 = 30 tokens: 14 steps past block_size = 16
    g = gptviz.generate(model, prompt, n, temperature=0, crop_context=True)
    assert len(g.ids) == len(prompt) + n and g.stopped == "" and g.crop_context
    L, H = model.config.n_layer, model.config.n_head
    for step in g.steps:
        pos = step.position
        logits = window_logits(model, g.ids[:pos])
        probs = torch.softmax(logits, -1)
        assert step.id == int(torch.argmax(logits))
        want_p, want_i = torch.topk(probs, min(TOP, probs.numel()))
        assert [i for i, _ in step.top] == want_i.tolist()
        np.testing.assert_allclose([p for _, p in step.top], want_p.numpy(), rtol=0, atol=1e-5)
        # its attention row: the last row of a Trace of the window that ends with it
        assert step.window_start == max(0, pos + 1 - BLOCK) and list(step.window) == list(
            range(step.window_start, pos + 1)
        )
        window = g.ids[step.window_start : pos + 1]
        tr = gptviz.trace(model, window)
        want = np.stack([tr[f"blocks.{l}.attn.weights"][:, -1, :] for l in range(L)])  # (L, H, len(window))
        assert step.attention.shape == (L, H, len(window))
        np.testing.assert_allclose(step.attention, want, rtol=0, atol=1e-5)
    assert any(s.window_start > 0 for s in g.steps)


def test_a_prompt_longer_than_block_size_is_cropped_and_sampling_matches_the_window():
    model = tiny_model(seed=9)
    prompt = [(3 * i + 1) % 11 for i in range(25)]  # 25 tokens, block_size 16
    g = gptviz.generate(model, prompt, 6, temperature=1.0, seed=5, crop_context=True)
    assert g.ids[:25] == prompt and len(g.steps) == 6 and g.prompt_len == 25
    for step in g.steps:
        probs = torch.softmax(window_logits(model, g.ids[: step.position]), -1)
        assert step.prob == pytest.approx(float(probs[step.id]), abs=1e-5)
        assert step.attention.shape[-1] == BLOCK and step.window_start == step.position + 1 - BLOCK
    # without the window the same prompt is refused, and a prompt that fits stops at block_size
    with pytest.raises(gptviz.PromptError, match="block_size"):
        gptviz.generate(model, prompt, 6, temperature=0)
    short = gptviz.generate(model, prompt[:12], 10, temperature=0)
    assert len(short.ids) == BLOCK and "stopped after 4 new token(s)" in short.stopped


def test_the_window_slides_like_nanogpt_sample_loop():
    """nanoGPT's loop written out: crop to block_size, forward, take the argmax, append."""
    model = tiny_model(seed=2, n_layer=3, n_head=4, n_embd=32)
    ids = [4, 4, 2, 9]
    for _ in range(30):
        ids.append(int(torch.argmax(window_logits(model, ids))))
    assert gptviz.generate(model, [4, 4, 2, 9], 30, temperature=0, crop_context=True).ids == ids


def test_the_record_unpacks_into_ids_and_steps(model):
    ids, steps = gptviz.generate(model, [1, 2, 3], 4, temperature=0)
    g = gptviz.generate(model, [1, 2, 3], 4, temperature=0)
    assert ids == g.ids and [s.id for s in steps] == g.new_ids and len(steps) == 4
