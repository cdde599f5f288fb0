"""Capture: the Trace holds exactly what the model computed, and the hooks leave no trace behind."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz

IDS = [3, 1, 4, 1, 5, 9, 2, 6]


def test_names_of_a_one_layer_model_are_pinned():
    tr = gptviz.trace(tiny_model(n_layer=1), IDS)
    assert tr.names == [
        "embed",
        "blocks.0.resid_pre",
        "blocks.0.attn.q",
        "blocks.0.attn.k",
        "blocks.0.attn.v",
        "blocks.0.attn.scores",
        "blocks.0.attn.mask",
        "blocks.0.attn.weights",
        "blocks.0.attn.z",
        "blocks.0.attn.out",
        "blocks.0.resid_mid",
        "blocks.0.mlp.in",
        "blocks.0.mlp.hidden",
        "blocks.0.mlp.out",
        "blocks.0.resid_post",
        "ln_f",
        "logits",
    ]


def test_attention_invariants_on_every_layer_and_head(model):
    tr = gptviz.trace(model, IDS)
    T = len(IDS)
    lower = np.tril(np.ones((T, T), dtype=bool))
    for l in range(model.config.n_layer):
        w = tr[f"blocks.{l}.attn.weights"]  # [H, T, T]
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
        assert (w[:, ~lower] == 0).all(), "a query read a future key"
        np.testing.assert_array_equal(tr[f"blocks.{l}.attn.mask"], lower)
        # scores are before the mask: the future entries hold real q.k values, not -inf
        assert np.isfinite(tr[f"blocks.{l}.attn.scores"]).all()


def test_captured_values_reproduce_what_each_sublayer_added(model):
    tr = gptviz.trace(model, IDS)
    T, C = len(IDS), model.config.n_embd
    with torch.no_grad():
        for l, block in enumerate(model.transformer.h):
            t = lambda name: torch.from_numpy(tr[f"blocks.{l}.{name}"].copy())  # noqa: E731
            # attention output rebuilt from the captured weights and v, through the real c_proj
            heads = t("attn.weights") @ t("attn.v")  # (H, T, D)
            attn_out = block.attn.c_proj(heads.transpose(0, 1).reshape(T, C))  # merge heads: (T, C)
            # x + a - x is not a in float32; the residual's rounding is ~1e-7 of |x|
            torch.testing.assert_close(t("resid_mid") - t("resid_pre"), attn_out, atol=1e-6, rtol=1e-5)
            mlp_out = block.mlp(block.ln_2(t("resid_mid")))
            torch.testing.assert_close(t("resid_post") - t("resid_mid"), mlp_out, atol=1e-6, rtol=1e-5)
            # scores really are q k^T / sqrt(D)
            D = model.config.head_dim
            torch.testing.assert_close(t("attn.scores"), t("attn.q") @ t("attn.k").transpose(-2, -1) / math.sqrt(D))
            if l + 1 < model.config.n_layer:
                np.testing.assert_array_equal(tr[f"blocks.{l}.resid_post"], tr[f"blocks.{l + 1}.resid_pre"])
        np.testing.assert_array_equal(tr["blocks.0.resid_pre"], tr["embed"])
        last = torch.from_numpy(tr[f"blocks.{model.config.n_layer - 1}.resid_post"].copy())
        np.testing.assert_array_equal(model.transformer.ln_f(last).numpy(), tr["ln_f"])
        np.testing.assert_array_equal(model.lm_head(torch.from_numpy(tr["ln_f"].copy())).numpy(), tr["logits"])


def test_capture_does_not_change_the_logits_at_all(model):
    tr = gptviz.trace(model, IDS)
    with torch.no_grad():
        plain = model(torch.tensor([IDS]))[0].numpy()
    np.testing.assert_array_equal(tr["logits"], plain)  # bit-identical, not merely close


def test_rebuilt_attention_maps_equal_the_explicit_forward(model):
    # The Trace does not keep scores and weights; it rebuilds them from q and k. In layer 0 both
    # forward paths see the same q and k, so the maps must be bit-identical to what the explicit
    # path computes, seen through its own probes. Deeper layers read a residual that the fused
    # kernel rounded differently (~1e-7), so there they agree to float32 rounding.
    seen = {}
    handles = [
        getattr(block.attn, site).register_forward_hook(
            lambda m, a, out, key=f"blocks.{l}.attn.{site}": seen.__setitem__(key, out[0].clone())
        )
        for l, block in enumerate(model.transformer.h)
        for site in ("scores", "weights")
    ]
    try:
        with torch.no_grad():
            model(torch.tensor([IDS]), explicit=True)
    finally:
        for h in handles:
            h.remove()
    tr = gptviz.trace(model, IDS)
    assert len(seen) == 2 * model.config.n_layer
    for name, value in seen.items():
        if name.startswith("blocks.0."):
            np.testing.assert_array_equal(tr[name], value.numpy(), err_msg=name)
        else:
            np.testing.assert_allclose(tr[name], value.numpy(), atol=1e-6, err_msg=name)


def test_attention_maps_and_sublayer_outputs_are_not_held(model):
    tr = gptviz.trace(model, IDS)
    held = tr.nbytes
    tr["blocks.0.attn.weights"], tr["blocks.1.attn.scores"], tr["blocks.0.mlp.hidden"], tr["blocks.1.attn.out"]
    assert tr.nbytes == held
    T, C, V, L = len(IDS), 16, 11, 2
    # what is kept: c_attn output (q, k, v) per layer, embed = resid_pre 0, resid_mid and resid_post
    # per layer (resid_post l is resid_pre l+1), ln_f and logits; the T x T mask is built when read
    old = 4 * (L * T * 3 * C + T * C + L * 2 * T * C + T * C + T * V)
    # of the sub-layer outputs' points only attn.z (T x C per layer) is new memory: attn.out, mlp.hidden and
    # mlp.out are rebuilt from z and resid_mid when asked for; still no T x T map per head. The logits
    # are rebuilt from ln_f: of them only the last position's V floats are held; resid_mid
    # is resid_pre + the rebuilt attn.out
    assert held == old + 4 * L * T * C - 4 * T * V + 4 * V - 4 * L * T * C


def test_rebuilt_sublayer_outputs_equal_the_forward_passs_own_bit_for_bit(model):
    # an identity edit keeps a point as the forward pass computed it: the rebuild must equal it exactly
    plain = gptviz.trace(model, IDS)
    for name in (gptviz.point(site, l) for l in range(2) for site in ("attn.out", "mlp.hidden", "mlp.out")):
        assert not plain.held(name)
        kept = gptviz.trace(model, IDS, interventions=[gptviz.intervene(name, lambda x: x)])
        assert kept.held(name)
        np.testing.assert_array_equal(plain[name], kept[name], err_msg=name)


def test_a_rebuild_refuses_once_the_weights_changed():
    model = tiny_model()  # its own: this test changes the weights
    tr = gptviz.trace(model, IDS)
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight.mul_(2.0)  # as a training step would, in place
    tr["blocks.0.mlp.hidden"]  # layer 0 is untouched
    with pytest.raises(RuntimeError, match="weights changed after this Trace was recorded"):
        tr["blocks.1.mlp.out"]


def test_hand_worked_attention_one_layer_one_head():
    # C = 2, one head, LayerNorm with eps 0 and gain 1, bias 0: the two token embeddings
    # [1, -1] and [-1, 1] come out of ln_1 unchanged, so x_i = s_i * [1, -1] with s = +1 / -1.
    model = gptviz.GPT(
        gptviz.GPTConfig(vocab_size=2, block_size=4, n_layer=1, n_head=1, n_embd=2, norm_eps=0.0, tie_weights=False)
    ).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.transformer.wte.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))
        block = model.transformer.h[0]
        block.ln_1.weight.fill_(1.0)
        w_q = torch.tensor([[2.0, 0.0], [0.0, 0.0]])  # q_i = [2 s_i, 0]
        w_k = torch.eye(2)  # k_j = x_j = s_j [1, -1]
        w_v = torch.eye(2)
        block.attn.c_attn.weight.copy_(torch.cat([w_q, w_k, w_v]))  # nn.Linear: y = x W^T
    s = [1, -1, 1]  # ids [0, 1, 0]
    # score_ij = q_i . k_j / sqrt(2) = 2 s_i s_j / sqrt(2) = sqrt(2) s_i s_j, for j <= i
    r2 = math.sqrt(2)
    e = math.exp
    expected = np.array(
        [
            [1.0, 0.0, 0.0],
            [e(-r2) / (e(-r2) + e(r2)), e(r2) / (e(-r2) + e(r2)), 0.0],
            [e(r2) / (2 * e(r2) + e(-r2)), e(-r2) / (2 * e(r2) + e(-r2)), e(r2) / (2 * e(r2) + e(-r2))],
        ]
    )
    tr = gptviz.trace(model, [0, 1, 0])
    scores = np.array([[r2 * s[i] * s[j] for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(tr["blocks.0.attn.scores"][0], scores, atol=1e-6)
    np.testing.assert_allclose(tr["blocks.0.attn.weights"][0], expected, atol=1e-6)


def all_hooks(model):
    return [
        (name, kind)
        for name, m in model.named_modules()
        for kind in ("_forward_hooks", "_forward_pre_hooks")
        if getattr(m, kind)
    ]


def test_hooks_are_removed_after_a_run_and_after_a_run_that_raised(model, monkeypatch):
    gptviz.trace(model, IDS)
    assert all_hooks(model) == []

    def boom(*args, **kwargs):
        raise RuntimeError("boom in the MLP")

    monkeypatch.setattr(model.transformer.h[1].mlp, "forward", boom)
    with pytest.raises(RuntimeError, match="boom"):
        gptviz.trace(model, IDS)
    assert all_hooks(model) == []


def test_two_threads_tracing_one_shared_model_each_get_their_own_trace(model):
    prompts = {"a": [1, 2, 3, 4, 5, 6], "b": [7, 7, 0, 9, 10, 2, 3, 8, 1]}
    reference = {k: gptviz.trace(model, ids) for k, ids in prompts.items()}
    # Both threads stop at block 0 until the other arrives, so each forward pass runs while the
    # other call's hooks are registered on the same modules.
    barrier = threading.Barrier(2, timeout=30)

    def meet(module, args):
        barrier.wait()  # returns an int; a pre-hook must return None to leave the input alone

    handle = model.transformer.h[0].register_forward_pre_hook(meet)
    results, errors = {}, []

    def work(key):
        try:
            results[key] = [gptviz.trace(model, prompts[key]) for _ in range(5)]
        except Exception as e:  # surfaced in the main thread below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in prompts]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
    finally:
        handle.remove()
    assert not errors
    for key, traces in results.items():
        for tr in traces:
            assert tr.names == reference[key].names
            assert tr.shape_trace.equals(reference[key].shape_trace)
            for name in tr.names:
                np.testing.assert_array_equal(tr[name], reference[key][name], err_msg=f"{key}: {name}")


def test_npz_round_trip_is_exact(model, tmp_path):
    tok = gptviz.CharTokenizer(list("abc defghi\n"))
    ids = tok.encode("a bc\nd")
    tr = gptviz.trace(model, ids, tok)
    tr.to_npz(tmp_path / "t.npz")
    back = gptviz.Trace.from_npz(tmp_path / "t.npz")
    assert back.tokens == ["a", " ", "b", "c", "\n", "d"]
    np.testing.assert_array_equal(back.token_ids, ids)
    assert back.names == tr.names
    for name in tr.names:
        assert back[name].dtype == tr[name].dtype
        np.testing.assert_array_equal(back[name], tr[name])
    with np.load(tmp_path / "t.npz") as f:
        assert set(f.files) == set(gptviz.contract_names(2)) | {"tokens", "token_ids"}


def test_arrays_are_read_only_so_the_record_cannot_be_edited(model):
    tr = gptviz.trace(model, IDS)
    with pytest.raises(ValueError):
        tr["logits"][0, 0] = 0.0


def test_residual_statistics_are_mean_std_and_norm_per_position(model):
    tr = gptviz.trace(model, IDS)
    df = tr.resid_stats
    assert len(df) == model.config.n_layer * 3 * len(IDS)
    row = df[(df.layer == 1) & (df.site == "resid_mid") & (df.position == 4)].iloc[0]
    x = tr["blocks.1.resid_mid"][4].astype(np.float64)
    assert row["mean"] == pytest.approx(x.mean())
    assert row["std"] == pytest.approx(x.std())
    assert row["norm"] == pytest.approx(math.sqrt((x**2).sum()))


def test_shape_trace_lists_modules_in_call_order(model):
    st = gptviz.trace(model, IDS).shape_trace
    modules = list(st.module)
    assert modules[0] == "transformer.wte" and modules[-1] == "lm_head"
    # a parent module is entered before its children
    assert (
        modules.index("transformer.h.0")
        < modules.index("transformer.h.0.attn")
        < modules.index("transformer.h.0.attn.c_attn")
    )
    row = st[st.module == "transformer.h.1.attn.c_attn"].iloc[0]
    assert (row.inputs, row.outputs) == (((1, 8, 16),), ((1, 8, 48),))  # shapes stay tuples
    assert st[st.capture == "blocks.1.attn.q"].iloc[0].outputs == ((1, 2, 8, 8),)  # (B, H, T, D)


def test_trace_takes_a_tensor_and_names_tokens_without_a_tokenizer(model):
    tr = gptviz.trace(model, torch.tensor(IDS))
    assert tr.tokens == [str(i) for i in IDS]
    with pytest.raises(gptviz.PromptError, match="1-D"):
        gptviz.trace(model, [[1, 2]])
