"""The Timeline page through AppTest: a run folder's losses and head scores on screen against
gptviz.timeline, and a folder that is no run as one message."""

from __future__ import annotations

import numpy as np
import test_app_compare as compare
from apptest_helpers import array, figure, ok

import gptviz
from gptviz.bench.checkpoints import CONFIG, NAME
from gptviz.timeline import timeline

at, ckpt_root = compare.at, compare.ckpt_root  # the Compare page's tests' checkpoints, a training run among them


def test_timeline_of_a_run_folder(at, ckpt_root):
    at = ok(at.switch_page("views/timeline.py").run())
    assert at.selectbox(key="tl_run").options[0] == "tiny-run"  # run folders only, not plain checkpoints
    prompt = at.text_input(key="tl_prompt").value
    half = len(prompt) // 2
    assert prompt[:half] == prompt[half:] and half >= 8  # the default: a random sequence said twice
    bundle = gptviz.load(ckpt_root / "tiny-run" / "step-000000")
    ids = gptviz.encode_prompt(bundle.tokenizer, prompt, 64)
    tl = timeline(ckpt_root / "tiny-run", ids)
    loss = figure(at, "tl_loss")["data"]
    assert [d["name"] for d in loss] == ["train (card)", "validation (card)", "this prompt"]
    assert list(array(loss[0]["x"])) == [0, 50, 100] and list(array(loss[0]["y"])) == [4.0, 3.0, 2.0]
    assert np.allclose(array(loss[2]["y"]), tl.steps["prompt_loss"])
    curves = figure(at, "tl_heads")["data"]
    assert len(curves) == CONFIG["n_layer"] * CONFIG["n_head"]
    l1h2 = tl.heads[(tl.heads["layer"] == 1) & (tl.heads["head"] == 2)]["induction"]
    assert np.allclose(array(curves[4 + 2]["y"]), l1h2)
    assert curves[6]["line"]["width"] > curves[0]["line"]["width"]  # the sidebar's head stands out
    # the slider shows each step's own attention
    at.select_slider(key="tl_step").set_value(50)
    at = ok(at.run())
    z = array(figure(at, "tl_attention")["data"][0]["z"])
    t = gptviz.trace(gptviz.load(ckpt_root / "tiny-run" / "step-000050").model, ids)
    assert np.allclose(np.nan_to_num(z), np.nan_to_num(t["blocks.1.attn.weights"][2]), atol=1e-6)


def test_timeline_of_a_folder_that_is_no_run(at, ckpt_root, tmp_path):
    at = ok(at.switch_page("views/timeline.py").run())
    at.selectbox(key="tl_run").set_value("a local path…")
    at = at.run()
    at.text_input(key="tl_path").set_value(str(ckpt_root / NAME))
    at = at.run()
    assert not at.exception
    assert any("found 0 checkpoint" in e.value for e in at.error)
