"""gptviz.generate and the KV cache: cached logits against full re-runs on every model variant,
greedy ids against Hugging Face's generate, each step's probability, alternatives and attention row
against a full re-run, seeds, top-k / top-p, block_size and bad arguments."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from conftest import VARIANTS, tiny_model, variant_id

import gptviz
from gptviz.errors import PromptError
from gptviz.generation import TOP, filtered_probs
from gptviz.model import KVCache

PROMPT = [1, 2, 3, 4, 5]


def full_logits(model: gptviz.GPT, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids]))[0]  # (T, V)


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_cached_logits_equal_a_full_rerun_on_every_variant(variant):
    model = tiny_model(seed=3, **variant)
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]
    full = full_logits(model, ids)
    for explicit in (False, True):
        cache = KVCache(model.config.n_layer)
        parts = []
        with torch.no_grad():
            # a prompt, a chunk of several tokens after it (the offset causal mask), then one at a time
            for chunk in (ids[:5], ids[5:9], *([i] for i in ids[9:])):
                parts.append(model(torch.tensor([chunk]), explicit=explicit, cache=cache)[0])
        assert len(cache) == len(ids)
        torch.testing.assert_close(torch.cat(parts), full, rtol=0, atol=1e-5)


def test_a_cache_past_block_size_is_refused(model):
    cache = KVCache(model.config.n_layer)
    with torch.no_grad():
        model(torch.zeros(1, 15, dtype=torch.long), cache=cache)
        model(torch.zeros(1, 1, dtype=torch.long), cache=cache)
        with pytest.raises(PromptError, match="block_size=16"):
            model(torch.zeros(1, 1, dtype=torch.long), cache=cache)


@pytest.mark.parametrize("variant", VARIANTS[::7], ids=variant_id)
def test_greedy_steps_equal_full_reruns(variant):
    model = tiny_model(seed=5, **variant)
    g = gptviz.generate(model, PROMPT, 9, temperature=0)
    assert g.ids[: len(PROMPT)] == PROMPT and len(g.ids) == len(PROMPT) + 9 and len(g.steps) == 9
    assert g.seed is None and g.stopped == ""
    for s, step in enumerate(g.steps):
        pos = len(PROMPT) + s
        assert step.position == pos and g.ids[pos] == step.id == step["id"]
        logits = full_logits(model, g.ids[:pos])[-1]
        probs = torch.softmax(logits, -1)
        assert step.id == int(torch.argmax(logits))
        assert step.prob == pytest.approx(float(probs[step.id]), abs=1e-6)
        want_p, want_i = torch.topk(probs, min(TOP, probs.numel()))
        assert [i for i, _ in step.top] == want_i.tolist()
        np.testing.assert_allclose([p for _, p in step.top], want_p.numpy(), atol=1e-6)


def test_attention_rows_equal_the_last_row_of_a_full_trace():
    model = tiny_model(seed=7, n_layer=3, n_head=4, n_embd=32)
    g = gptviz.generate(model, PROMPT, 8, temperature=1.0, seed=11)
    L, H = 3, 4
    for step in g.steps:
        t = step.position + 1
        assert step.attention.shape == (L, H, t)
        tr = gptviz.trace(model, g.ids[:t])
        want = np.stack([tr[f"blocks.{l}.attn.weights"][:, -1, :] for l in range(L)])  # (L, H, t)
        np.testing.assert_allclose(step.attention, want, rtol=0, atol=1e-6)
        np.testing.assert_allclose(step.attention.sum(-1), 1.0, atol=1e-5)


def test_greedy_ids_equal_hugging_face_generate():
    pytest.importorskip("transformers")
    from gptviz.bench.forward import to_hf_gpt2

    torch.manual_seed(0)
    cfg = gptviz.GPTConfig(
        vocab_size=97, block_size=48, n_layer=3, n_head=4, n_embd=64, activation="gelu_tanh", tie_weights=False
    )
    model = gptviz.GPT(cfg).eval()
    with torch.no_grad():  # sharper distributions than the 0.02 init: no near-ties for argmax
        model.lm_head.weight.mul_(40)
        model.transformer.wpe.weight.mul_(20)
    hf = to_hf_gpt2(model, "eager")
    hf.generation_config.eos_token_id = None  # generate every token asked for
    hf.generation_config.pad_token_id = 0
    prompt = [5, 17, 42, 8, 60, 3, 91]
    n = 48 - len(prompt)
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)[0].tolist()
    g = gptviz.generate(model, prompt, n, temperature=0)
    assert len(want) == 48 and g.ids == want
    assert len(set(g.new_ids)) > 3, "a degenerate model would make this comparison weak"


def test_same_seed_same_text_other_seed_differs_one_at_a_time_equals_n_at_once(model):
    rng = torch.get_rng_state()
    a = gptviz.generate(model, PROMPT, 11, temperature=1.0, seed=123)
    b = gptviz.generate(model, PROMPT, 11, temperature=1.0, seed=123)
    c = gptviz.generate(model, PROMPT, 11, temperature=1.0, seed=124)
    assert torch.equal(torch.get_rng_state(), rng), "the global RNG must not be used"
    assert a.ids == b.ids and a.seed == 123
    assert a.ids != c.ids
    ids = list(PROMPT)
    for _ in range(11):
        ids = gptviz.generate(model, ids, 1, temperature=1.0, seed=123).ids
    assert ids == a.ids
    unseeded = gptviz.generate(model, PROMPT, 3)
    assert isinstance(unseeded.seed, int)
    assert gptviz.generate(model, PROMPT, 3, seed=unseeded.seed).ids == unseeded.ids


def test_top_k_and_top_p_restrict_the_sampled_ids(model):
    logits = full_logits(model, PROMPT)[-1] * 10  # a temperature of 1/10: a spread-out but uneven distribution
    order = torch.argsort(logits, descending=True).tolist()
    probs = torch.softmax(logits, -1)
    # top_p by hand: the smallest prefix of the ranking whose probability reaches 0.6
    cum, allowed_p = 0.0, set()
    for i in order:
        allowed_p.add(i)
        cum += float(probs[i])
        if cum >= 0.6:
            break
    assert 1 < len(allowed_p) < len(order)
    seen_k, seen_p, seen_free = set(), set(), set()
    for seed in range(150):
        seen_k.add(gptviz.generate(model, PROMPT, 1, temperature=0.1, top_k=3, seed=seed).new_ids[0])
        seen_p.add(gptviz.generate(model, PROMPT, 1, temperature=0.1, top_p=0.6, seed=seed).new_ids[0])
        seen_free.add(gptviz.generate(model, PROMPT, 1, temperature=0.1, seed=seed).new_ids[0])
    assert seen_k <= set(order[:3]) and len(seen_k) > 1
    assert seen_p <= allowed_p and len(seen_p) > 1
    assert len(seen_free) > len(seen_k), "without top_k more ids come out"
    one = {gptviz.generate(model, PROMPT, 1, temperature=0.1, top_k=1, seed=s).new_ids[0] for s in range(20)}
    assert one == {order[0]}


def test_filtered_probs_by_hand():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    torch.testing.assert_close(filtered_probs(logits, 1.0, None, 0.7), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    torch.testing.assert_close(filtered_probs(logits, 1.0, None, 0.85), torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95)
    torch.testing.assert_close(filtered_probs(logits, 1.0, 2, None), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    torch.testing.assert_close(filtered_probs(logits, 1.0, None, 0.1), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    # temperature 2: probabilities proportional to sqrt(p)
    root = torch.sqrt(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    torch.testing.assert_close(filtered_probs(logits, 2.0, None, None), root / root.sum())


def test_generation_stops_at_block_size_and_says_so(model):
    g = gptviz.generate(model, PROMPT, 100, temperature=0)
    assert len(g.ids) == model.config.block_size == 16 and len(g.steps) == 11
    assert "block_size=16" in g.stopped and "11" in g.stopped
    full = gptviz.generate(model, list(range(1, 11)) + [0] * 6, 3, temperature=0)
    assert full.steps == [] and "block_size=16" in full.stopped
    assert gptviz.generate(model, PROMPT, 0).steps == []
    with pytest.raises(PromptError, match="block_size"):
        gptviz.generate(model, [1] * 17, 1)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(max_new_tokens=-1),
        dict(max_new_tokens=1.5),
        dict(max_new_tokens=True),
        dict(temperature=-0.1),
        dict(temperature=float("nan")),
        dict(temperature="1"),
        dict(top_k=0),
        dict(top_k=2.0),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(seed=1.5),
        dict(seed="7"),
    ],
)
def test_bad_arguments_are_one_line_errors(model, kwargs):
    args = dict(max_new_tokens=3) | kwargs
    with pytest.raises(PromptError) as e:
        gptviz.generate(model, PROMPT, **args)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("ids", [[], [1, 99], [[1, 2]], [0.5]])
def test_bad_prompts_are_refused(model, ids):
    with pytest.raises(PromptError):
        gptviz.generate(model, ids, 2)


def test_threads_sharing_one_model_each_get_their_own_rows(model):
    prompts = [[i, (i + 3) % 11, (i + 5) % 11] for i in range(6)]
    want = [gptviz.generate(model, p, 8, seed=1) for p in prompts]
    got: dict[int, gptviz.generation.Generation] = {}

    def run(i):
        got[i] = gptviz.generate(model, prompts[i], 8, seed=1)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, w in enumerate(want):
        assert got[i].ids == w.ids
        for a, b in zip(got[i].steps, w.steps):
            np.testing.assert_array_equal(a.attention, b.attention)
    assert all(not block.attn.weights._forward_hooks for block in model.transformer.h), "hooks removed"


@pytest.mark.parametrize("crop", [False, True])
def test_the_step_lock_is_held_around_every_forward_pass_and_only_there(crop):
    """step_lock: every pass of the model (the prompt's, each step's, a cropped window's) runs holding
    it, and it is let go between steps, so other threads' passes go in between."""
    model = tiny_model()  # block_size 16: 20 new tokens after 5 slide the window with crop_context
    lock, held, entered = threading.RLock(), [], [0]

    class Counting:
        def __enter__(self):
            lock.acquire()
            entered[0] += 1

        def __exit__(self, *exc):
            lock.release()

    hook = model.register_forward_pre_hook(lambda mod, args: held.append(lock._is_owned()))
    try:
        n = 20 if crop else 8
        g = gptviz.generate(model, PROMPT, n, temperature=0, crop_context=crop, step_lock=Counting())
    finally:
        hook.remove()
    assert len(g.steps) == n and entered[0] == n + 1 == len(held) and all(held)
    assert not lock._is_owned()
    plain = gptviz.generate(model, PROMPT, n, temperature=0, crop_context=crop)
    assert g.ids == plain.ids
