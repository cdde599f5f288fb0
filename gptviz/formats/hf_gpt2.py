"""Hugging Face GPT-2 directories: `config.json` + `model.safetensors` or `pytorch_model.bin`,
tokenizer from `tokenizer.json` or `vocab.json` + `merges.txt`. Nothing is ever downloaded.

GPT-2's module names are ours, so weights copy name for name, except that GPT-2 stores its four
projections as Conv1D, whose weight is the transpose of nn.Linear's: [in, out] instead of
[out, in]. Its `gelu_new` is the tanh approximation of GELU. `save_pretrained` leaves the tied
lm_head out of the file; the model ties it back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..config import GPTConfig
from ..errors import CheckpointError, ConfigError
from ..limits import MAX_TOKENIZER_BYTES
from ..tokenizers import BPETokenizer
from .bundle import Bundle, LoadReport, check_shapes, compute_dtype, fill_model, finish
from .hf_decoders import refuse_model_type
from .safe import check_file, read_json
from .weights import Weights

SAFETENSORS, PT_BIN = "model.safetensors", "pytorch_model.bin"
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
# buffers older transformers versions saved with the weights: the causal mask and its fill value
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")
# GPT-2's names for GPTConfig's fields, so a message names the field as config.json spells it
HF_NAMES = {"block_size": "n_positions", "norm_eps": "layer_norm_epsilon", "tie_weights": "tie_word_embeddings"}


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
    kind = hf.get("model_type")
    if kind != "gpt2":
        raise refuse_model_type(kind, source)
    act = hf.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        shown = repr(act) if len(repr(act)) < 40 else repr(act)[:37] + "..."
        raise CheckpointError(f"{source}: activation_function {shown} is not supported ({', '.join(ACTIVATIONS)})")
    if hf.get("scale_attn_weights", True) is not True or hf.get("scale_attn_by_inverse_layer_idx", False) is not False:
        raise CheckpointError(f"{source}: attention scaling other than 1/sqrt(D) is not supported")
    if hf.get("add_cross_attention", False) is not False:
        raise CheckpointError(f"{source}: cross-attention is not part of a decoder-only GPT")
    try:
        config = GPTConfig(
            vocab_size=hf.get("vocab_size", 50257),
            block_size=hf.get("n_positions", hf.get("n_ctx", 1024)),
            n_layer=hf.get("n_layer", 12),
            n_head=hf.get("n_head", 12),
            n_embd=hf.get("n_embd", 768),
            dropout=0.0,  # inference only
            bias=True,
            pos_encoding="learned",
            norm="layernorm",
            activation=ACTIVATIONS[act],
            tie_weights=hf.get("tie_word_embeddings", True),
            norm_eps=hf.get("layer_norm_epsilon", 1e-5),  # checked by GPTConfig, never float()ed blind
        )
    except (ConfigError, TypeError) as e:
        message = str(e)
        for ours, theirs in HF_NAMES.items():
            message = message.replace(f"{ours}=", f"{theirs}=")
        raise CheckpointError(f"{source}: the config does not describe a valid model ({message})") from None
    n_inner = hf.get("n_inner")
    if n_inner is not None and n_inner != 4 * config.n_embd:
        shown = repr(n_inner) if len(repr(n_inner)) < 40 else repr(n_inner)[:37] + "..."
        raise CheckpointError(f"{source}: n_inner={shown} but gptviz's MLP is 4 * n_embd = {4 * config.n_embd} wide")
    return config


def weights_file(path: Path) -> Weights:
    """The directory's weights file, its shapes and dtypes known and nothing else read yet."""
    for name in (SAFETENSORS, PT_BIN):
        if (path / name).exists():
            return Weights([path / name])
    if any(path.glob("*.index.json")):
        raise CheckpointError(f"{path}: sharded weights (*.index.json) are not supported; save with one file")
    raise CheckpointError(f"{path}: no {SAFETENSORS} or {PT_BIN} beside config.json")


def as_gptviz_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """GPT-2's tensor shapes under our names (its Conv1D weights are stored [in, out])."""
    out = {}
    for key, shape in shapes.items():
        name = gptviz_name(key)
        if name is not None:
            out[name] = tuple(reversed(shape)) if name.endswith(CONV1D) and len(shape) == 2 else shape
    return out


def gptviz_name(key: str) -> str | None:
    """A GPT-2 key as our model names it (the `transformer.` prefix added where GPT2Model left it
    out), or None for a saved mask buffer, which is not a weight."""
    if key.endswith(MASK_BUFFERS):
        return None  # our causal mask is built per call
    return key if key.startswith(("transformer.", "lm_head.")) else f"transformer.{key}"


def gptviz_tensors(weights: Weights, report: LoadReport) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """Our key for each of the file's tensors and how to read it (Conv1D weights transposed to
    Linear's [out, in]); saved mask buffers left out. A tied head comes last, as load_state_dict
    would have left it."""
    out = []
    for key in weights.shapes:
        name = gptviz_name(key)
        if name is None:
            continue
        if name.endswith(CONV1D) and len(weights.shapes[key]) == 2:
            report.reshaped.append(name)
            out.append((name, lambda key=key: weights.get(key).t()))  # Conv1D [in, out] -> Linear [out, in]
        else:
            out.append((name, lambda key=key: weights.get(key)))
    return sorted(out, key=lambda item: item[0] == "lm_head.weight")


def hf_tokenizer(path: Path) -> tuple[BPETokenizer | None, str]:
    """The tokenizer in an HF directory, and a note when there is none. Files are sized before read."""
    if (path / "tokenizer.json").exists():
        check_file(path / "tokenizer.json", MAX_TOKENIZER_BYTES, "tokenizer file")
        return BPETokenizer.from_file(path / "tokenizer.json"), ""
    vocab, merges = path / "vocab.json", path / "merges.txt"
    if vocab.exists() and merges.exists():
        check_file(vocab, MAX_TOKENIZER_BYTES, "tokenizer file")
        check_file(merges, MAX_TOKENIZER_BYTES, "tokenizer file")
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


def load_hf_gpt2(path: Path, device: torch.device, dtype: str = "auto") -> Bundle:
    hf = read_json(path / "config.json")
    config = config_from_hf(hf, path / "config.json")
    report = LoadReport(path=str(path), format="hf-gpt2")
    weights = weights_file(path)
    file = weights.files[0]
    report.format = f"hf-gpt2 ({file.name})"
    shapes = as_gptviz_shapes(weights.shapes)
    check_shapes(config, shapes, report, file)  # before a byte of weights is read
    if not any(k.startswith("transformer.h.") for k in shapes):
        raise CheckpointError(f"{file}: no GPT-2 block weights (transformer.h.*) in the file")
    tokenizer, note = hf_tokenizer(path)
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"{path}: the tokenizer has {tokenizer.vocab_size} tokens but the model only {config.vocab_size} ids"
        )
    dtype_ = compute_dtype(weights.floating_dtypes(), dtype, config, device, report)
    model = fill_model(config, gptviz_tensors(weights, report), dtype_, device, report, file)
    if tokenizer is not None:
        report.tokenizer = tokenizer.kind
    else:
        report.warnings.append(note)
    card = {"source": "Hugging Face GPT-2 directory"}
    if isinstance(hf.get("_name_or_path"), str) and hf["_name_or_path"]:
        card["name_or_path"] = hf["_name_or_path"][:200]
    return Bundle(finish(model, report, device), tokenizer, report, card)
