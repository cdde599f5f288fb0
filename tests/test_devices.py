"""Every library path on every device and compute dtype: the model, capture, analyses, features,
steering, generation and the scan. The CPU runs them in bfloat16, so a tensor made on a default dtype
or device fails here on any machine; where CUDA is present (`make test-gpu`) they run on the GPU in
float32, bfloat16 and float16 too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_helpers import hf_random_decoder
from sae_helpers import random_sae

import gptviz

GPU = pytest.mark.gpu
PLACES = [
    pytest.param(("cpu", "bfloat16"), id="cpu-bfloat16"),
    *(pytest.param(("cuda", dt), id=f"cuda-{dt}", marks=GPU) for dt in ("float32", "bfloat16", "float16")),
]
IDS = [3, 17, 5, 9, 3, 17, 5, 9, 30, 2, 11, 3, 17]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A random Llama (RMSNorm, rotary, grouped heads, a gated MLP) saved in bf16, as people download one."""
    root = tmp_path_factory.mktemp("llama")
    hf_random_decoder("llama", seed=3).to(torch.bfloat16).save_pretrained(root)
    return root


@pytest.fixture(params=PLACES)
def place(request, llama_dir):
    device, dtype = request.param
    model = gptviz.load(llama_dir, device=device, dtype=dtype).model
    return model, torch.tensor(IDS) % model.config.vocab_size


def test_capture_changes_nothing_and_stays_in_the_models_dtype(place):
    model, ids = place
    assert model.device.type == model.lm_head.weight.device.type
    trace = gptviz.trace(model, ids)
    with torch.no_grad():
        plain = model(ids[None].to(model.device))[0]
    got = trace.tensor("logits")
    assert got.dtype == model.dtype and got.device == model.device
    assert torch.equal(got, plain)
    assert trace.tensor("blocks.0.attn.q").dtype == model.dtype
    w = trace["blocks.1.attn.weights"]
    assert isinstance(w, np.ndarray) and np.allclose(w.astype(np.float64).sum(-1), 1, atol=2e-2)


def test_the_analyses_run_where_the_model_is(place):
    model, ids = place
    trace = gptviz.trace(model, ids)
    assert len(gptviz.head_scores(trace)) == model.config.n_layer * model.config.n_head
    lens = gptviz.logit_lens(model, trace, k=3, target=int(ids[1]))
    assert np.array_equal(lens["top_ids"][-1, :, 0], trace["logits"].argmax(-1))
    target = int(trace["logits"][-1].argmax())
    parts = gptviz.logit_attribution(model, trace, target)
    assert parts["value"].sum() == pytest.approx(float(trace["logits"][-1, target]), rel=0.05, abs=0.05)
    sweep = gptviz.patching_sweep(model, ids, ids.flip(0), answer=target, wrong=int(ids[0]))
    assert sweep.shape[0] == model.config.n_layer and np.isfinite(sweep).all()
    assert all(f.status != "fail" for f in gptviz.health(model, trace))


def test_generation_with_the_kv_cache_and_a_steer(place):
    model, ids = place
    out = gptviz.generate(model, ids, 5, temperature=0)
    assert len(out.ids) == len(ids) + 5
    with torch.no_grad():
        again = model(torch.tensor(out.ids[:-1], device=model.device)[None])[0, -1]
    assert int(again.argmax()) == out.ids[-1] or model.dtype != torch.float32  # half precision may tie-break
    v = gptviz.steering_vector(model, [(ids[:5].tolist(), ids[5:10].tolist())], "blocks.0.resid_post")
    steered = gptviz.generate(model, ids, 3, temperature=0, interventions=[gptviz.steer("blocks.0.resid_post", v, 4.0)])
    assert len(steered.ids) == len(ids) + 3
    table = gptviz.steering_sweep(model, ids, v, ["blocks.0.resid_post", "blocks.1.resid_pre"], [0.0, 2.0])
    assert table.loc[table["coeff"] == 0, "kl"].abs().max() < 1e-3 and np.isfinite(table["kl"]).all()


def test_an_sae_on_the_cpu_reads_and_edits_a_model_anywhere(place):
    """The SAE as a user has it (loaded or made on the CPU, float32) applied to this model's runs: it
    moves to the model's device, and what it writes back is in the model's dtype."""
    model, ids = place
    site = "blocks.1.resid_post"
    sae = random_sae(d_in=model.config.n_embd, d_sae=96, site=site)
    trace = gptviz.trace(model, ids)
    acts = gptviz.feature_activations(trace, sae)
    assert acts.shape == (len(ids), 96) and (acts > 0).sum(-1).max() <= sae.k
    silent = int(np.flatnonzero((acts == 0).all(0))[0])  # zeroing a feature that never fires edits nothing
    untouched = gptviz.trace(model, ids, interventions=[gptviz.edit_features(sae, features=[silent])])
    assert torch.equal(untouched.tensor("logits"), trace.tensor("logits"))
    zeroed = gptviz.trace(model, ids, interventions=[gptviz.edit_features(sae, features=list(range(96)))])
    assert zeroed.tensor(site).dtype == model.dtype
    assert not torch.equal(zeroed.tensor("logits"), trace.tensor("logits"))


def test_an_sae_trains_on_the_model_and_the_scan_reads_it(place, tmp_path):
    model, ids = place
    texts = [[(i * 7 + j) % model.config.vocab_size for j in range(24)] for i in range(12)]
    sae = gptviz.train_sae(model, texts, "blocks.0.resid_post", width=2, k=4, steps=20, out=tmp_path / "sae")
    assert np.isfinite(sae.report.fvu)
    back = gptviz.load_sae(tmp_path / "sae")
    scan = gptviz.scan(model, texts, window=12, k=3, saes=[back])
    assert len(scan.windows) == 24 and np.isfinite(scan.windows["loss"]).all()
    assert len(scan.features) > 0
