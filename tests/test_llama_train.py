"""`gptviz train --family llama` and the Hugging Face Llama directory gptviz writes
(formats/hf_llama_export.py), checked both ways against transformers' own LlamaForCausalLM and the
`tokenizers` library."""

from __future__ import annotations

import json
import shlex

import pytest
import torch
from conftest import tiny_model
from tokenizers import Tokenizer

import gptviz
from gptviz.cli import build_parser, main
from gptviz.errors import ConfigError
from gptviz.formats.hf_llama_export import llama_refusals, save_hf_llama
from gptviz.training.train import model_fields

pytest.importorskip("transformers")

PLAY = "".join(
    f"ROMEO.\nBut soft, what light through yonder window breaks? {i}\n\nJULIET.\nAy me! Ça va?\n\n" for i in range(60)
)
LLAMA = dict(pos_encoding="rotary", norm="rmsnorm", activation="silu", mlp_gated=True, bias=False)


def hf_logits(folder, ids: list[int], **kw):
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(torch.tensor([ids]), **kw)


def parsed(*flags: str):
    return build_parser().parse_args(["train", "--out", "x", *flags])


def test_family_llama_sets_the_llama_fields_and_a_given_flag_wins():
    fields = model_fields(parsed("--family", "llama", "--n-embd", "96", "--n-kv-head", "2"))
    assert {k: fields[k] for k in LLAMA} == LLAMA
    assert fields["n_kv_head"] == 2 and fields["n_inner"] == 256  # 8 * 96 / 3 = 256, a multiple of 32
    assert model_fields(parsed("--family", "llama", "--n-embd", "128"))["n_inner"] == 352  # 341.3 -> 352
    mixed = model_fields(parsed("--family", "llama", "--norm", "layernorm", "--n-inner", "100", "--bias", "true"))
    assert (mixed["norm"], mixed["n_inner"], mixed["bias"], mixed["pos_encoding"]) == ("layernorm", 100, True, "rotary")
    gpt2 = model_fields(parsed())  # the default family is GPT-2, every field at GPTConfig's default
    assert gpt2 == {k: v for k, v in gptviz.GPTConfig().to_dict().items() if k != "vocab_size"}


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--family", "llama", "--tokenizer", "char"], "--format hf writes the tokenizer as tokenizer.json"),
        (["--tokenizer", "bpe"], "--format hf: this model is not a Llama, so it has no Hugging Face Llama form"),
        (["--family", "llama", "--tokenizer", "bpe", "--norm", "layernorm"], "its norms (Llama: RMSNorm × w)"),
    ],
)
def test_format_hf_refuses_what_is_no_llama_in_one_line_before_training(tmp_path, capsys, flags, said):
    corpus = tmp_path / "play.txt"
    corpus.write_text(PLAY)
    out = tmp_path / "ck"
    assert main(["train", "--corpus", str(corpus), "--out", str(out), "--format", "hf", *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert not (out / "config.json").exists()


@pytest.mark.parametrize(
    "shape",
    [
        dict(n_kv_head=2, tie_weights=True),
        dict(n_kv_head=1, tie_weights=False, head_size=12, rope_theta=500.0),
        dict(n_kv_head=4, bias=True, qkv_bias=True, out_bias=True, mlp_bias=False),
        dict(n_kv_head=2, rope_scaling="llama3", rope_factor=8.0, rope_original_max=16, block_size=64),
    ],
)
def test_a_written_llama_directory_is_read_by_transformers_with_the_same_logits(tmp_path, shape):
    torch.manual_seed(0)
    model = tiny_model(**{**dict(LLAMA, n_layer=2, n_head=4, n_embd=32, n_inner=48, block_size=48), **shape})
    with torch.no_grad():  # large enough weights that a swapped or misplaced tensor moves the logits
        for p in model.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.15))
    save_hf_llama(model, tmp_path / "llama")
    ids = torch.randint(0, model.config.vocab_size, (40,)).tolist()
    theirs = hf_logits(tmp_path / "llama", ids, output_attentions=True)
    torch.testing.assert_close(model(torch.tensor([ids])), theirs.logits, atol=1e-4, rtol=0)
    back = gptviz.load(tmp_path / "llama")
    assert back.report.missing == [] and back.report.unexpected == []
    t = gptviz.trace(back.model, ids)
    for layer, att in enumerate(theirs.attentions):
        torch.testing.assert_close(
            torch.tensor(t[f"blocks.{layer}.attn.weights"], dtype=torch.float32), att[0], atol=1e-5, rtol=0
        )


def test_only_a_llama_shape_is_written_as_a_llama(tmp_path):
    gpt2 = tiny_model()
    assert llama_refusals(gpt2.config)
    with pytest.raises(ConfigError, match=r"pos_encoding='learned' \(Llama: rotary\)"):
        save_hf_llama(gpt2, tmp_path / "no")
    gemma_like = tiny_model(**dict(LLAMA, norm_plus_one=True))
    assert llama_refusals(gemma_like.config) == ["its norms (Llama: RMSNorm × w)"]


@pytest.mark.slow
def test_train_llama_writes_a_hugging_face_directory_both_sides_read_alike(tmp_path):
    corpus = tmp_path / "play.txt"
    corpus.write_text(PLAY)
    out = tmp_path / "llama"
    argv = ["train", "--corpus", str(corpus), "--out", str(out), "--family", "llama", "--format", "hf"]
    argv += ["--tokenizer", "bpe", "--bpe-vocab", "300", "--n-layer", "2", "--n-head", "4", "--n-kv-head", "2"]
    argv += ["--n-embd", "32", "--block-size", "32", "--batch-size", "4", "--max-steps", "20", "--eval-interval", "10"]
    argv += ["--eval-batches", "2", "--warmup-steps", "5", "--threads", "1", "--preset-prompt", "ROMEO.\nBut"]
    assert main(argv) == 0
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json", "loss_curve.csv"}
    hf_config = json.loads((out / "config.json").read_text())
    assert hf_config["model_type"] == "llama" and hf_config["num_key_value_heads"] == 2
    assert hf_config["tie_word_embeddings"] is True and hf_config["intermediate_size"] == 96

    bundle = gptviz.load(out)
    assert bundle.report.format == "hf-llama (model.safetensors)" and bundle.report.warnings == []
    card = bundle.card
    assert card["command"] == shlex.join(["python", "-m", "gptviz", *argv])
    assert card["preset_prompt"] == "ROMEO.\nBut" and card["status"] == "finished"
    cfg = bundle.model.config
    assert (cfg.kv_heads, cfg.mlp_gated, cfg.pos_encoding, cfg.norm) == (2, True, "rotary", "rmsnorm")
    assert not [k for k in bundle.model.state_dict() if k.endswith("bias")]

    text = "JULIET.\nAy me! Ça va? — “quoted”"
    ids = Tokenizer.from_file(str(out / "tokenizer.json")).encode(text).ids
    assert bundle.tokenizer.encode(text) == ids
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out)(text).input_ids == ids
    with torch.no_grad():
        ours = bundle.model(torch.tensor([ids]))
    torch.testing.assert_close(ours, hf_logits(out, ids).logits, atol=1e-4, rtol=0)
