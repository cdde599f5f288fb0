"""Builders of checkpoints a stranger might hand over: a good one of each format, then edits of it.

Each builder writes into a folder and returns the path to give gptviz.load. The good ones are
loaded in tests/test_untrusted_files.py first, so an edit is the only thing that can break them."""

from __future__ import annotations

import json
import pickle
import struct
import zipfile
from pathlib import Path

import torch
from conftest import tiny_model
from safetensors.torch import save_file

import gptviz

CHARS = list("abcdefghij ")
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
MODEL = tiny_model()  # vocab 11, block 16, 2 layers, 2 heads, 16 wide
NANO_ARGS = dict(n_layer=2, n_head=2, n_embd=16, block_size=16, bias=True, vocab_size=11, dropout=0.0)
HF_CONFIG = {
    "model_type": "gpt2",
    "vocab_size": 11,
    "n_positions": 16,
    "n_layer": 2,
    "n_head": 2,
    "n_embd": 16,
    "activation_function": "gelu",
    "layer_norm_epsilon": 1e-5,
}


def native(root: Path, config: dict | None = None, tokenizer: object = ..., top: object = ...) -> Path:
    """gptviz.save's folder; config: fields to replace in its model config (None deletes a field),
    tokenizer: a replacement tokenizer spec, top: a replacement for the whole config.json value."""
    path = gptviz.save(MODEL, root / "native", gptviz.CharTokenizer(CHARS))
    meta = json.loads((path / "config.json").read_text())
    for key, value in (config or {}).items():
        if value is None and key.startswith("-"):
            meta["config"].pop(key[1:])
        else:
            meta["config"][key] = value
    if tokenizer is not ...:
        meta["tokenizer"] = tokenizer
    (path / "config.json").write_text(json.dumps(meta if top is ... else top))
    return path


def nano_state() -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in MODEL.state_dict().items()}  # nanoGPT's names are ours


def nanogpt(root: Path, args: object = ..., model: object = ..., meta: bytes | None = None, **extra) -> Path:
    """nanoGPT's ckpt.pt (+ meta.pkl) in a folder; args/model replace model_args/model."""
    path = root / "nano"
    path.mkdir(parents=True, exist_ok=True)
    ckpt = {
        "model": nano_state() if model is ... else model,
        "model_args": dict(NANO_ARGS) if args is ... else args,
        "iter_num": 10,
        **extra,
    }
    torch.save(ckpt, path / "ckpt.pt")
    itos = dict(enumerate(CHARS))
    (path / "meta.pkl").write_bytes(meta if meta is not None else pickle.dumps({"vocab_size": 11, "itos": itos}))
    return path


def nano_args(**changes) -> dict:
    return {**NANO_ARGS, **changes}


def hf(root: Path, config: dict | None = None, weights: str = "safetensors", state: dict | None = None) -> Path:
    """A Hugging Face GPT-2 folder written by hand: config.json, Conv1D weights stored [in, out]."""
    path = root / "hf"
    path.mkdir(parents=True, exist_ok=True)
    cfg = {**HF_CONFIG, **(config or {})}
    (path / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not ...}))
    if state is None:
        state = {}
        for key, value in tiny_model(activation="gelu").state_dict().items():
            if key == "lm_head.weight":
                continue  # tied: save_pretrained leaves it out
            state[key] = value.t().contiguous() if key.endswith(CONV1D) else value.clone()
    if weights == "safetensors":
        save_file(state, str(path / "model.safetensors"))
    else:
        torch.save(state, path / "pytorch_model.bin")
    return path


def sparse(path: Path, size: int = 6 * 2**30) -> Path:
    """A file that claims `size` bytes and holds none on disk: reading it whole would take `size`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"{")
        f.truncate(size)
    return path


def zip_bomb(path: Path, zeros: int = 2**30) -> Path:
    """A ckpt.pt in torch's zip layout whose optimizer holds `zeros` bytes of float32 zeros, every
    entry deflated (level 1, for speed): about 5 MB on disk per GiB it unpacks to. torch.load would
    read it (torch's reader inflates deflated entries) and allocate the whole GiB (test_load_memory
    proves it).

    Built without ever holding or writing the GiB: torch.save writes a small stand-in tensor whose
    length (MARK) is then rewritten in the pickle to the big one, and the zeros are streamed."""
    mark, n = 123457, zeros // 4  # both fit the pickle's 4-byte BININT, so the pickle keeps its length
    plain = path.with_suffix(".plain")
    torch.save({"model": nano_state(), "model_args": dict(NANO_ARGS), "optimizer": {"state": torch.zeros(mark)}}, plain)
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                assert data.count(struct.pack("<i", mark)) == 2  # the storage's length and the tensor's size
                dst.writestr(info.filename, data.replace(struct.pack("<i", mark), struct.pack("<i", n)))
            elif info.file_size == 4 * mark:  # the stand-in's storage: stream the zeros instead
                with dst.open(info.filename, "w", force_zip64=True) as out:
                    chunk = bytes(2**24)
                    for _ in range(zeros // len(chunk)):
                        out.write(chunk)
            else:
                dst.writestr(info.filename, data)
    plain.unlink()
    return path
