"""Write the two "your own checkpoint" samples, each the way its own tool saves it:

- `nanogpt-char/`: `ckpt.pt` with the dict nanoGPT's train.py writes (model, optimizer, model_args,
  iter_num, best_val_loss, config) and the char vocabulary as its data/prepare.py writes `meta.pkl`;
- `hf-gpt2-bpe/`: a Hugging Face GPT-2 directory written by transformers' own `save_pretrained`
  (config.json, model.safetensors in bfloat16 as the Hub ships weights) and the byte-level BPE
  `tokenizer.json` beside it.

The weights are the shipped shakespeare-char and shakespeare-bpe models (checkpoints/README.md), so
the dashboard shows the same heads through a foreign format. Run from the repository root:

    .venv/bin/python samples/own-checkpoints/make.py
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import torch

import gptviz
from gptviz.bench.forward import to_hf_gpt2

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent


def nanogpt() -> None:
    bundle = gptviz.load(ROOT / "checkpoints" / "shakespeare-char")
    c, card = bundle.model.config, bundle.card
    folder = OUT / "nanogpt-char"
    folder.mkdir(exist_ok=True)
    model_args = dict(
        n_layer=c.n_layer,
        n_head=c.n_head,
        n_embd=c.n_embd,
        block_size=c.block_size,
        bias=c.bias,
        vocab_size=c.vocab_size,
    )
    state = {k: v.clone() for k, v in bundle.model.state_dict().items()}
    config = {"dataset": "shakespeare_char", "batch_size": card.get("batch_size"), "learning_rate": card.get("lr")}
    ckpt = dict(
        model=state,
        optimizer={},
        model_args=model_args,
        iter_num=card["steps"],
        best_val_loss=card["val_loss"],
        config=config,
    )
    torch.save(ckpt, folder / "ckpt.pt")
    chars = [bundle.tokenizer.decode([i]) for i in range(c.vocab_size)]
    meta = {"vocab_size": c.vocab_size, "itos": dict(enumerate(chars)), "stoi": {ch: i for i, ch in enumerate(chars)}}
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)


def hf_gpt2() -> None:
    source = ROOT / "checkpoints" / "shakespeare-bpe"
    model = gptviz.load(source).model
    hf = to_hf_gpt2(model, special_ids=False)  # the model has no special tokens (GPT-2 names id 50256)
    folder = OUT / "hf-gpt2-bpe"
    hf.to(torch.bfloat16).save_pretrained(folder)
    shutil.copy(source / "tokenizer.json", folder / "tokenizer.json")


if __name__ == "__main__":
    nanogpt()
    hf_gpt2()
    print(f"wrote {OUT / 'nanogpt-char'} and {OUT / 'hf-gpt2-bpe'}")
