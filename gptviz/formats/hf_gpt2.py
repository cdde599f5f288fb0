"""Hugging Face GPT-2 directories: `config.json` + `model.safetensors` or `pytorch_model.bin`,
tokenizer from `tokenizer.json` or `vocab.json` + `merges.txt`. Nothing is ever downloaded.

GPT-2's module names are ours, so weights copy name for name, except that GPT-2 stores its four
projections as Conv1D, whose weight is the transpose of nn.Linear's: [in, out] instead of
[out, in]. Its `gelu_new` is the tanh approximation of GELU. `save_pretrained` leaves the tied
lm_head out of the file; the model ties it back.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..config import GPTConfig
from ..errors import CheckpointError, ConfigError
from ..model import GPT
from ..tokenizers import BPETokenizer
from .bundle import Bundle, LoadReport, finish, load_state_into
from .safe import read_json, torch_load

SAFETENSORS, PT_BIN = "model.safetensors", "pytorch_model.bin"
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
# buffers older transformers versions saved with the weights: the causal mask and its fill value
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")


def is_hf(path: Path) -> bool:
    """A directory with a Hugging Face config.json (any model type; the loader says if it is not GPT-2)."""
    cfg = path / "config.json"
    if not (path.is_dir() and cfg.is_file()):
        return False
    try:
        return "gptviz_format" not in json.loads(cfg.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError):
        return True  # unreadable: let the loader name the problem


def config_from_hf(hf: dict, source: Path) -> GPTConfig:
    kind = hf.get("model_type")
    if kind != "gpt2":
        raise CheckpointError(
            f"{source}: model_type is {kind!r}, not 'gpt2'; gptviz loads GPT-2 style decoders only"
            if kind
            else f"{source}: no model_type; not a Hugging Face model config"
        )
    act = hf.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise CheckpointError(f"{source}: activation_function {act!r} is not supported ({', '.join(ACTIVATIONS)})")
    n_embd = hf.get("n_embd", 768)
    if hf.get("n_inner") not in (None, 4 * n_embd):
        raise CheckpointError(f"{source}: n_inner={hf['n_inner']} but gptviz's MLP is 4 * n_embd = {4 * n_embd} wide")
    if hf.get("scale_attn_weights", True) is False or hf.get("scale_attn_by_inverse_layer_idx", False):
        raise CheckpointError(f"{source}: attention scaling other than 1/sqrt(D) is not supported")
    if hf.get("add_cross_attention"):
        raise CheckpointError(f"{source}: cross-attention is not part of a decoder-only GPT")
    try:
        return GPTConfig(
            vocab_size=hf.get("vocab_size", 50257),
            block_size=hf.get("n_positions", hf.get("n_ctx", 1024)),
            n_layer=hf.get("n_layer", 12),
            n_head=hf.get("n_head", 12),
            n_embd=n_embd,
            dropout=0.0,  # inference only
            bias=True,
            pos_encoding="learned",
            norm="layernorm",
            activation=ACTIVATIONS[act],
            tie_weights=bool(hf.get("tie_word_embeddings", True)),
            norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
        )
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"{source}: the config does not describe a valid model ({e})") from None


def read_weights(path: Path) -> tuple[dict[str, torch.Tensor], Path]:
    if (path / SAFETENSORS).is_file():
        file = path / SAFETENSORS
        try:
            return load_file(str(file)), file
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"{file}: not a readable safetensors file, truncated or corrupt ({e})") from None
    if (path / PT_BIN).is_file():
        file = path / PT_BIN
        state = torch_load(file)
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise CheckpointError(f"{file}: expected a state dict of tensors")
        return state, file
    if any(path.glob("*.index.json")):
        raise CheckpointError(f"{path}: sharded weights (*.index.json) are not supported; save with one file")
    raise CheckpointError(f"{path}: no {SAFETENSORS} or {PT_BIN} beside config.json")


def to_gptviz_state(state: dict[str, torch.Tensor], report: LoadReport) -> dict[str, torch.Tensor]:
    """GPT-2 keys -> our keys: the `transformer.` prefix added where GPT2Model left it out,
    Conv1D weights transposed, saved mask buffers dropped."""
    out = {}
    for key, value in state.items():
        if key.endswith(MASK_BUFFERS):
            continue  # not a weight: our causal mask is built from block_size
        name = key if key.startswith(("transformer.", "lm_head.")) else f"transformer.{key}"
        if name.endswith(CONV1D):
            value = value.t().contiguous()  # Conv1D [in, out] -> Linear [out, in]
            report.reshaped.append(name)
        out[name] = value
    return out


def hf_tokenizer(path: Path) -> tuple[BPETokenizer | None, str]:
    """The tokenizer in an HF directory, and a note when there is none."""
    if (path / "tokenizer.json").is_file():
        return BPETokenizer.from_file(path / "tokenizer.json"), ""
    vocab, merges = path / "vocab.json", path / "merges.txt"
    if vocab.is_file() and merges.is_file():
        return BPETokenizer.from_vocab_merges(vocab, merges), ""
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
    hf = read_json(path / "config.json")
    config = config_from_hf(hf, path / "config.json")
    raw, file = read_weights(path)
    report = LoadReport(path=str(path), format=f"hf-gpt2 ({file.name})")
    dtypes = sorted({str(v.dtype).removeprefix("torch.") for v in raw.values() if v.is_floating_point()})
    if dtypes and dtypes != ["float32"]:
        report.warnings.append(f"weights stored as {', '.join(dtypes)}, computed in float32")
    state = to_gptviz_state(raw, report)
    if not any(k.startswith("transformer.h.") for k in state):
        raise CheckpointError(f"{file}: no GPT-2 block weights (transformer.h.*) in the file")
    model = GPT(config)
    load_state_into(model, state, report, file)
    tokenizer, note = hf_tokenizer(path)
    if tokenizer is not None:
        if tokenizer.vocab_size > config.vocab_size:
            raise CheckpointError(
                f"{path}: the tokenizer has {tokenizer.vocab_size} tokens but the model only {config.vocab_size} ids"
            )
        report.tokenizer = tokenizer.kind
    else:
        report.warnings.append(note)
    card = {"source": "Hugging Face GPT-2 directory"}
    if hf.get("_name_or_path"):
        card["name_or_path"] = hf["_name_or_path"]
    return Bundle(finish(model, report, device), tokenizer, report, card)
