"""progress= on the long library steps: one gptviz.Progress per unit of work, 0 first and total last,
and a Cancelled raised from the callback stops the step and passes through untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz import analysis
from gptviz.progress import Cancelled

IDS = [3, 1, 4, 1, 5, 9, 2, 6]


def _run(step):
    seen = []
    out = step(seen.append)
    assert seen[0].done == 0 and seen[-1].done == seen[-1].total > 0
    assert [p.done for p in seen] == list(range(seen[-1].total + 1))
    assert all(p.seconds >= 0 for p in seen)

    def cancel(p):
        if p.done == 1:
            raise Cancelled("stop")

    with pytest.raises(Cancelled):
        step(cancel)
    return out, seen


def test_lens_attribution_and_patching_report_and_cancel():
    model = tiny_model()
    t = gptviz.trace(model, IDS)
    lens, seen = _run(lambda cb: analysis.logit_lens(model, t, progress=cb))
    assert seen[-1].what == "sites" and seen[-1].total == len(lens.sites)
    df, seen = _run(lambda cb: analysis.logit_attribution(model, t, 3, progress=cb))
    assert seen[-1].what == "layers" and seen[-1].total == 2
    corrupt = [3, 1, 9, 1, 5, 9, 2, 6]  # position 2 differs: positions 0 and 1 patch nothing and are not run
    full, seen = _run(lambda cb: gptviz.patching_sweep(model, IDS, corrupt, 1, 2, batch_size=1, progress=cb))
    # one run a batch; layer 0's input differs from the clean one at position 2 only, layer 1's from 2 on
    assert seen[-1].total == 1 + 6 and (full[:, :2] == 0).all() and (full[0, 3:] == 0).all()


def test_head_scores_and_health_report_each_layer_and_cancel():
    model = tiny_model()
    t = gptviz.trace(model, IDS)
    table, seen = _run(lambda cb: analysis.head_scores(t, progress=cb))
    assert seen[-1].what == "layers" and seen[-1].total == model.config.n_layer
    assert table.equals(analysis.head_scores(t))  # the same numbers with or without a callback
    found, seen = _run(lambda cb: gptviz.health(model, t, progress=cb))
    assert seen[-1].what == "layers" and seen[-1].total == model.config.n_layer
    assert found == gptviz.health(model, t)


def test_patching_limited_to_chosen_layers_and_positions():
    model = tiny_model()
    corrupt = [3, 1, 4, 1, 5, 9, 2, 7]
    full = gptviz.patching_sweep(model, IDS, corrupt, 1, 2)
    some = gptviz.patching_sweep(model, IDS, corrupt, 1, 2, layers=[1], cells=[0, 7], batch_size=2)
    chosen = np.zeros_like(full, dtype=bool)
    chosen[1, [0, 7]] = True
    np.testing.assert_allclose(some[chosen], full[chosen], rtol=1e-6, atol=1e-9)
    assert np.isnan(some[~chosen]).all()
    with pytest.raises(gptviz.PromptError, match="layers"):
        gptviz.patching_sweep(model, IDS, corrupt, 1, 2, layers=[5])


def test_generate_reports_tokens():
    model = tiny_model()
    seen = []
    g = gptviz.generate(model, IDS, 4, temperature=0, progress=seen.append)
    assert [(p.done, p.total) for p in seen] == [(i, 4) for i in range(5)] and len(g.new_ids) == 4
    assert torch.is_tensor(torch.tensor(g.ids))
