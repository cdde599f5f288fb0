"""Decoding from one captured step (cuda_steps.py). Its arithmetic, the StaticKVCache (fixed-size buffers,
positions on the device, empty slots masked), runs on any device: on the CPU it is checked against the
growing cache step by step for every family. The CUDA graph itself needs a GPU (`make test-gpu`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_helpers import FAMILIES, hf_random_decoder

import gptviz
from gptviz import cuda_steps
from gptviz.decoding import KVCache, StaticKVCache

PROMPT = [3, 17, 5, 9, 3, 17, 5]


def static_and_growing(model, new: list[int]):
    """Each new token's logits through a StaticKVCache and through the KVCache, both after the prompt."""
    growing = KVCache(model.config.n_layer)
    prompt = torch.tensor([PROMPT], device=model.device)
    with torch.no_grad():
        model(prompt, cache=growing)
        static = StaticKVCache(growing, len(PROMPT) + len(new) + 3)  # spare slots stay masked
        grown = KVCache(model.config.n_layer)
        model(prompt, cache=grown)
        for tok in new:
            t = torch.tensor([[tok]], device=model.device)
            a = model(t, explicit=True, cache=static)[0, -1]
            static.advance()
            b = model(t, explicit=True, cache=grown)[0, -1]
            yield a, b


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_a_static_cache_step_is_the_growing_caches(tmp_path, kind):
    hf_random_decoder(kind, seed=4).save_pretrained(tmp_path)
    model = gptviz.load(tmp_path).model
    for a, b in static_and_growing(model, [8, 1, 12, 4, 9]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_absolute_positions_read_the_device_position(pos):
    torch.manual_seed(0)
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=30, block_size=32, n_layer=2, n_head=2, n_embd=16, pos_encoding=pos))
    for a, b in static_and_growing(model.eval(), [8, 1, 12]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_captured_step_decodes_as_the_eager_step(tmp_path, dtype, monkeypatch):
    hf_random_decoder("llama", seed=4).save_pretrained(tmp_path)
    model = gptviz.load(tmp_path, device="cuda", dtype=dtype).model
    captured = gptviz.generate(model, PROMPT, 12, temperature=0)
    sampled = gptviz.generate(model, PROMPT, 12, temperature=0.8, seed=5)
    monkeypatch.setattr(cuda_steps, "USE", False)
    eager = gptviz.generate(model, PROMPT, 12, temperature=0)
    assert captured.ids == eager.ids
    assert sampled.ids == gptviz.generate(model, PROMPT, 12, temperature=0.8, seed=5).ids
    for s, e in zip(captured.steps, eager.steps, strict=True):
        assert s.attention.shape == e.attention.shape == (model.config.n_layer, model.config.n_head, s.position + 1)
        np.testing.assert_allclose(s.attention, e.attention, atol=1e-5 if dtype == "float32" else 1e-2)
        assert s.prob == pytest.approx(e.prob, rel=1e-4 if dtype == "float32" else 2e-2)


@pytest.mark.gpu
def test_greedy_ids_equal_hugging_faces_in_float32(tmp_path):
    from transformers import AutoModelForCausalLM

    hf_random_decoder("llama", seed=4).save_pretrained(tmp_path)
    model = gptviz.load(tmp_path, device="cuda", dtype="float32").model
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).to("cuda").eval()
    ids = torch.tensor([PROMPT], device="cuda")
    want = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, min_new_tokens=16, do_sample=False)
    assert gptviz.generate(model, PROMPT, 16, temperature=0, stop_at_eos=False).ids == want[0].tolist()
