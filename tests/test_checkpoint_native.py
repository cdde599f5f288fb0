"""The native checkpoint format: save and load round-trip; a bad file gets a clear message."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz

TOK = gptviz.CharTokenizer(list("abcdefghij "))
IDS = [0, 4, 10, 2, 7]


@pytest.mark.parametrize(
    "variant",
    [dict(), dict(tie_weights=False), dict(bias=False, norm="rmsnorm", pos_encoding="sinusoidal", activation="relu")],
)
def test_save_then_load_gives_identical_logits_and_report(tmp_path, variant):
    model = tiny_model(**variant)
    gptviz.save(model, tmp_path / "ck", TOK, card={"corpus": "unit test"})
    bundle = gptviz.load(tmp_path / "ck")
    assert bundle.model.config == model.config
    assert not bundle.model.training
    assert bundle.card == {"corpus": "unit test"}
    assert bundle.tokenizer.itos == TOK.itos
    r = bundle.report
    assert (r.format, r.n_params, r.dtype, r.device, r.tokenizer) == (
        "gptviz",
        model.num_params(),
        "float32",
        "cpu",
        "char",
    )
    assert r.missing == [] and r.unexpected == [] and r.warnings == []
    if model.config.tie_weights:
        assert bundle.model.lm_head.weight is bundle.model.transformer.wte.weight
    with torch.no_grad():
        idx = torch.tensor([IDS])
        np.testing.assert_array_equal(bundle.model(idx).numpy(), model(idx).numpy())


@pytest.fixture
def saved(tmp_path):
    return gptviz.save(tiny_model(), tmp_path / "ck", TOK)


def test_missing_path(tmp_path):
    with pytest.raises(gptviz.CheckpointError, match="no such file or directory"):
        gptviz.load(tmp_path / "nowhere")


def test_a_directory_of_something_else(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(gptviz.CheckpointError, match="not a checkpoint gptviz recognises"):
        gptviz.load(tmp_path)


def test_missing_weights_file(saved):
    (saved / "model.safetensors").unlink()
    with pytest.raises(gptviz.CheckpointError, match=r"model.safetensors: file not found"):
        gptviz.load(saved)


def test_truncated_weights_file(saved):
    f = saved / "model.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(gptviz.CheckpointError, match=r"model.safetensors: not a readable safetensors file"):
        gptviz.load(saved)


def test_bad_config(saved):
    meta = json.loads((saved / "config.json").read_text())
    meta["config"]["norm"] = "groupnorm"
    (saved / "config.json").write_text(json.dumps(meta))
    with pytest.raises(gptviz.CheckpointError, match=r"config.json: bad model config .*groupnorm"):
        gptviz.load(saved)


def test_weights_of_another_shape(saved):
    meta = json.loads((saved / "config.json").read_text())
    meta["config"]["n_embd"] = 32
    (saved / "config.json").write_text(json.dumps(meta))
    with pytest.raises(gptviz.CheckpointError, match=r"has shape \[.*\] but the config needs"):
        gptviz.load(saved)


def test_nan_in_weights_is_reported_not_hidden(tmp_path):
    model = tiny_model()
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[0, 0] = float("nan")
    gptviz.save(model, tmp_path / "ck", TOK)
    bundle = gptviz.load(tmp_path / "ck")
    assert bundle.report.warnings == ["NaN or Inf in weights: transformer.h.1.mlp.c_fc.weight"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU; the message is for machines without")
def test_a_missing_gpu_is_a_clear_error(saved):
    with pytest.raises(gptviz.DeviceError, match="no CUDA GPU is available here"):
        gptviz.load(saved, device="cuda")
