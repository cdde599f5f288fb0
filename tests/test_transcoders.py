"""Transcoders (docs/architecture.md, "Circuits"): the equations against numbers by hand, edits of
features that keep the error term, the files circuit-tracer and Gemma Scope 2 write, and training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.interventions import InterventionError
from gptviz.transcoders import Transcoder, TranscoderError, TranscoderSet

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


def random_set(model, d_tc: int = 48, activation: str = "topk", k: int | None = 6, seed: int = 0) -> TranscoderSet:
    g = torch.Generator().manual_seed(seed)
    C = model.config.n_embd
    tcs = []
    for l in range(model.config.n_layer):
        tc = Transcoder(C, d_tc, l, activation, k=k)
        with torch.no_grad():
            for p in tc.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        tcs.append(tc.requires_grad_(False))
    return TranscoderSet(tcs)


def test_encode_and_decode_by_hand():
    tc = Transcoder(2, 3, 0, "relu")
    with torch.no_grad():
        tc.W_enc.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))  # [d_tc, d_model]
        tc.b_enc.copy_(torch.tensor([0.0, -1.0, -10.0]))
        tc.W_dec.copy_(torch.tensor([[2.0, 0.0], [0.0, 3.0], [5.0, 5.0]]))
        tc.b_dec.copy_(torch.tensor([0.5, 0.5]))
    f = tc.encode(np.array([[2.0, 3.0]], dtype=np.float32))
    np.testing.assert_array_equal(f, [[2.0, 2.0, 0.0]])  # pre = [2, 2, -5], relu
    np.testing.assert_array_equal(tc.decode(f), [[4.5, 6.5]])
    top = Transcoder(2, 3, 0, "topk", k=1)
    top.load_state_dict(tc.state_dict())
    np.testing.assert_array_equal(top.encode(np.array([[2.0, 3.5]], dtype=np.float32)), [[0.0, 2.5, 0.0]])
    jump = Transcoder(2, 3, 0, "jumprelu")
    jump.load_state_dict({**tc.state_dict(), "threshold": torch.tensor([2.5, 1.0, 0.0])})
    np.testing.assert_array_equal(jump.encode(np.array([[2.0, 3.0]], dtype=np.float32)), [[0.0, 2.0, 0.0]])
    with pytest.raises(TranscoderError, match="k in"):
        Transcoder(2, 3, 0, "topk")


def test_editing_nothing_changes_nothing_and_an_edit_keeps_the_error():
    model = tiny_model()
    tcs = random_set(model)
    plain = gptviz.trace(model, IDS)
    f = tcs[1].encode(plain.tensor("blocks.1.mlp.in"))  # [T, d_tc]
    fired = int(f[4].nonzero()[0])
    never = int((f == 0).all(0).nonzero()[0])  # a feature that fires nowhere in this prompt: zeroing it edits nothing
    nothing = gptviz.trace(model, IDS, interventions=[gptviz.edit_features(tcs[1], [never])])
    np.testing.assert_array_equal(nothing["logits"], plain["logits"])
    np.testing.assert_array_equal(nothing["blocks.1.mlp.out"], plain["blocks.1.mlp.out"])
    edit = gptviz.edit_features(tcs[1], [fired], how="zero", positions=[4])
    assert edit.name == "blocks.1.mlp.out" and edit.reads == "blocks.1.mlp.in"
    out = gptviz.trace(model, IDS, interventions=[edit])
    want = plain.tensor("blocks.1.mlp.out").clone()
    want[4] -= f[4, fired] * tcs[1].W_dec[fired]  # the error term kept: only the feature's write is gone
    torch.testing.assert_close(out.tensor("blocks.1.mlp.out"), want, atol=1e-6, rtol=1e-6)
    assert not np.allclose(out["logits"][4], plain["logits"][4])
    np.testing.assert_array_equal(out["logits"][:4], plain["logits"][:4])
    clamp = gptviz.trace(model, IDS, interventions=[gptviz.edit_features(tcs[0], [0], how=2.5)])
    f0 = tcs[0].encode(plain.tensor("blocks.0.mlp.in"))
    want0 = plain.tensor("blocks.0.mlp.out") + (2.5 - f0[:, :1]) * tcs[0].W_dec[0]
    torch.testing.assert_close(clamp.tensor("blocks.0.mlp.out"), want0, atol=1e-5, rtol=1e-5)
    with pytest.raises(InterventionError, match="48 features"):
        gptviz.edit_features(tcs[0], [48])
