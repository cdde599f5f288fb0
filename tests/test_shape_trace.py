"""The shape trace a Trace gives is read off the same pass on the meta device (capture.shape_rows): it
equals what hooks on every module of the real model record during the real pass, for every family,
on both attention paths."""

from __future__ import annotations

import pytest
import torch
from hf_helpers import FAMILIES, hf_random_decoder

import gptviz
from gptviz.probes import capture_name


def recorded(model, ids, explicit: bool) -> list[dict]:
    rows, running, handles = [], [], []

    def enter(path):
        def hook(mod, args):
            running.append(len(rows))
            shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            rows.append(
                dict(module=path, type=type(mod).__name__, inputs=shapes, capture=capture_name(path, mod) or "")
            )

        return hook

    def leave(mod, args, out):
        out = (out,) if isinstance(out, torch.Tensor) else out
        rows[running.pop()]["outputs"] = [tuple(o.shape) for o in out if isinstance(o, torch.Tensor)]

    for path, m in model.named_modules():
        if m is not model:
            handles += [m.register_forward_pre_hook(enter(path)), m.register_forward_hook(leave)]
    try:
        with torch.no_grad():
            model(torch.as_tensor(ids)[None], explicit=explicit)
    finally:
        for h in handles:
            h.remove()
    return rows


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_the_shape_trace_is_the_real_passes(tmp_path, kind):
    hf_random_decoder(kind, seed=2).save_pretrained(tmp_path)
    model = gptviz.load(tmp_path, dtype="bfloat16").model
    ids = [1, 5, 9, 2, 7, 3, 8]
    for explicit, edits in ((False, []), (True, [gptviz.ablate("blocks.0.attn.weights", heads=[0])])):
        got = gptviz.trace(model, ids, interventions=edits).shape_trace
        want = recorded(model, ids, explicit)
        assert len(got) == len(want) > 10 * model.config.n_layer
        for (_, row), ref in zip(got.iterrows(), want, strict=True):
            assert (row.module, row.type, row.capture) == (ref["module"], ref["type"], ref["capture"])
            assert list(row.inputs) == ref["inputs"] and list(row.outputs) == ref["outputs"], row.module
