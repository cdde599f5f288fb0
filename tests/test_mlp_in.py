"""The contract point blocks.{l}.mlp.in: what the MLP reads (the normalised value; in a parallel
block the MLP's own input), in every family, against Hugging Face's MLP input seen through its own
hook; capturable by names= and editable like every other point."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from conftest import VARIANTS, tiny_model, variant_id
from hf_helpers import FAMILIES, PROMPT_LEN, hf_random_decoder

import gptviz
from gptviz.features.sites import contract_site, hook_name

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


def _keeper(got: dict, layer: int):
    def keep(mod, args):
        got[layer] = args[0][0].detach().clone()

    return keep


def _mlp_inputs(hf, ids: torch.Tensor) -> dict[int, torch.Tensor]:
    """layer -> the input of Hugging Face's MLP module of that layer, [T, C], through its own hook."""
    got, handles = {}, []
    for name, module in hf.named_modules():
        m = re.fullmatch(r".*(?:layers|h)\.(\d+)\.mlp", name)
        if m:
            handles.append(module.register_forward_pre_hook(_keeper(got, int(m.group(1)))))
    try:
        with torch.no_grad():
            hf(ids)
    finally:
        for h in handles:
            h.remove()
    return got


@pytest.mark.parametrize("kind", list(FAMILIES))
def test_mlp_in_is_what_hugging_faces_mlp_reads(tmp_path, kind):
    hf = hf_random_decoder(kind)
    hf.save_pretrained(tmp_path)
    model = gptviz.load(tmp_path).model
    ids = torch.randint(0, FAMILIES["llama"]["vocab_size"], (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    theirs = _mlp_inputs(hf, ids)
    assert sorted(theirs) == list(range(model.config.n_layer))
    t = gptviz.trace(model, ids[0])
    for l, block in enumerate(model.transformer.h):
        mine = t.tensor(gptviz.point("mlp.in", l))
        torch.testing.assert_close(mine, theirs[l], atol=1e-5, rtol=1e-5)
        with torch.no_grad():  # the MLP applied to mlp.in is mlp.out, bit for bit (the same (1, T, C) call)
            out = block.mlp(mine[None])[0]
        assert torch.equal(out, t.tensor(gptviz.point("mlp.out", l)))


@pytest.mark.parametrize("variant", VARIANTS[::4], ids=variant_id)
def test_mlp_in_rebuilt_equals_a_run_that_keeps_it(variant):
    model = tiny_model(**variant)
    plain = gptviz.trace(model, IDS)
    kept = gptviz.trace(model, IDS, interventions=[gptviz.intervene("blocks.1.mlp.in", lambda x: x)])
    for l in range(2):
        name = gptviz.point("mlp.in", l)
        assert not plain.held(name)
        assert torch.equal(plain.tensor(name), kept.tensor(name))
    assert kept.held("blocks.1.mlp.in")
    np.testing.assert_array_equal(plain["logits"], kept["logits"])


def test_a_parallel_block_s_mlp_reads_ln_2_of_resid_pre():
    model = tiny_model(parallel=True, n_layer=2)
    t = gptviz.trace(model, IDS)
    for l, block in enumerate(model.transformer.h):
        with torch.no_grad():
            want = block.ln_2(t.tensor(gptviz.point("resid_pre", l)))
        assert torch.equal(t.tensor(gptviz.point("mlp.in", l)), want)


def test_mlp_in_is_capturable_by_name_and_editable():
    model = tiny_model()
    only = gptviz.trace(model, IDS, names="blocks.*.mlp.in")
    assert only.names == ["blocks.0.mlp.in", "blocks.1.mlp.in"]
    assert only["blocks.0.mlp.in"].shape == (len(IDS), 16)
    shift = torch.linspace(-1, 1, 16)
    edited = gptviz.trace(model, IDS, interventions=[gptviz.intervene("blocks.1.mlp.in", lambda x: x + shift)])
    plain = gptviz.trace(model, IDS)
    new_in = plain.tensor("blocks.1.mlp.in") + shift
    assert torch.equal(edited.tensor("blocks.1.mlp.in"), new_in)
    with torch.no_grad():
        want = model.transformer.h[1].mlp(new_in[None])[0]
    torch.testing.assert_close(edited.tensor("blocks.1.mlp.out"), want, atol=1e-6, rtol=1e-6)
    assert not np.allclose(edited["logits"], plain["logits"])
    zeroed = gptviz.trace(model, IDS, interventions=[gptviz.ablate("blocks.0.mlp.in", positions=[2])])
    assert not zeroed["blocks.0.mlp.in"][2].any() and zeroed["blocks.0.mlp.in"][3].any()


def test_transformer_lens_name_of_mlp_in():
    assert contract_site("blocks.3.mlp.hook_in") == "blocks.3.mlp.in"
    assert hook_name("blocks.3.mlp.in") == "blocks.3.mlp.hook_in"
    st = gptviz.trace(tiny_model(n_layer=1), IDS).shape_trace
    assert st[st.capture == "blocks.0.mlp.in"].iloc[0].outputs == ((1, len(IDS), 16),)
