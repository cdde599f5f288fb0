"""The two "load your own checkpoint" samples (samples/own-checkpoints/) are what their tools save,
and gptviz reads them as those tools would: nanoGPT's ckpt.pt + meta.pkl gives the shipped
shakespeare-char model bit for bit; the Hugging Face GPT-2 folder, which transformers wrote itself,
gives transformers' own logits."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from tokenizers import Tokenizer as HFTokenizer

import gptviz

ROOT = Path(__file__).resolve().parents[1]
OWN = ROOT / "samples" / "own-checkpoints"
PROMPT = "ROMEO.\nBut soft, what light through yonder window breaks?"


def test_the_nanogpt_sample_is_nanogpts_dict_and_loads_as_the_shipped_model():
    ckpt = torch.load(OWN / "nanogpt-char" / "ckpt.pt", weights_only=True)
    assert {"model", "optimizer", "model_args", "iter_num", "best_val_loss", "config"} <= set(ckpt)
    with open(OWN / "nanogpt-char" / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert set(meta) == {"vocab_size", "itos", "stoi"}
    ours, shipped = gptviz.load(OWN / "nanogpt-char"), gptviz.load(ROOT / "checkpoints" / "shakespeare-char")
    assert ours.report.format == "nanogpt" and ours.report.tokenizer == "char"
    ids = ours.tokenizer.encode(PROMPT)
    assert ids == [meta["stoi"][ch] for ch in PROMPT]
    x = torch.tensor([ids])
    assert torch.equal(ours.model(x), shipped.model(x))


def test_the_hf_gpt2_sample_gives_transformers_own_logits():
    from transformers import GPT2LMHeadModel

    folder = OWN / "hf-gpt2-bpe"
    ours = gptviz.load(folder)
    assert ours.report.format.startswith("hf-gpt2")
    ids = ours.tokenizer.encode(PROMPT)
    assert ids == HFTokenizer.from_file(str(folder / "tokenizer.json")).encode(PROMPT).ids
    theirs = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        assert (ours.model(x) - theirs(x).logits).abs().max().item() < 1e-4
