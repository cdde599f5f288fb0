"""The sidebar's checkpoint and device: a failed load, a missing GPU and no shipped checkpoint are
messages, and what a load found (NaN weights, missing keys) is a banner on every page."""

from __future__ import annotations

import dataclasses

import pytest
import streamlit as st
import torch
from apptest_helpers import (
    PAGES,
    app_session,
    errors,
    ok,
    shown,
)

import gptviz
from gptviz.bench.checkpoints import CHARS, CONFIG, NAME
from gptviz.dashboard import caches, state
from gptviz.dashboard.sources import checkpoints


def test_checkpoint_that_fails_to_load(at, env):
    at.selectbox(key="ckpt_choice").set_value(state.Pick.PATH).run()
    at.text_input(key="ckpt_path").input(str(env / "broken")).run()
    msg = errors(at)
    assert "Checkpoint not loaded" in msg and "config.json" in msg
    at.text_input(key="ckpt_path").input(str(env / "nowhere")).run()
    assert "no such file or directory" in errors(at)
    ok(at.selectbox(key="ckpt_choice").set_value(NAME).run())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_gpu_that_is_not_there(at):
    msg = errors(at.radio(key="device").set_value("cuda").run())
    assert "Device not available" in msg and "CUDA" in msg
    assert at.get("plotly_chart"), "the app keeps working on CPU"


def test_no_shipped_checkpoint_falls_back_to_the_demo_model(tmp_path, monkeypatch, env):
    monkeypatch.setenv(checkpoints.CHECKPOINTS_ENV, str(tmp_path))
    monkeypatch.delenv(checkpoints.DEFAULT_ENV)
    at = app_session()
    assert not at.exception and not at.error
    assert "No shipped checkpoint" in at.sidebar.warning[0].value
    assert at.get("plotly_chart")


def test_nan_weights_show_a_banner_on_every_page(tmp_path, monkeypatch, env):
    torch.manual_seed(4)
    model = gptviz.GPT(gptviz.GPTConfig(**CONFIG))
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[0, 0] = float("nan")
    gptviz.save(model, tmp_path / "nan", gptviz.CharTokenizer(CHARS))
    monkeypatch.setenv(checkpoints.CHECKPOINTS_ENV, str(tmp_path))
    monkeypatch.setenv(checkpoints.DEFAULT_ENV, "nan")
    at = app_session()
    assert not at.exception
    for path in PAGES:
        at.switch_page(path).run()
        banner = " ".join(shown(w.value) for w in at.warning)
        assert "NaN" in banner and "transformer.h.1.mlp.c_fc.weight" in banner, path


def test_missing_and_unexpected_keys_are_summarised_in_the_banner(at, env, monkeypatch):
    real = caches.load

    def with_keys(*args, **kwargs):
        bundle = real(*args, **kwargs)
        report = dataclasses.replace(
            bundle.report,
            missing=[f"transformer.h.{i}.attn.c_attn.weight" for i in range(16_000)],
            unexpected=["transformer.h.7.mlp.c_fc.weight"],
        )
        return dataclasses.replace(bundle, report=report)

    monkeypatch.setattr(caches, "load", with_keys)
    st.cache_resource.clear()
    at.run()
    banner = " ".join(shown(w.value) for w in at.warning)
    assert "16,000 weights missing" in banner and "15,997 more" in banner
    assert "1 weights in the file that the model does not use (is the model truncated?)" in banner
    assert len(banner) < 1000
