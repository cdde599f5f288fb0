"""Hugging Face GPT-2 directories: `config.json` + `model.safetensors` or `pytorch_model.bin`,
tokenizer from `tokenizer.json` or `vocab.json` + `merges.txt`. Nothing is ever downloaded.

GPT-2 is one record in families.py and loads through hf_decoders like every other family: its
module names are ours, except that GPT-2 stores its four projections as Conv1D, whose weight is
the transpose of nn.Linear's ([in, out] instead of [out, in]); its `gelu_new` is the tanh
approximation of GELU; `save_pretrained` leaves the tied lm_head out of the file. What is left
here: telling a Hugging Face directory from others, and the vocab.json + merges.txt tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..config import GPTConfig
from ..errors import CheckpointError
from ..limits import MAX_TOKENIZER_BYTES
from ..tokenizers import BPETokenizer
from .bundle import Bundle
from .hf_config import config_from_hf_decoder, refuse_model_type
from .safe import check_file, read_json

SAFETENSORS, PT_BIN = "model.safetensors", "pytorch_model.bin"
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def is_hf(path: Path) -> bool:
    """A directory with a Hugging Face config.json (any model type; the loader says if it is not GPT-2)."""
    cfg = path / "config.json"
    if not (path.is_dir() and cfg.is_file()):
        return False
    try:
        return "gptviz_format" not in read_json(cfg)
    except CheckpointError:
        return True  # unreadable or too large: let the loader name the problem


def config_from_hf(hf: dict, source: Path) -> GPTConfig:
    """The GPTConfig of a GPT-2 config.json (its record in families.py)."""
    if hf.get("model_type") != "gpt2":
        raise refuse_model_type(hf.get("model_type"), source)
    return config_from_hf_decoder(hf, source)[0]


def hf_tokenizer(
    path: Path, vocab_size: int | None = None, context: int | None = None
) -> tuple[BPETokenizer | None, str]:
    """The tokenizer in an HF directory, and a note when there is none. Files are sized before read
    and checked against a model of vocab_size ids before the library builds them."""
    if (path / "tokenizer.json").exists():
        check_file(path / "tokenizer.json", MAX_TOKENIZER_BYTES, "tokenizer file")
        return BPETokenizer.from_file(path / "tokenizer.json", vocab_size=vocab_size, context=context), ""
    vocab, merges = path / "vocab.json", path / "merges.txt"
    if vocab.exists() and merges.exists():
        check_file(vocab, MAX_TOKENIZER_BYTES, "tokenizer file")
        check_file(merges, MAX_TOKENIZER_BYTES, "tokenizer file")
        return BPETokenizer.from_vocab_merges(vocab, merges, vocab_size), ""
    if vocab.is_file() or merges.is_file():
        have, lack = (vocab, merges) if vocab.is_file() else (merges, vocab)
        return (
            None,
            f"no tokenizer: {have.name} is there but {lack.name} is missing, so text input is off; give token ids",
        )
    return None, (
        "no tokenizer: the directory has neither tokenizer.json nor vocab.json + merges.txt, "
        "so text input is off; give token ids"
    )


def load_hf_gpt2(path: Path, device: torch.device) -> Bundle:
    """A GPT-2 directory, through the one loader of every family."""
    from .hf_decoders import load_hf_decoder  # hf_decoders reads the tokenizer from here

    return load_hf_decoder(path, device)
