"""Decoding's head laid out [C, V] (LMHead.one_row_head): its logits against the plain head's, and greedy
decoding through it against Hugging Face's generate (ids, and every step's probabilities against HF's
scores) on a random GPT-2 and a random SmolLM2-shaped Llama, with a spy that proves the copy was read."""

from __future__ import annotations

import threading

import pytest
import torch

import gptviz
from gptviz import generation
from gptviz import model as model_module
from gptviz.bench.families import TINY as TINY_LLAMA
from gptviz.generation import HEAD_COPY_MIN_TOKENS
from gptviz.model import KVCache

pytest.importorskip("transformers")

GPT2 = dict(vocab_size=97, block_size=64, n_layer=3, n_head=4, n_embd=64, activation="gelu_tanh", tie_weights=False)
# untied: a tied head scaled up would scale the embedding too, and each token would predict itself
LLAMA = dict(TINY_LLAMA, tie_weights=False)
SHAPES = {"gpt2": GPT2, "llama": LLAMA, "llama-tied": TINY_LLAMA, "gemma-softcap": dict(LLAMA, final_softcap=5.0)}


def sharp_model(shape: dict) -> gptviz.GPT:
    """Random weights with sharper next-token distributions than the 0.02 init: no near-ties for argmax."""
    torch.manual_seed(0)
    model = gptviz.GPT(gptviz.GPTConfig(**shape)).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(40)
        if "wpe" in model.transformer:
            model.transformer.wpe.weight.mul_(20)
    return model


def hf_copy(model: gptviz.GPT):
    from gptviz.bench.families import to_hf_llama
    from gptviz.bench.forward import to_hf_gpt2

    hf = to_hf_llama(model, "eager") if model.config.pos_encoding == "rotary" else to_hf_gpt2(model, "eager")
    hf.generation_config.eos_token_id = None  # generate every token asked for
    hf.generation_config.pad_token_id = 0
    return hf


@pytest.mark.parametrize("name", SHAPES)
def test_the_one_row_head_gives_the_plain_heads_logits(name):
    model = sharp_model(SHAPES[name])
    ids = torch.tensor([[5, 17, 42, 8, 60, 3, 91, 11]])
    with torch.no_grad():
        plain = model(ids)
        cache = KVCache(model.config.n_layer)
        with model.lm_head.one_row_head():
            prompt = model(ids[:, :-1], cache=cache)
            step = model(ids[:, -1:], cache=cache)  # one row: what a decoding step multiplies
            whole = model(ids)
    assert not torch.equal(step[0, -1], plain[0, -1]), "the copy was not read: the same kernel would be bit-equal"
    scale = plain.abs().max().item()
    for got, want in ((whole, plain), (prompt, plain[:, :-1]), (step, plain[:, -1:])):
        torch.testing.assert_close(got, want, atol=2e-6 * scale, rtol=0)  # float32 rounding of a 32-long sum


def test_the_copy_belongs_to_its_model_and_thread():
    a, b = sharp_model(GPT2), sharp_model(dict(GPT2, n_layer=2))
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        want = b(ids)
        with a.lm_head.one_row_head():
            assert torch.equal(b(ids), want)  # another model's head is not multiplied by a's copy
    assert model_module._head_t.get() is None  # dropped on leaving


def test_generations_at_once_share_one_copy_and_an_edited_weight_gets_a_new_one():
    """Thirty students pressing Generate hold one [C, V] copy, not thirty; dropped when the last leaves."""
    model = sharp_model(GPT2)
    head = model.lm_head
    inside, leave = threading.Barrier(3), threading.Event()
    seen = []

    def decode() -> None:
        with head.one_row_head():
            seen.append(model_module._head_t.get()[1].data_ptr())
            inside.wait(timeout=30)
            leave.wait(timeout=30)

    threads = [threading.Thread(target=decode) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait(timeout=30)
    assert len(seen) == 2 and seen[0] == seen[1] and head._users == 2
    leave.set()
    for t in threads:
        t.join(timeout=30)
    assert head._shared is None and head._users == 0
    ids = torch.tensor([[4, 9]])
    with torch.no_grad(), head.one_row_head():
        head.weight.mul_(2)  # an edit in place while a copy is held: the next block must not read the old one
        with head.one_row_head():
            got = model(ids)
    with torch.no_grad():
        torch.testing.assert_close(got, model(ids), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_decoding_reads_the_copy_and_equals_hugging_face_generate(name):
    model = sharp_model(SHAPES[name])
    hf = hf_copy(model)
    prompt = [5, 17, 42, 8, 60, 3, 91]
    n = model.config.block_size - len(prompt)
    assert n >= HEAD_COPY_MIN_TOKENS
    read = []  # per forward pass: whether the head multiplied by the [C, V] copy of its own weight

    def spy(mod, args, output):
        copy = model_module._head_t.get()
        read.append(copy is not None and copy[0] is mod.weight)

    handle = model.lm_head.register_forward_hook(spy)
    try:
        g = gptviz.generate(model, prompt, n, temperature=0)
    finally:
        handle.remove()
    assert read == [True] * (n + 1)  # the prompt's pass and every step's
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([prompt]), max_new_tokens=n, do_sample=False, output_scores=True, return_dict_in_generate=True
        )
    assert g.ids == out.sequences[0].tolist()
    assert len(set(g.new_ids)) > 3, "a degenerate model would make this comparison weak"
    for step, scores in zip(g.steps, out.scores, strict=True):  # greedy: HF's scores are its raw logits
        probs = torch.softmax(scores[0].float(), dim=-1)
        assert step.prob == pytest.approx(probs[step.id].item(), abs=1e-5)
        top_ids, top_probs = zip(*step.top)
        torch.testing.assert_close(torch.tensor(top_probs), probs[list(top_ids)], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "dtype, n, used",
    [
        (torch.float32, HEAD_COPY_MIN_TOKENS, True),
        (torch.float32, HEAD_COPY_MIN_TOKENS - 1, False),
        (torch.bfloat16, 40, False),
    ],
)
def test_the_copy_is_made_only_where_it_pays(dtype, n, used):
    # bf16 and fp16 one-row products are slower from a [C, V] copy on the CPU; a short generation does not
    # save the copy's cost
    model = sharp_model(GPT2).to(dtype)
    with generation._decoding_head(model, n):
        assert (model_module._head_t.get() is not None) is used
