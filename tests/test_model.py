"""The model family: every variant builds and runs; configs and inputs are checked with clear errors."""

from __future__ import annotations

import math
import re

import pytest
import torch
from conftest import VARIANTS, tiny_model, variant_id

import gptviz
from gptviz.model import KVCache, grouped_matmul, sinusoidal_positions


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_every_variant_runs_and_traces_with_contract_shapes(variant):
    model = tiny_model(**variant)
    cfg = model.config
    T, C, H, D, V = 5, cfg.n_embd, cfg.n_head, cfg.head_dim, cfg.vocab_size
    logits = model(torch.tensor([[1, 2, 3, 4, 5]]))
    assert logits.shape == (1, T, V)
    tr = gptviz.trace(model, [1, 2, 3, 4, 5])
    assert tr.names == gptviz.contract_names(cfg.n_layer)
    expected = {"embed": (T, C), "ln_f": (T, C), "logits": (T, V)}
    for l in range(cfg.n_layer):
        for site in ("resid_pre", "resid_mid", "resid_post"):
            expected[f"blocks.{l}.{site}"] = (T, C)
        for site in ("q", "k", "v"):
            expected[f"blocks.{l}.attn.{site}"] = (H, T, D)
        expected[f"blocks.{l}.attn.scores"] = (H, T, T)
        expected[f"blocks.{l}.attn.weights"] = (H, T, T)
        expected[f"blocks.{l}.attn.mask"] = (T, T)
        expected[f"blocks.{l}.attn.z"] = (H, T, D)
        expected[f"blocks.{l}.attn.out"] = (T, C)
        expected[f"blocks.{l}.mlp.in"] = (T, C)
        expected[f"blocks.{l}.mlp.hidden"] = (T, 4 * C)
        expected[f"blocks.{l}.mlp.out"] = (T, C)
    assert {n: tr[n].shape for n in tr.names} == expected
    assert tr["blocks.0.attn.mask"].dtype == bool


@pytest.mark.parametrize("variant", VARIANTS[::5], ids=variant_id)
def test_fused_and_explicit_attention_agree(variant):
    # The fused kernel (SDPA) sums in another order than softmax(q k^T / sqrt(D)) @ v, so the two
    # differ by float32 rounding: a few ulp of values of order 1, far below 1e-5.
    model = tiny_model(**variant)
    idx = torch.randint(0, 11, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        fused, explicit = model(idx), model(idx, explicit=True)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_tied_weights_share_one_tensor_and_untied_do_not():
    tied, untied = tiny_model(tie_weights=True), tiny_model(tie_weights=False)
    assert tied.lm_head.weight is tied.transformer.wte.weight
    assert untied.lm_head.weight is not untied.transformer.wte.weight
    assert untied.num_params() - tied.num_params() == 11 * 16


def test_variant_choices_change_the_modules():
    m = tiny_model(norm="rmsnorm", activation="gelu_tanh", bias=False, pos_encoding="sinusoidal")
    assert isinstance(m.transformer.ln_f, torch.nn.RMSNorm)
    assert m.transformer.h[0].mlp.act.approximate == "tanh"
    assert m.transformer.h[0].attn.c_attn.bias is None
    assert "wpe" not in m.transformer
    assert not any("wpe" in k for k in m.state_dict())


def test_sinusoidal_table_matches_the_formula():
    pe = sinusoidal_positions(8, 6)
    pos, i = 3, 1  # column 2i = sin(pos / 10000^(2i/d)), column 2i+1 = cos of the same
    angle = pos / 10000 ** (2 * i / 6)
    assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-7)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-7)


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("norm", "batchnorm", "choose one of layernorm, rmsnorm"),
        ("activation", "swish", "choose one of gelu"),
        ("pos_encoding", "alibi", "choose one of learned, sinusoidal, rotary, none"),
        ("n_head", 0, "positive integer"),
        ("n_embd", 10, "not divisible by n_head"),
        ("dropout", 1.5, "must be in [0, 1)"),
    ],
)
def test_bad_config_is_refused_with_a_reason(field, value, words):
    base = dict(n_head=4, n_embd=16)
    with pytest.raises(gptviz.ConfigError, match=re.escape(words)):
        gptviz.GPTConfig(**{**base, field: value})


@pytest.mark.parametrize(
    "ids, words",
    [
        (torch.zeros(1, 0, dtype=torch.long), "prompt is empty"),
        (torch.zeros(1, 17, dtype=torch.long), "at most block_size=16"),
        (torch.tensor([[1, 11]]), "token id 11 is outside the vocabulary [0, 10]"),
        (torch.tensor([[-1, 2]]), "token id -1 is outside"),
        (torch.tensor([[1.0, 2.0]]), "must be integers"),
        (torch.tensor([1, 2]), "shape [B, T]"),
    ],
)
def test_bad_ids_raise_prompt_error_not_index_error(model, ids, words):
    with pytest.raises(gptviz.PromptError, match=re.escape(words)):
        model(ids)


