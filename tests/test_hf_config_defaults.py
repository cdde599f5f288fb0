"""A config.json as people find them, not only as save_pretrained writes it today: keys left out
(older or hand-written configs) take the values Hugging Face's own config classes give them, a head
saved beside tied embeddings is read as Hugging Face reads it, and a config that would make the
reader build per-layer lists of billions of entries, or divide by zero, is refused in one line.
Each parity case reloads the edited folder with Hugging Face itself and compares on the same ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hf_helpers import hf_random_decoder
from safetensors.torch import load_file, save_file
from test_hf_families import assert_parity, prompt
from transformers import AutoModelForCausalLM  # noqa: E402  (a test dependency, as in test_hf_families)

import gptviz
from gptviz.errors import CheckpointError
from gptviz.formats.hf_decoders import config_from_hf_decoder


def edited(tmp_path: Path, kind: str, edit, **over) -> Path:
    hf = hf_random_decoder(kind, **over)
    hf.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    edit(cfg)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def reloaded(path: Path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()


def drop(*keys: str):
    def edit(cfg: dict) -> None:
        for k in keys:
            cfg.pop(k, None)
        for nested in ("rope_parameters", "rope_scaling"):
            if isinstance(cfg.get(nested), dict):
                for k in keys:
                    cfg[nested].pop(k, None)

    return edit


@pytest.mark.parametrize(
    "kind, keys",
    [
        # Gemma 3 without its bases: 1,000,000 on the global layers, 10,000 on the local ones
        ("gemma3_text", ("rope_parameters", "rope_theta", "rope_local_base_freq")),
        # GPT-NeoX without rotary_pct: a quarter of each head rotates
        ("gpt_neox", ("partial_rotary_factor", "rotary_pct")),
        # Gemma 2 without query_pre_attn_scalar: 256, not the head size
        ("gemma2", ("query_pre_attn_scalar",)),
        # Phi-3 without its norm epsilon: 1e-5
        ("phi3", ("rms_norm_eps",)),
        # OLMo 3 without layer_types: three sliding-window layers, then a global one
        ("olmo3", ("layer_types",)),
    ],
    ids=["gemma3-bases", "neox-fraction", "gemma2-scalar", "phi3-eps", "olmo3-layer-types"],
)
def test_a_key_left_out_takes_hugging_faces_default(tmp_path, kind, keys):
    path = edited(tmp_path, kind, drop(*keys))
    assert_parity(reloaded(path), gptviz.load(path), prompt())


def test_a_head_saved_beside_tied_embeddings_is_read_untied_as_hugging_face_reads_it(tmp_path):
    path = edited(tmp_path, "qwen3", lambda cfg: None, tie_word_embeddings=True)
    weights = load_file(path / "model.safetensors")
    weights["lm_head.weight"] = torch.randn_like(weights["model.embed_tokens.weight"])
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    bundle = gptviz.load(path)
    assert any("read untied" in w for w in bundle.report.warnings)
    assert_parity(reloaded(path), bundle, prompt())


BASE = dict(vocab_size=150, hidden_size=48, num_attention_heads=4, num_key_value_heads=2, intermediate_size=80)


@pytest.mark.parametrize(
    "hf, words",
    [
        # per-layer lists are built only for a layer count within gptviz's bounds
        ({"model_type": "gemma2", **BASE, "sliding_window": 4, "num_hidden_layers": 10**10}, "n_layer"),
        (
            {
                "model_type": "gpt_neo",
                "vocab_size": 150,
                "hidden_size": 48,
                "num_heads": 4,
                "num_layers": 2,
                "window_size": 4,
                "attention_types": [[["global", "local"], 10**9]],
            },
            "do not name one type for each of 2 layers",
        ),
        (
            {"model_type": "gemma3_text", **BASE, "num_hidden_layers": 2, "sliding_window_pattern": 0},
            "sliding_window_pattern=0",
        ),
        (
            {"model_type": "gemma3_text", **BASE, "num_hidden_layers": 2, "use_bidirectional_attention": True},
            "bidirectional attention",
        ),
    ],
    ids=["huge-layer-count", "neo-attention-types", "pattern-zero", "bidirectional"],
)
def test_a_config_gptviz_cannot_read_as_hugging_face_does_is_one_line(hf, words):
    with pytest.raises(CheckpointError) as e:
        config_from_hf_decoder(hf, Path("config.json"))
    assert words in str(e.value) and "\n" not in str(e.value) and "unexpected" not in str(e.value)
