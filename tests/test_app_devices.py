"""Every page opens and draws on every device and compute dtype: in bfloat16 on the CPU here, and on
CUDA in float32, bfloat16 and float16 where a GPU is present (`make test-gpu`). No exception, no error,
and the pages that wait for a click (an SAE's features, an intervention, a patching sweep, generation)
are given one."""

from __future__ import annotations

import pytest
from apptest_helpers import PROMPT, app_session, ok, serve
from sae_helpers import random_sae

from gptviz.bench.checkpoints import NAME, make_checkpoints
from gptviz.dashboard import pages
from gptviz.features import save_sae

PLACES = [
    pytest.param(("cpu", "bfloat16"), id="cpu-bfloat16"),
    *(pytest.param(("cuda", dt), id=f"cuda-{dt}", marks=pytest.mark.gpu) for dt in ("float32", "bfloat16", "float16")),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The test checkpoints, one with a float32 SAE on the CPU as a user saves it (the model may be elsewhere)."""
    root = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    save_sae(random_sae("topk", d_in=32, d_sae=96, site="blocks.1.resid_post", k=8), root / NAME / "saes" / "tiny")
    return root


@pytest.mark.parametrize("place", PLACES)
def test_every_page_draws_on_the_device_in_the_dtype(monkeypatch, root, place):
    serve(monkeypatch, root, NAME)
    device, dtype = place
    for page in pages.PAGES:
        at = ok(app_session(page.file, timeout=180, prompt=PROMPT, device=device, dtype=dtype))
        assert (at.session_state["device"], at.session_state["dtype"]) == place, page.key
    features = ok(app_session("views/features.py", timeout=180, prompt=PROMPT, device=device, dtype=dtype, sae="tiny"))
    assert {"ft_heatmap", "ft_effect", "ft_after"} <= {e.key for e in features.get("plotly_chart")}
    iv = app_session("views/interventions.py", timeout=180, prompt=PROMPT, device=device, dtype=dtype)
    iv.multiselect(key="iv_heads").set_value(["L1H2"])
    ok(iv.run())
    gen = app_session("views/generate.py", timeout=180, prompt=PROMPT, device=device, dtype=dtype)
    gen.number_input(key="gen_n").set_value(4)
    ok(gen.button(key="gen_run").click().run())
    assert len(gen.session_state["gen"]["ids"]) == 4
    patch = app_session("views/patching.py", timeout=180, prompt=PROMPT, device=device, dtype=dtype)
    patch.text_input(key="pt_clean").set_value(PROMPT)
    patch.text_input(key="pt_corrupt").set_value(PROMPT.replace("be", "do"))
    ok(patch.run())
    assert any(e.key.startswith("pt_map_") for e in patch.get("plotly_chart"))