@pytest.mark.parametrize("lead", [(), (2,)])
@pytest.mark.parametrize("H, Hkv, T", [(6, 2, 1), (6, 3, 5), (4, 4, 3), (4, 1, 2)])
def test_grouped_matmul_reads_head_h_from_kv_head_h_over_g(lead, H, Hkv, T):
    """Query head h reads key/value head h // (H / H_kv), as Llama's repeat_kv maps them, head by head by
    hand; a non-contiguous left side (a transposed view, as an edit may hand back) too."""
    g = torch.Generator().manual_seed(H * 10 + Hkv)
    a = torch.randn(*lead, H, T, 8, generator=g)
    b = torch.randn(*lead, Hkv, 8, 7, generator=g)
    by_hand = torch.stack([a[..., h, :, :] @ b[..., h // (H // Hkv), :, :] for h in range(H)], dim=-3)
    torch.testing.assert_close(grouped_matmul(a, b), by_hand, rtol=1e-6, atol=1e-6)
    a_t = a.transpose(-1, -2).contiguous().transpose(-1, -2)
    torch.testing.assert_close(grouped_matmul(a_t, b), by_hand, rtol=1e-6, atol=1e-6)


def test_rotary_tables_are_built_once_per_forward_for_each_kind_of_layer(monkeypatch):
    """Layers share one forward pass's cos / sin tables (model.rotation_in); local layers with their own
    rotary base (Gemma 3) get their own. Equal to every layer building its own (`_logits` alone keeps no memo)."""
    from gptviz.model import CausalSelfAttention

    calls: list[bool] = []
    real = CausalSelfAttention.rotation

    def counted(self, start: int, T: int):
        calls.append(self.local)
        return real(self, start, T)

    monkeypatch.setattr(CausalSelfAttention, "rotation", counted)
    config = gptviz.GPTConfig(
        n_layer=4, n_head=2, n_embd=16, vocab_size=11, block_size=16, pos_encoding="rotary",
        sliding_window=3, layer_types="lglg", rope_local_theta=100.0,
    )  # fmt: skip
    model = gptviz.GPT(config).eval()
    x = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        shared = model(x)
        assert sorted(calls) == [False, True]
        calls.clear()
        own = model._logits(x)
    assert len(calls) == 4
    assert torch.equal(shared, own)


def test_unhooked_masks_are_shared_and_a_hooked_one_is_the_layers_own():
    """Within one forward pass the layers share one causal mask (model.mask_in); a hooked mask probe gets
    a mask of its own, so an edit made in place changes that layer only, as before. A one-token step that
    skips masking (nothing to mask) still applies an edited mask."""
    torch.manual_seed(0)
    config = gptviz.GPTConfig(n_layer=3, n_head=2, n_embd=16, vocab_size=11, block_size=16)
    model = gptviz.GPT(config).eval()
    seen: list[torch.Tensor] = []
    x = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        plain = model(x, explicit=True)
        h = model.transformer.h[1].attn.mask.register_forward_hook(lambda m, i, mask: seen.append(mask))
        model(x, explicit=True)
        h.remove()
        assert len(seen) == 1

        def in_place(m, i, mask):
            mask[4, 0] = False  # the last query does not read the first token
            return mask

        def fresh(m, i, mask):
            mask = mask.clone()
            mask[4, 0] = False
            return mask

        runs = []
        for edit in (in_place, fresh):
            h = model.transformer.h[1].attn.mask.register_forward_hook(edit)
            runs.append(model(x, explicit=True))
            h.remove()
        assert model(x, explicit=True).equal(plain)  # nothing was left changed
    assert runs[0].equal(runs[1])  # the in-place edit reached layer 1 only
    assert runs[0][0, :4].equal(plain[0, :4]) and not torch.allclose(runs[0][0, 4], plain[0, 4])

    cache = KVCache(config.n_layer)
    with torch.no_grad():
        model(x[:, :4], explicit=True, cache=cache)
        h = model.transformer.h[0].attn.mask.register_forward_hook(lambda m, i, mask: torch.zeros_like(mask))
        step = model(x[:, 4:], explicit=True, cache=cache)  # T == 1: reads nothing once edited
        h.remove()
    assert step.isnan().all()


def test_every_rope_scaling_the_config_accepts_has_its_rotary_variant():
    """The rotary registry (positions.ROPE_SCALINGS) and the config's allowed rope_scaling values are one list."""
    from gptviz.config import CHOICES
    from gptviz.positions import ROPE_SCALINGS

    assert set(ROPE_SCALINGS) == set(CHOICES["rope_scaling"])


def test_attention_runs_the_function_its_table_names(monkeypatch):
    """CausalSelfAttention runs whichever ATTENTION_FUNCTIONS entry attention.implementation names:
    explicit where asked, fused otherwise."""
    from gptviz import attention

    model = gptviz.GPT(gptviz.GPTConfig(n_layer=1, n_head=2, n_embd=8, vocab_size=7, block_size=8)).eval()
    ran: list[str] = []
    for name, fn in list(attention.ATTENTION_FUNCTIONS.items()):
        monkeypatch.setitem(attention.ATTENTION_FUNCTIONS, name, lambda *a, _n=name, _f=fn: ran.append(_n) or _f(*a))
    x = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        fused, explicit = model(x), model(x, explicit=True)
    assert ran == ["fused", "explicit"]
    torch.testing.assert_close(fused, explicit)
